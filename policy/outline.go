package policy

import guard "github.com/guard-mcp/guard"

// Outline says what the policy does with calls to a tool, whatever their
// arguments: conditional are the rules with a condition that come before
// the one deciding the rest and may each decide a call (their action, name
// and reason, in order), and otherwise is what decides a call none of them
// matches. Deciding a call with made-up arguments would describe a tool
// whose rule tests an argument by that test's failure (a denial) instead.
// A rule limited to some callers (users:, groups:) is conditional too: it
// depends on who calls.
func (p *Policy) Outline(call *guard.Call) (conditional []guard.Verdict, otherwise guard.Verdict) {
	plain := *p
	plain.rules = nil
	for _, r := range p.rules {
		if !r.conditional() {
			plain.rules = append(plain.rules, r)
		}
	}
	otherwise = plain.Decide(call)
	if otherwise.Rule != "default" && !plain.hasRule(otherwise.Rule) {
		return nil, otherwise // decided before every rule (guard's own)
	}
	for i := range p.rules {
		r := &p.rules[i]
		if !r.targets(call) {
			continue
		}
		if !r.conditional() {
			break
		}
		v := guard.Verdict{Action: r.Action, Rule: r.Name, Reason: r.Reason, PolicyVersion: p.version}
		if p.monitor && v.Action != guard.ActionAllow {
			v.Would, v.Action = v.Action, guard.ActionAllow
		}
		conditional = append(conditional, v)
	}
	return conditional, otherwise
}

// targets reports whether a rule is about a call's method, server, tool
// and resource, its condition aside.
func (r *Rule) targets(call *guard.Call) bool {
	return r.Method == call.Method && glob(r.Server, call.Server) && glob(r.Tool, call.ToolName) &&
		(r.URI == "" || glob(r.URI, call.URI))
}

// conditional reports whether a rule decides only some calls to what it
// targets: those its condition holds for, or those of its users and
// groups.
func (r *Rule) conditional() bool {
	return r.prog != nil || len(r.Users) > 0 || len(r.Groups) > 0
}

func (p *Policy) hasRule(name string) bool {
	for _, r := range p.rules {
		if r.Name == name {
			return true
		}
	}
	return false
}
