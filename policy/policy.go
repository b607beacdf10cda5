package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"path"
	"slices"
	"time"

	guard "github.com/guard-mcp/guard"
)

// Policy is a configuration compiled for deciding.
type Policy struct {
	rules     []Rule
	def       string
	monitor   bool
	limits    []Limit
	servers   map[string]*Server
	protected *Protected
	version   string
	// hideDenied is policy.hide_denied: listings leave out the tools
	// the rules deny to their caller (Hides). It decides no call, so
	// the version does not cover it.
	hideDenied bool
}

// Compile prepares a configuration (its policy's part) for deciding. approved are the rules
// learned from approvals: after the configured rules, before the default.
func Compile(src Source, approved []Rule, prot *Protected) *Policy {
	c := src.PolicyConfig()
	p := &Policy{
		rules:      append(append([]Rule(nil), c.Policy.Rules...), approved...),
		def:        c.Policy.Default,
		monitor:    c.Policy.Mode == "monitor",
		limits:     c.Limits,
		servers:    c.Servers,
		protected:  prot,
		hideDenied: c.Policy.HideDenied,
	}
	type versioned struct {
		Rules   []Rule
		Default string
		Mode    string
		Servers map[string]*Server
		Limits  []Limit
	}
	b, _ := json.Marshal(versioned{p.rules, p.def, c.Policy.Mode, p.servers, c.Limits})
	sum := sha256.Sum256(b)
	p.version = "sha256:" + hex.EncodeToString(sum[:8])
	return p
}

// Rules are the rules in order, learned ones included.
func (p *Policy) Rules() []Rule { return p.rules }

// DefaultAction is the configured default.
func (p *Policy) DefaultAction() string { return p.def }

// Version identifies the rules in force.
func (p *Policy) Version() string { return p.version }

// Decide returns what to do with a call: the built-in self-protection rule
// first, then the first matching rule, then the default. In monitor mode
// every call is allowed and the verdict says what enforcement would have
// done (the built-in self-protection rule is always enforced).
func (p *Policy) Decide(call *guard.Call) guard.Verdict {
	v := p.decide(call)
	v.PolicyVersion = p.version
	p.approvers(&v, call)
	// guard's own protection is enforced in monitor mode too.
	if p.monitor && v.Action != guard.ActionAllow && v.Rule != guard.SelfProtectionRule {
		v.Would, v.Action = v.Action, guard.ActionAllow
	}
	return v
}

func (p *Policy) decide(call *guard.Call) guard.Verdict {
	if p.protected != nil {
		if reason := p.protected.Check(call.Arguments); reason != "" {
			return guard.Verdict{Action: guard.ActionDeny, Rule: guard.SelfProtectionRule, Reason: reason}
		}
		if reason := p.protected.CheckURI(call.URI); reason != "" {
			return guard.Verdict{Action: guard.ActionDeny, Rule: guard.SelfProtectionRule, Reason: reason}
		}
	}
	if call.Violations != "" {
		return guard.Verdict{Action: guard.ActionDeny, Rule: guard.InputSchemaRule, Reason: call.Violations}
	}
	if r := call.Review; r != nil && r.State != guard.ReviewAccepted {
		if r.State == guard.ReviewRejected {
			reason := "the tool's definition was rejected"
			if r.DecidedBy != "" {
				reason += " by " + r.DecidedBy
			}
			return guard.Verdict{Action: guard.ActionDeny, Rule: guard.ToolReviewRule, Reason: reason}
		}
		return guard.Verdict{Action: guard.ActionApprove, Rule: guard.ToolReviewRule, Reason: call.ReviewReason}
	}
	act := activation{call: call, now: call.Time}
	if act.now.IsZero() {
		act.now = time.Now()
	}
	for i := range p.rules {
		r := &p.rules[i]
		if !r.targets(call) || !r.matchesUser(call.User) {
			continue
		}
		if r.prog != nil {
			ok, err := eval(r.prog, &act)
			if err != nil {
				return r.failed(err)
			}
			if !ok {
				continue
			}
		}
		return r.verdict()
	}
	return p.byDefault(call)
}

// verdict is what a rule decides of a call it matches.
func (r *Rule) verdict() guard.Verdict {
	return guard.Verdict{Action: r.Action, Rule: r.Name, Reason: r.Reason, Approvers: r.Approvers}
}

// failed is what a rule decides of a call its condition cannot be
// evaluated for: it fails closed, denying, and says why.
func (r *Rule) failed(err error) guard.Verdict {
	return guard.Verdict{Action: guard.ActionDeny, Rule: r.Name,
		Reason: "the rule's condition could not be evaluated: " + err.Error()}
}

// matchesUser reports whether a rule's users: and groups: let it apply to
// the caller: a rule with users applies to a caller named there, by
// subject or email; one with groups, to a caller in one of them. No one
// authenticated matches neither.
func (r *Rule) matchesUser(u guard.Identity) bool {
	if len(r.Users) > 0 && (u.Subject == "" || !slices.Contains(r.Users, u.Subject) && (u.Email == "" || !slices.Contains(r.Users, u.Email))) {
		return false
	}
	if len(r.Groups) > 0 && !slices.ContainsFunc(u.Groups, func(g string) bool { return slices.Contains(r.Groups, g) }) {
		return false
	}
	return true
}

// approvers gives a verdict that holds a call its server's approvers when
// its rule names none. A call held for its tool's review is not: its
// definition is reviewed, and the rules decide the call afterwards.
func (p *Policy) approvers(v *guard.Verdict, call *guard.Call) {
	if v.Action != guard.ActionApprove || v.Rule == guard.ToolReviewRule || !v.Approvers.IsZero() {
		return
	}
	if s := p.servers[call.Server]; s != nil {
		v.Approvers = s.Approvers
	}
}

func glob(pattern, name string) bool {
	ok, err := path.Match(pattern, name)
	return err == nil && ok
}

func (p *Policy) byDefault(call *guard.Call) guard.Verdict {
	v := guard.Verdict{Rule: "default"}
	switch p.def {
	case "allow":
		v.Action, v.Reason = guard.ActionAllow, "the default policy allows"
		return v
	case "deny":
		v.Action, v.Reason = guard.ActionDeny, "the default policy denies"
		return v
	case "approve":
		v.Action, v.Reason = guard.ActionApprove, "the default policy holds every call for approval"
		return v
	}
	if call.Method != "tools/call" {
		v.Action, v.Reason = guard.ActionAllow, "not a tool call"
		return v
	}
	if call.Tool == nil {
		v.Action, v.Reason = guard.ActionApprove, "the tool is not in the catalog"
		return v
	}
	if s := p.servers[call.Server]; s != nil && !s.TrustAnnotations {
		v.Action, v.Reason = guard.ActionApprove, "the server's annotations are not trusted (trust_annotations: false)"
		return v
	}
	a := call.Tool.Annotations
	readOnly, destructive, _, openWorld := a.Effective()
	switch {
	case readOnly:
		v.Action, v.Reason = guard.ActionAllow, "read-only tool (readOnlyHint true)"
	case a.ReadOnlyHint == nil && a.DestructiveHint == nil:
		v.Action, v.Reason = guard.ActionApprove, "no annotations: the specification's default is destructive"
	case destructive:
		v.Action, v.Reason = guard.ActionApprove, "destructive tool (destructiveHint true)"
	case openWorld:
		v.Action, v.Reason = guard.ActionApprove, "open-world write (openWorldHint true)"
	default:
		v.Action, v.Reason = guard.ActionAllow, "non-destructive write in a closed world"
	}
	return v
}
