package store

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	guard "github.com/guard-mcp/guard"
)

// Activity is what the audit log says about a period: the figures of a
// compliance report. Every figure is read from the records table (and,
// for tool definitions, from the catalog), aggregated in SQL so that a
// report over a million calls takes a few seconds, not a walk of every
// record in Go.
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

	outcomes []outcomeGroup // what readOutcomes read
	reviews  []ToolChange   // the tool_review records of the period
	rounds   int64          // later rounds of calls of several rounds
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

// Activity reads what the audit log says about the period [since, until]
// (a zero since: from the start; a zero until: to the end).
func (rd Reader) Activity(ctx context.Context, since, until time.Time) (*Activity, error) {
	rd.db.ing.caughtUp(ctx)
	a := &Activity{Since: since, Until: until}
	lo, hi := fmtTime(since), fmtTime(until)
	if until.IsZero() {
		hi = "9999"
	}
	// Each reads the log on a connection of its own, into parts of a of
	// its own; the outcomes are added to the tools' figures after.
	steps := []func(context.Context, string, string) error{
		a.readCalls(rd.db.r), a.readOutcomes(rd.db.r), a.readHeld(rd.db.r), a.readToolChanges(rd.db.r), a.readChain(rd.db.r),
		a.readArchived(rd.db.r),
	}
	errs := make([]error, len(steps))
	var wg sync.WaitGroup
	for i, step := range steps {
		wg.Go(func() { errs[i] = step(ctx, lo, hi) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	a.addOutcomes()
	a.addReviews()
	if err := a.readRounds(rd.db.r)(ctx, lo, hi); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	return a, nil
}

// inPeriod selects the records of the period (the placeholders: its
// start and end, as stored) that still have their bodies: retention
// blanks a record's method and decision with the rest (every record a
// report reads has one or the other), and the test reads on databases
// from before the pruned column too.
const inPeriod = `r.time >= ? AND r.time <= ? AND ` + notPruned

// notPruned holds for a record retention has not blanked.
const notPruned = `(r.method != '' OR r.decision != '')`

// A call, for a report, is a request policy decided: a tools/call, or a
// request of another method that rules gate (resources/read, ...), which
// is counted under its method in place of a tool. callKey is what it is
// counted under; gated tells calls from other requests.
const (
	callKey = `CASE WHEN method = 'tools/call' THEN tool ELSE method END`
	gated   = `(method = 'tools/call' OR decision != '')`
)

// callGroups is the query of readCalls and readRounds: requests grouped
// by what a report counts of them (a denial's reason included).
const callGroups = `SELECT server, ` + callKey + `, ` + gated + `, decision, decided_by,
	CASE WHEN decision = 'denied' THEN reason ELSE '' END, COUNT(*)
	FROM records r WHERE r.kind = 'request' AND ` + inPeriod

const callGrouping = ` GROUP BY server, ` + callKey + `, ` + gated + `, decision, decided_by,
	CASE WHEN decision = 'denied' THEN reason ELSE '' END`

// readCalls counts the requests, and the calls per server and tool with
// policy's decisions, by rule, and its denials, by reason. A call of
// several rounds (2026-07-28) has a request record for each: readRounds
// takes the later ones off.
func (a *Activity) readCalls(r *sql.DB) func(context.Context, string, string) error {
	return func(ctx context.Context, lo, hi string) error {
		return a.addGroups(ctx, r, 1, callGroups+callGrouping, lo, hi)
	}
}

// readRounds takes off what readCalls counted of the later rounds of
// calls of several rounds (a round follows an outcome "input_required" of
// the same call, which readOutcomes counted): each call is counted once,
// as its first request decided it. The log is read again only when there
// are such rounds.
func (a *Activity) readRounds(r *sql.DB) func(context.Context, string, string) error {
	return func(ctx context.Context, lo, hi string) error {
		if a.rounds == 0 {
			return nil
		}
		return a.addGroups(ctx, r, -1, callGroups+` AND `+laterRound+`
			AND r.call_id IN (SELECT call_id FROM records WHERE kind = 'outcome' AND outcome = 'input_required')`+callGrouping, lo, hi)
	}
}

// laterRound holds for a request record that is not its call's first.
const laterRound = `EXISTS (SELECT 1 FROM records p WHERE p.call_id = r.call_id AND p.kind = 'request' AND p.seq < r.seq)`

// addGroups adds the groups a callGroups query returns, times sign.
func (a *Activity) addGroups(ctx context.Context, r *sql.DB, sign int64, q string, args ...any) error {
	rows, err := r.QueryContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("calls: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var g callGroup
		if err := rows.Scan(&g.server, &g.tool, &g.isCall, &g.decision, &g.decidedBy, &g.reason, &g.n); err != nil {
			return fmt.Errorf("calls: %w", err)
		}
		g.n *= sign
		a.add(g)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("calls: %w", err)
	}
	a.sort()
	return nil
}

// callGroup is a number of requests alike in what a report counts.
type callGroup struct {
	server, tool, decision, decidedBy, reason string
	isCall                                    bool
	n                                         int64
}

// add counts n requests of a group (n < 0 takes them off).
func (a *Activity) add(g callGroup) {
	a.Requests += g.n
	if !g.isCall {
		return
	}
	a.Calls += g.n
	t := a.tool(g.server, g.tool)
	t.Calls += g.n
	if g.decision == "" {
		return
	}
	i := slices.IndexFunc(a.Decisions, func(d RuleDecisions) bool { return d.DecidedBy == g.decidedBy })
	if i < 0 {
		i = len(a.Decisions)
		a.Decisions = append(a.Decisions, RuleDecisions{DecidedBy: g.decidedBy})
	}
	d := &a.Decisions[i]
	switch g.decision {
	case guard.DecisionAllowed:
		a.Allowed, t.Allowed, d.Allowed = a.Allowed+g.n, t.Allowed+g.n, d.Allowed+g.n
	case guard.DecisionDenied:
		a.Denied, t.Denied, d.Denied = a.Denied+g.n, t.Denied+g.n, d.Denied+g.n
		key := Denial{DecidedBy: g.decidedBy, Reason: g.reason, Server: g.server, Tool: g.tool}
		i := slices.IndexFunc(a.Denials, func(x Denial) bool { x.N = 0; return x == key })
		if i < 0 {
			i = len(a.Denials)
			a.Denials = append(a.Denials, key)
		}
		a.Denials[i].N += g.n
	case guard.DecisionHeld:
		a.Held, t.Held, d.Held = a.Held+g.n, t.Held+g.n, d.Held+g.n
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

// sort puts the tools by server and name, the rules and the denials the
// most calls first.
func (a *Activity) sort() {
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

// readOutcomes counts the outcomes of the calls recorded in the period (a
// round answered "input_required" is not an outcome of the call), by
// tool, and the errors among them.
func (a *Activity) readOutcomes(r *sql.DB) func(context.Context, string, string) error {
	return func(ctx context.Context, lo, hi string) error {
		rows, err := r.QueryContext(ctx, `SELECT server, `+callKey+`, outcome, COUNT(*) FROM records r
			WHERE r.kind = 'outcome' AND `+gated+` AND `+inPeriod+`
			GROUP BY server, `+callKey+`, outcome`, lo, hi)
		if err != nil {
			return fmt.Errorf("outcomes: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var o outcomeGroup
			if err := rows.Scan(&o.server, &o.tool, &o.outcome, &o.n); err != nil {
				return fmt.Errorf("outcomes: %w", err)
			}
			a.outcomes = append(a.outcomes, o)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("outcomes: %w", err)
		}
		return nil
	}
}

// outcomeGroup is a number of a tool's calls with one outcome.
type outcomeGroup struct {
	server, tool, outcome string
	n                     int64
}

// addOutcomes adds what readOutcomes read to the figures.
func (a *Activity) addOutcomes() {
	byOutcome := map[string]int64{}
	for _, o := range a.outcomes {
		if o.outcome == guard.OutcomeInputRequired {
			a.rounds += o.n
			continue
		}
		byOutcome[o.outcome] += o.n
		if slices.Contains(ErrorOutcomes, o.outcome) {
			a.Errors += o.n
			a.tool(o.server, o.tool).Errors += o.n
		}
	}
	for o, n := range byOutcome {
		a.Outcomes = append(a.Outcomes, Count{Value: o, N: n})
	}
	slices.SortFunc(a.Outcomes, func(x, y Count) int { return strings.Compare(x.Value, y.Value) })
	a.sort()
}

// readHeld lists the held calls with their decisions: a decision record
// of the call where there is one (the first: later ones change nothing;
// a review that left the call waiting for more approvals decides
// nothing), else the call's last outcome.
func (a *Activity) readHeld(r *sql.DB) func(context.Context, string, string) error {
	return func(ctx context.Context, lo, hi string) error {
		rows, err := r.QueryContext(ctx, `SELECT r.call_id, r.approval, r.server, CASE WHEN r.method = 'tools/call' THEN r.tool ELSE r.method END,
			r.time, r.decided_by, r.reason,
			COALESCE(d.time, ''), COALESCE(d.approval, ''), COALESCE(d.decision, ''), COALESCE(d.outcome, ''),
			COALESCE(d.decided_by, ''), COALESCE(d.reason, ''),
			COALESCE(o.time, ''), COALESCE(o.decision, ''), COALESCE(o.outcome, ''),
			COALESCE(o.decided_by, ''), COALESCE(o.reason, '')
			FROM records r
			LEFT JOIN records d ON d.seq = (SELECT MIN(seq) FROM records WHERE call_id = r.call_id AND kind = 'decision' AND decision != '')
			LEFT JOIN records o ON o.seq = (SELECT MAX(seq) FROM records WHERE call_id = r.call_id AND kind = 'outcome')
			WHERE r.kind = 'request' AND r.decision = 'held' AND `+inPeriod+` AND NOT `+laterRound+`
			ORDER BY r.seq`, lo, hi)
		if err != nil {
			return fmt.Errorf("held calls: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var h HeldCall
			var heldAt string
			var d, o struct{ time, approval, decision, outcome, by, reason string }
			if err := rows.Scan(&h.CallID, &h.Approval, &h.Server, &h.Tool, &heldAt, &h.HeldBy, &h.Why,
				&d.time, &d.approval, &d.decision, &d.outcome, &d.by, &d.reason,
				&o.time, &o.decision, &o.outcome, &o.by, &o.reason); err != nil {
				return fmt.Errorf("held calls: %w", err)
			}
			h.HeldAt = parseTime(heldAt)
			if h.Approval == "" {
				h.Approval = d.approval
			}
			if h.Approval == "" {
				h.Approval = h.CallID // a call's first hold has the call's id
			}
			switch {
			case d.time != "":
				h.Verdict = verdict(d.decision, d.outcome)
				h.DecidedBy, h.Reason, h.DecidedAt = d.by, d.reason, parseTime(d.time)
			case o.time != "":
				h.Verdict = verdict(o.decision, o.outcome)
				if h.Verdict == HeldApproved || h.Verdict == HeldDenied {
					h.DecidedBy, h.Reason = o.by, o.reason
				}
				if h.Verdict != HeldUndecided {
					h.DecidedAt = parseTime(o.time)
				}
			default:
				h.Verdict = HeldUndecided
			}
			if !h.DecidedAt.IsZero() {
				h.Waited = h.DecidedAt.Sub(h.HeldAt)
			}
			a.Approvals = append(a.Approvals, h)
		}
		return rows.Err()
	}
}

// verdict names what a decision or outcome record says became of a held
// call.
func verdict(decision, outcome string) string {
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

// readToolChanges lists the tool definitions first seen in the period, and
// those a person reviewed in it.
func (a *Activity) readToolChanges(r *sql.DB) func(context.Context, string, string) error {
	return func(ctx context.Context, lo, hi string) error {
		rows, err := r.QueryContext(ctx, `SELECT t.server, t.name, t.pin, t.first_seen,
			COALESCE(v.cause, ''), COALESCE(v.state, ''), COALESCE(v.decided_by, ''), COALESCE(v.decided_at, '')
			FROM tools t LEFT JOIN tool_reviews v ON v.server = t.server AND v.name = t.name AND v.pin = t.pin
			WHERE t.first_seen >= ?1 AND t.first_seen <= ?2
			   OR v.decided_at >= ?1 AND v.decided_at <= ?2 AND v.cause != 'baseline'
			ORDER BY t.first_seen, t.server, t.name, t.rowid`, lo, hi)
		if err != nil {
			return fmt.Errorf("tool changes: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var c ToolChange
			var first, decided string
			if err := rows.Scan(&c.Server, &c.Tool, &c.Pin, &first, &c.Cause, &c.State, &c.DecidedBy, &decided); err != nil {
				return fmt.Errorf("tool changes: %w", err)
			}
			c.FirstSeen, c.DecidedAt = parseTime(first), parseTime(decided)
			a.ToolChanges = append(a.ToolChanges, c)
		}
		return rows.Err()
	}
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

// readArchived counts the requests of the period whose bodies retention
// moved to an archive: they are in no other figure.
func (a *Activity) readArchived(r *sql.DB) func(context.Context, string, string) error {
	return func(ctx context.Context, lo, hi string) error {
		err := r.QueryRowContext(ctx, `SELECT count(*) FROM records r
			WHERE r.kind = 'request' AND r.time >= ? AND r.time <= ? AND NOT `+notPruned, lo, hi).Scan(&a.Archived)
		if err != nil {
			return fmt.Errorf("archived: %w", err)
		}
		return nil
	}
}

// readChain reads the records of the period that change the rules or
// review a tool: the log's word on them, beside the working tables'.
func (a *Activity) readChain(r *sql.DB) func(context.Context, string, string) error {
	return func(ctx context.Context, lo, hi string) error {
		rows, err := r.QueryContext(ctx, `SELECT kind, time, server, tool, pin, decision, decided_by, reason, detail
			FROM records r WHERE r.kind IN ('tool_review', 'rule_added', 'config') AND `+inPeriod+` ORDER BY r.seq`, lo, hi)
		if err != nil {
			return fmt.Errorf("policy changes: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var kind, at, server, tool, pin, decision, by, reason, detail string
			if err := rows.Scan(&kind, &at, &server, &tool, &pin, &decision, &by, &reason, &detail); err != nil {
				return fmt.Errorf("policy changes: %w", err)
			}
			var d struct{ Rule, Cause string }
			_ = json.Unmarshal([]byte(detail), &d)
			switch kind {
			case guard.KindToolReview:
				a.reviews = append(a.reviews, ToolChange{Server: server, Tool: tool, Pin: pin, Cause: d.Cause,
					State: decision, DecidedBy: by, DecidedAt: parseTime(at)})
			case guard.KindRuleAdded:
				a.PolicyChanges = append(a.PolicyChanges, PolicyChange{Time: parseTime(at), Kind: kind, What: d.Rule,
					DecidedBy: by, Reason: reason, Server: server, Tool: tool})
			default:
				a.PolicyChanges = append(a.PolicyChanges, PolicyChange{Time: parseTime(at), Kind: kind, What: decision,
					DecidedBy: by, Reason: reason})
			}
		}
		return rows.Err()
	}
}

// addReviews puts the reviews the log records over what the working table
// says of the same definitions, and adds the definitions it has no row
// for.
func (a *Activity) addReviews() {
	for _, v := range a.reviews {
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
