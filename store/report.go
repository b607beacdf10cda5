package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
)

// activityRead is an Activity being read: what its queries read that is
// added to its figures once they are all in.
type activityRead struct {
	*audit.Activity
	outcomes []audit.OutcomeGroup // what readOutcomes read
	reviews  []audit.ToolChange   // the tool_review records of the period
	rounds   int64                // later rounds of calls of several rounds
}

// Activity reads what the audit log says about the period [since, until]
// (a zero since: from the start; a zero until: to the end).
func (rd Reader) Activity(ctx context.Context, since, until time.Time) (*audit.Activity, error) {
	rd.db.ing.caughtUp(ctx)
	a := &activityRead{Activity: &audit.Activity{Since: since, Until: until}}
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
	a.rounds = a.AddOutcomes(a.outcomes)
	a.AddReviews(a.reviews)
	if err := a.readRounds(rd.db.r)(ctx, lo, hi); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	return a.Activity, nil
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
func (a *activityRead) readCalls(r *sql.DB) func(context.Context, string, string) error {
	return func(ctx context.Context, lo, hi string) error {
		return a.addGroups(ctx, r, 1, callGroups+callGrouping, lo, hi)
	}
}

// readRounds takes off what readCalls counted of the later rounds of
// calls of several rounds (a round follows an outcome "input_required" of
// the same call, which readOutcomes counted): each call is counted once,
// as its first request decided it. The log is read again only when there
// are such rounds.
func (a *activityRead) readRounds(r *sql.DB) func(context.Context, string, string) error {
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
func (a *activityRead) addGroups(ctx context.Context, r *sql.DB, sign int64, q string, args ...any) error {
	rows, err := r.QueryContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("calls: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var g audit.CallGroup
		if err := rows.Scan(&g.Server, &g.Tool, &g.IsCall, &g.Decision, &g.DecidedBy, &g.Reason, &g.N); err != nil {
			return fmt.Errorf("calls: %w", err)
		}
		g.N *= sign
		a.Add(g)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("calls: %w", err)
	}
	a.Sort()
	return nil
}

// readOutcomes counts the outcomes of the calls recorded in the period (a
// round answered "input_required" is not an outcome of the call), by
// tool, and the errors among them.
func (a *activityRead) readOutcomes(r *sql.DB) func(context.Context, string, string) error {
	return func(ctx context.Context, lo, hi string) error {
		rows, err := r.QueryContext(ctx, `SELECT server, `+callKey+`, outcome, COUNT(*) FROM records r
			WHERE r.kind = 'outcome' AND `+gated+` AND `+inPeriod+`
			GROUP BY server, `+callKey+`, outcome`, lo, hi)
		if err != nil {
			return fmt.Errorf("outcomes: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var o audit.OutcomeGroup
			if err := rows.Scan(&o.Server, &o.Tool, &o.Outcome, &o.N); err != nil {
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

// readHeld lists the held calls with their decisions: a decision record
// of the call where there is one (the first: later ones change nothing;
// a review that left the call waiting for more approvals decides
// nothing), else the call's last outcome.
func (a *activityRead) readHeld(r *sql.DB) func(context.Context, string, string) error {
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
			var h audit.HeldCall
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
				h.Verdict = audit.HeldVerdict(d.decision, d.outcome)
				h.DecidedBy, h.Reason, h.DecidedAt = d.by, d.reason, parseTime(d.time)
			case o.time != "":
				h.Verdict = audit.HeldVerdict(o.decision, o.outcome)
				if h.Verdict == audit.HeldApproved || h.Verdict == audit.HeldDenied {
					h.DecidedBy, h.Reason = o.by, o.reason
				}
				if h.Verdict != audit.HeldUndecided {
					h.DecidedAt = parseTime(o.time)
				}
			default:
				h.Verdict = audit.HeldUndecided
			}
			if !h.DecidedAt.IsZero() {
				h.Waited = h.DecidedAt.Sub(h.HeldAt)
			}
			a.Approvals = append(a.Approvals, h)
		}
		return rows.Err()
	}
}

// readToolChanges lists the tool definitions first seen in the period, and
// those a person reviewed in it.
func (a *activityRead) readToolChanges(r *sql.DB) func(context.Context, string, string) error {
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
			var c audit.ToolChange
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

// readArchived counts the requests of the period whose bodies retention
// moved to an archive: they are in no other figure.
func (a *activityRead) readArchived(r *sql.DB) func(context.Context, string, string) error {
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
func (a *activityRead) readChain(r *sql.DB) func(context.Context, string, string) error {
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
				a.reviews = append(a.reviews, audit.ToolChange{Server: server, Tool: tool, Pin: pin, Cause: d.Cause,
					State: decision, DecidedBy: by, DecidedAt: parseTime(at)})
			case guard.KindRuleAdded:
				a.PolicyChanges = append(a.PolicyChanges, audit.PolicyChange{Time: parseTime(at), Kind: kind, What: d.Rule,
					DecidedBy: by, Reason: reason, Server: server, Tool: tool})
			default:
				a.PolicyChanges = append(a.PolicyChanges, audit.PolicyChange{Time: parseTime(at), Kind: kind, What: decision,
					DecidedBy: by, Reason: reason})
			}
		}
		return rows.Err()
	}
}
