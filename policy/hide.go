package policy

import guard "github.com/guard-mcp/guard"

// DeniesEveryCall reports whether the policy denies every call of the tool
// call names (call.Server, call.ToolName, call.Tool: the tool's accepted
// definition; call.Client, call.User: who asks; call.Arguments nil:
// unknown), whatever its arguments. It is conservative: true only when
// certain. When true, v is the verdict that denies; when false, v is the
// verdict that decides every call when one does (an allow or approve rule,
// the default), and zero when the arguments decide.
//
// It reads the rules as Decide does for tools/call, in order, with the
// arguments and the time unknown (evalWhatever): a rule whose condition
// holds for no call is passed, one that holds for every call decides, and
// one that holds for some decides those calls, so that the tool stays
// shown unless the rule denies them too. What Decide checks before the
// rules depends on the arguments (guard's own files, the inputSchema) or
// is the relay's to list (a review): it is never a reason to hide. Rate
// limits do not deny a tool, they pace it. In monitor mode the rules deny
// nothing (only guard's own protection is enforced, by the arguments), so
// it is false.
func (p *Policy) DeniesEveryCall(call *guard.Call) (_ bool, v guard.Verdict) {
	if p.monitor {
		return false, guard.Verdict{}
	}
	c := &guard.Call{Server: call.Server, Method: "tools/call", ToolName: call.ToolName, Tool: call.Tool,
		Client: call.Client, User: call.User}
	who := &callers{call: c}
	for i := range p.rules {
		r := &p.rules[i]
		if !r.targets(c) || !r.matchesUser(c.User) {
			continue
		}
		v = r.verdict()
		if r.prog != nil {
			switch w, err := evalWhatever(r.prog, who); w {
			case holdsForNone:
				continue
			case holdsForSome:
				if r.Action == guard.ActionDeny {
					continue // the calls it holds for are denied, the others go on
				}
				return false, guard.Verdict{}
			case failsForAll:
				v = r.failed(err)
			}
		}
		v.PolicyVersion = p.version
		return v.Action == guard.ActionDeny, v
	}
	v = p.byDefault(c)
	v.PolicyVersion = p.version
	return v.Action == guard.ActionDeny, v
}

// Hides reports whether tools/list through guard leaves the tool call
// names out of this caller's listing: policy.hide_denied is on and the
// policy denies every call of it (DeniesEveryCall, whose verdict it
// returns). In monitor mode it hides nothing.
func (p *Policy) Hides(call *guard.Call) (bool, guard.Verdict) {
	if !p.hideDenied {
		return false, guard.Verdict{}
	}
	return p.DeniesEveryCall(call)
}

// Hides is Policy.Hides with the policy in force. A listing that asks it
// of many tools may take Policy once instead, so that a reload midway
// does not split it between two policies.
func (e *Engine[S]) Hides(call *guard.Call) (bool, guard.Verdict) {
	return e.cur.Load().Hides(call)
}
