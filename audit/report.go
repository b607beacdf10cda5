package audit

import (
	"cmp"
	"slices"
	"strings"
	"time"

	guard "github.com/guard-mcp/guard"
)

// Activity is what the audit log says about a period: the figures of a
// compliance report. The engines count the records in their queries
// (a report over a million calls takes a few seconds, not a walk of every
// record) and hand the groups to Activity, which adds them up.
type Activity struct {
	Since, Until time.Time
	// Calls counts the calls made in the period: tools/call, and the
	// requests of other methods that policy decided (resources/read, ...),
	// each once however many rounds it had. Requests counts every request
	// in either direction (initialize, tools/list, ... included).
	Calls, Requests int64
	// Archived counts the requests of the period whose records retention
	// moved to archives (audit.retention): they are counted nowhere else.
	Archived int64
	// Allowed, Denied and Held split Calls by what policy decided when
	// the call arrived (a held call is counted as held, whoever decided
	// it later: see Approvals).
	Allowed, Denied, Held int64
	// Errors counts the calls whose outcome was an error (ErrorOutcomes).
	Errors int64
	// Tools are the calls per server and tool (or method, for a call that
	// is not a tools/call), by server then tool.
	Tools []ToolActivity
	// Outcomes counts the calls' final outcomes, by outcome.
	Outcomes []Count
	// Decisions counts what policy decided, by rule (or "default") and
	// decision, the most frequent first.
	Decisions []RuleDecisions
	// Denials are the calls denied, by rule, reason, server and tool, the
	// most frequent first (a person's denials are in Approvals).
	Denials []Denial
	// Approvals are the calls held for a person, in the order they were
	// held.
	Approvals []HeldCall
	// ToolChanges are the tool definitions first seen, or reviewed, in the
	// period, in the order they were seen (then those reviewed, when the
	// catalog does not have them): a review as the log records it where
	// it does, else as the catalog's working table says.
	ToolChanges []ToolChange
	// PolicyChanges are the rules learned and the configurations loaded
	// in the period, in order.
	PolicyChanges []PolicyChange
}

// ErrorOutcomes are the outcomes a report counts as errors: the tool said
// it failed, the server answered with a JSON-RPC error, or it could not be
// reached.
var ErrorOutcomes = []string{guard.OutcomeToolError, guard.OutcomeProtocolError, guard.OutcomeUpstreamFailed}

// ToolActivity is one tool's calls in a period.
type ToolActivity struct {
	Server, Tool                  string
	Calls                         int64
	Allowed, Denied, Held, Errors int64
}

// Count is a number of calls with one value of a field.
type Count struct {
	Value string
	N     int64
}

// RuleDecisions is how many calls one rule (or the default) allowed,
// denied and held.
type RuleDecisions struct {
	DecidedBy             string
	Allowed, Denied, Held int64
}

// Denial is a number of calls denied by one rule for one reason.
type Denial struct {
	DecidedBy, Reason, Server, Tool string
	N                               int64
}

// Verdicts a person (or the clock) gave a held call, as a report names
// them.
const (
	HeldApproved  = "approved"
	HeldDenied    = "denied"
	HeldExpired   = "expired"
	HeldWithdrawn = "withdrawn"
	// HeldUndecided: no decision in the log yet (the client may have been
	// told to retry once someone decides).
	HeldUndecided = "undecided"
)

// HeldCall is one call held for a person, and what became of it.
type HeldCall struct {
	CallID, Approval string
	Server, Tool     string
	HeldAt           time.Time
	// HeldBy is the rule (or "default") that held the call, Why its
	// reason.
	HeldBy, Why string
	// Verdict is one of the Held* constants; DecidedBy and Reason are the
	// person's (empty for an expiry or a withdrawal).
	Verdict, DecidedBy, Reason string
	// DecidedAt is the time of the decision record for the call, or,
	// without one, of the call's outcome (which, for an approved call,
	// comes after the server answered); zero when undecided.
	DecidedAt time.Time
	// Waited is DecidedAt - HeldAt (zero when undecided).
	Waited time.Duration
}

// ToolChange is one tool definition first seen, or reviewed, in a period.
type ToolChange struct {
	Server, Tool, Pin string
	FirstSeen         time.Time
	// Cause is why the definition was (or was not) reviewed: baseline,
	// new, changed or flagged; State its review state: accepted, pending
	// or rejected.
	Cause, State string
	DecidedBy    string
	DecidedAt    time.Time
}

// PolicyChange is a change to what decides calls, as the log records it:
// a rule learned from an approval, or a configuration loaded.
type PolicyChange struct {
	Time time.Time
	// Kind is the record's: guard.KindRuleAdded or guard.KindConfig.
	Kind string
	// What is the rule's name, or how the configuration was loaded
	// (loaded, reloaded, held for a person, ...).
	What              string
	DecidedBy, Reason string
	// Server and Tool are what a learned rule allows.
	Server, Tool string
}

// CallGroup is a number of requests alike in what a report counts.
type CallGroup struct {
	Server, Tool, Decision, DecidedBy, Reason string
	// IsCall tells a call (a request policy decided) from another
	// request.
	IsCall bool
	N      int64
}

// Add counts N requests of a group (N < 0 takes them off).
func (a *Activity) Add(g CallGroup) {
	a.Requests += g.N
	if !g.IsCall {
		return
	}
	a.Calls += g.N
	t := a.tool(g.Server, g.Tool)
	t.Calls += g.N
	if g.Decision == "" {
		return
	}
	i := slices.IndexFunc(a.Decisions, func(d RuleDecisions) bool { return d.DecidedBy == g.DecidedBy })
	if i < 0 {
		i = len(a.Decisions)
		a.Decisions = append(a.Decisions, RuleDecisions{DecidedBy: g.DecidedBy})
	}
	d := &a.Decisions[i]
	switch g.Decision {
	case guard.DecisionAllowed:
		a.Allowed, t.Allowed, d.Allowed = a.Allowed+g.N, t.Allowed+g.N, d.Allowed+g.N
	case guard.DecisionDenied:
		a.Denied, t.Denied, d.Denied = a.Denied+g.N, t.Denied+g.N, d.Denied+g.N
		key := Denial{DecidedBy: g.DecidedBy, Reason: g.Reason, Server: g.Server, Tool: g.Tool}
		i := slices.IndexFunc(a.Denials, func(x Denial) bool { x.N = 0; return x == key })
		if i < 0 {
			i = len(a.Denials)
			a.Denials = append(a.Denials, key)
		}
		a.Denials[i].N += g.N
	case guard.DecisionHeld:
		a.Held, t.Held, d.Held = a.Held+g.N, t.Held+g.N, d.Held+g.N
	}
}

// tool returns the activity of one tool, added when it is not there yet.
func (a *Activity) tool(server, tool string) *ToolActivity {
	i := slices.IndexFunc(a.Tools, func(t ToolActivity) bool { return t.Server == server && t.Tool == tool })
	if i < 0 {
		i = len(a.Tools)
		a.Tools = append(a.Tools, ToolActivity{Server: server, Tool: tool})
	}
	return &a.Tools[i]
}

// Sort puts the tools by server and name, the rules and the denials the
// most calls first.
func (a *Activity) Sort() {
	slices.SortFunc(a.Tools, func(x, y ToolActivity) int {
		return cmp.Or(strings.Compare(x.Server, y.Server), strings.Compare(x.Tool, y.Tool))
	})
	slices.SortFunc(a.Decisions, func(x, y RuleDecisions) int {
		return cmp.Or(cmp.Compare(y.Allowed+y.Denied+y.Held, x.Allowed+x.Denied+x.Held), strings.Compare(x.DecidedBy, y.DecidedBy))
	})
	a.Denials = slices.DeleteFunc(a.Denials, func(d Denial) bool { return d.N <= 0 })
	slices.SortFunc(a.Denials, func(x, y Denial) int {
		return cmp.Or(cmp.Compare(y.N, x.N), strings.Compare(x.DecidedBy, y.DecidedBy), strings.Compare(x.Reason, y.Reason),
			strings.Compare(x.Server, y.Server), strings.Compare(x.Tool, y.Tool))
	})
}

// OutcomeGroup is a number of a tool's calls with one outcome.
type OutcomeGroup struct {
	Server, Tool, Outcome string
	N                     int64
}

// AddOutcomes adds the outcomes of the calls recorded in the period to
// the figures, and returns how many of them were a round answered
// "input_required", which is not an outcome of the call.
func (a *Activity) AddOutcomes(outcomes []OutcomeGroup) (rounds int64) {
	byOutcome := map[string]int64{}
	for _, o := range outcomes {
		if o.Outcome == guard.OutcomeInputRequired {
			rounds += o.N
			continue
		}
		byOutcome[o.Outcome] += o.N
		if slices.Contains(ErrorOutcomes, o.Outcome) {
			a.Errors += o.N
			a.tool(o.Server, o.Tool).Errors += o.N
		}
	}
	for o, n := range byOutcome {
		a.Outcomes = append(a.Outcomes, Count{Value: o, N: n})
	}
	slices.SortFunc(a.Outcomes, func(x, y Count) int { return strings.Compare(x.Value, y.Value) })
	a.Sort()
	return rounds
}

// HeldVerdict names what a decision or outcome record says became of a
// held call.
func HeldVerdict(decision, outcome string) string {
	switch {
	case decision == guard.DecisionAllowed || decision == guard.ApprovalApproved:
		return HeldApproved
	case outcome == guard.OutcomeExpired || decision == guard.ApprovalExpired:
		return HeldExpired
	case outcome == guard.OutcomeCancelled || decision == guard.ApprovalWithdrawn:
		return HeldWithdrawn
	case decision == guard.DecisionDenied:
		return HeldDenied
	}
	return HeldUndecided
}

// AddReviews puts the reviews the log records over what the working table
// says of the same definitions, and adds the definitions it has no row
// for.
func (a *Activity) AddReviews(reviews []ToolChange) {
	for _, v := range reviews {
		i := slices.IndexFunc(a.ToolChanges, func(c ToolChange) bool {
			return c.Server == v.Server && c.Tool == v.Tool && c.Pin == v.Pin
		})
		if i < 0 {
			a.ToolChanges = append(a.ToolChanges, v)
			continue
		}
		c := &a.ToolChanges[i]
		c.State, c.DecidedBy, c.DecidedAt = v.State, v.DecidedBy, v.DecidedAt
		if c.Cause == "" {
			c.Cause = v.Cause
		}
	}
}

// Verdicts counts the held calls by verdict, in the order of the Held*
// constants.
func (a *Activity) Verdicts() []Count {
	var out []Count
	for _, v := range []string{HeldApproved, HeldDenied, HeldExpired, HeldWithdrawn, HeldUndecided} {
		var n int64
		for _, h := range a.Approvals {
			if h.Verdict == v {
				n++
			}
		}
		out = append(out, Count{Value: v, N: n})
	}
	return out
}
