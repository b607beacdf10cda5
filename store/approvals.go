package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	guard "github.com/guard-mcp/guard"
)

// pollEvery is how often WaitApproval reads the database on SQLite (and
// on PostgreSQL while it cannot listen for notifications): a decision made
// by another process is seen within this time plus a read.
const pollEvery = 25 * time.Millisecond

const approvalColumns = `id, session, client, server, tool, arguments, digest, pin, policy_version, rule,
 held_reason, state, decided_by, reason, created_at, expires_at, decided_at, used_at, call_id,
 user_subject, user_email, user_groups, approvers, reviews, scope, session_ended, process, required_via`

// approvalSelect is what reads approvalColumns from this database: one a
// read-only open found before the approval rules migration has no
// caller, approvers nor reviews (they read as none); one before the
// scope migration has no scope (its approvals let a call from any session
// through, as they did then) nor session_ended; one before the process
// migration names no process; one before the required_via migration
// requires no way of verifying who decides (none was kept).
func (hs Holds) approvalSelect() string {
	cols := approvalColumns
	if hs.db.schema.noVia {
		cols = strings.Replace(cols, ", required_via", ", ''", 1)
	}
	if hs.db.schema.noProcess {
		cols = strings.Replace(cols, ", process", ", ''", 1)
	}
	if hs.db.schema.noRules {
		cols = strings.Replace(cols, "user_subject, user_email, user_groups, approvers, reviews", "'', '', '', '', 0", 1)
	}
	if hs.db.schema.noScope {
		cols = strings.Replace(cols, "scope, session_ended", "'any', ''", 1)
	}
	return `SELECT ` + cols
}

func scanApproval(scan func(dest ...any) error) (*guard.Approval, error) {
	var a guard.Approval
	var created, expires, decided, used, groups, approvers, ended string
	var reviews int64
	err := scan(&a.ID, &a.Session, &a.Client, &a.Server, &a.Tool, &a.Arguments, &a.Digest, &a.Pin,
		&a.PolicyVersion, &a.Rule, &a.HeldReason, &a.State, &a.DecidedBy, &a.Reason,
		&created, &expires, &decided, &used, &a.CallID, &a.Caller.Subject, &a.Caller.Email, &groups, &approvers, &reviews,
		&a.Scope, &ended, &a.Process, &a.RequiredVia)
	if err != nil {
		return nil, err
	}
	a.CreatedAt, a.ExpiresAt = parseTime(created), parseTime(expires)
	a.DecidedAt, a.UsedAt, a.SessionEnded = parseTime(decided), parseTime(used), parseTime(ended)
	if err := unmarshalIf(groups, &a.Caller.Groups); err != nil {
		return nil, fmt.Errorf("caller's groups of %s: %w", a.ID, err)
	}
	if err := unmarshalIf(approvers, &a.Approvers); err != nil {
		return nil, fmt.Errorf("approvers of %s: %w", a.ID, err)
	}
	return &a, nil
}

// unmarshalIf decodes JSON text into v, leaving v as it is for "".
func unmarshalIf(text string, v any) error {
	if text == "" {
		return nil
	}
	return json.Unmarshal([]byte(text), v)
}

// marshalIf encodes v as JSON text, or "" when zero says it is zero.
func marshalIf(v any, zero bool) string {
	if zero {
		return ""
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// CreateApproval stores a held call, with who made it and who may approve
// it. An approval without a scope is given the narrower,
// guard.ScopeSession.
func (hs Holds) CreateApproval(ctx context.Context, a *guard.Approval) error {
	if a.Scope == "" {
		a.Scope = guard.ScopeSession
	}
	_, err := hs.db.w.ExecContext(ctx, `INSERT INTO approvals (`+approvalColumns+`)
		VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,0,?,?,?,?)`,
		a.ID, a.Session, a.Client, a.Server, a.Tool, a.Arguments, a.Digest, a.Pin, a.PolicyVersion,
		a.Rule, a.HeldReason, a.State, a.DecidedBy, a.Reason, fmtTime(a.CreatedAt), fmtTime(a.ExpiresAt),
		fmtTime(a.DecidedAt), fmtTime(a.UsedAt), a.CallID, a.Caller.Subject, a.Caller.Email,
		marshalIf(a.Caller.Groups, len(a.Caller.Groups) == 0), marshalIf(a.Approvers, a.Approvers.IsZero()),
		a.Scope, fmtTime(a.SessionEnded), a.Process, a.RequiredVia)
	if err != nil {
		return fmt.Errorf("create approval: %w", err)
	}
	return nil
}

// Approval returns one approval with its reviews; the error wraps
// guard.ErrNotFound when there is none with that id.
func (hs Holds) Approval(ctx context.Context, id string) (*guard.Approval, error) {
	return hs.approval(ctx, hs.db.r, id)
}

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func (hs Holds) approval(ctx context.Context, q queryer, id string) (*guard.Approval, error) {
	a, err := scanApproval(q.QueryRowContext(ctx, hs.approvalSelect()+` FROM approvals WHERE id = ?`, id).Scan)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("approval %s: %w", id, guard.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("approval %s: %w", id, err)
	}
	err = hs.reviews(ctx, q, `WHERE approval = ?`, []any{id}, func(string) *guard.Approval { return a })
	if err != nil {
		return nil, fmt.Errorf("approval %s: %w", id, err)
	}
	return a, nil
}

// reviews reads the reviews of the approvals where selects (a WHERE
// clause over approval_reviews) and adds each to the approval of returns,
// in order.
func (hs Holds) reviews(ctx context.Context, q queryer, where string, args []any, of func(id string) *guard.Approval) error {
	if hs.db.schema.noRules {
		return nil
	}
	rows, err := q.QueryContext(ctx, `SELECT approval, subject, email, user_groups, via, decision, reason, at
		FROM approval_reviews `+where+` ORDER BY approval, n`, args...)
	if err != nil {
		return fmt.Errorf("reviews: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, groups, decision, at string
		var r guard.ApprovalReview
		if err := rows.Scan(&id, &r.By.Subject, &r.By.Email, &groups, &r.Via, &decision, &r.Reason, &at); err != nil {
			return fmt.Errorf("reviews: %w", err)
		}
		if err := unmarshalIf(groups, &r.By.Groups); err != nil {
			return fmt.Errorf("reviews: groups of %s: %w", r.By.Subject, err)
		}
		r.Approve, r.Time = decision == guard.ApprovalApproved, parseTime(at)
		if a := of(id); a != nil {
			a.Reviews = append(a.Reviews, r)
		}
	}
	return rows.Err()
}

// Approvals lists approvals in a state ("" for all), oldest first.
func (hs Holds) Approvals(ctx context.Context, state string) ([]*guard.Approval, error) {
	list, err := hs.approvalsWhere(ctx, `? = '' OR state = ?`, []any{state, state})
	if err != nil {
		return nil, fmt.Errorf("approvals: %w", err)
	}
	return list, nil
}

// ApprovalsByID lists the approvals with these ids (at most maxIDs), oldest
// first; an id none has is left out. A page that names many approvals
// reads them in one query.
func (hs Holds) ApprovalsByID(ctx context.Context, ids []string) ([]*guard.Approval, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	if len(ids) > maxIDs {
		return nil, fmt.Errorf("approvals: %d ids, at most %d at once", len(ids), maxIDs)
	}
	list, err := hs.approvalsWhere(ctx, `id IN (`+paramMarks(len(ids))+`)`, appendArgs(nil, ids))
	if err != nil {
		return nil, fmt.Errorf("approvals: %w", err)
	}
	return list, nil
}

// approvalsWhere reads the approvals a condition selects, with their
// reviews, oldest first.
func (hs Holds) approvalsWhere(ctx context.Context, cond string, args []any) ([]*guard.Approval, error) {
	rows, err := hs.db.r.QueryContext(ctx, hs.approvalSelect()+` FROM approvals WHERE `+cond+` ORDER BY created_at, id`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*guard.Approval
	byID := map[string]*guard.Approval{}
	for rows.Next() {
		a, err := scanApproval(rows.Scan)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
		byID[a.ID] = a
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows.Close()
	err = hs.reviews(ctx, hs.db.r, `WHERE approval IN (SELECT id FROM approvals WHERE `+cond+`)`, args,
		func(id string) *guard.Approval { return byID[id] })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// CountApprovals counts the approvals in a state and names the newest
// (how many reviews they all had, then its creation time and id; "" for
// none): together they change whenever one is added to the state, leaves
// it, or is reviewed, without reading any approval.
func (hs Holds) CountApprovals(ctx context.Context, state string) (n int, newest string, err error) {
	reviews := "CAST(SUM(reviews) AS TEXT) || ' ' || "
	if hs.db.schema.noRules {
		reviews = ""
	}
	err = hs.db.r.QueryRowContext(ctx, `SELECT COUNT(*), CASE WHEN COUNT(*) = 0 THEN '' ELSE `+reviews+`MAX(created_at || ' ' || id) END
		FROM approvals WHERE state = ?`, state).Scan(&n, &newest)
	if err != nil {
		return 0, "", fmt.Errorf("count approvals: %w", err)
	}
	return n, newest, nil
}

// DecideApproval records a person's decision on a pending approval: a
// decision record in the audit log first (see decide), then the
// approval's state. The first decision wins: on an approval that is no
// longer pending it returns the approval as it is and an error wrapping
// guard.ErrAlreadyDecided that says who decided and when. A decision
// whose record cannot be written is refused (the error wraps
// guard.ErrAuditWrite) and changes nothing.
//
// by is a name, as typed: an unverified identity (see ReviewApproval).
func (hs Holds) DecideApproval(ctx context.Context, id string, approve bool, by, reason string) (*guard.Approval, error) {
	return hs.DecideApprovalWith(ctx, id, approve, by, reason, nil)
}

// DecideApprovalWith is DecideApproval with before, when it is set, run
// first under the decisions lock, once the approval is known to be
// pending: the decision is recorded only if before succeeds (its error is
// returned), and before runs only for an approval no one else decides
// meanwhile. "Approve, and allow from now on" writes its rule there, so
// that no rule is left behind by an approval someone else denied first.
func (hs Holds) DecideApprovalWith(ctx context.Context, id string, approve bool, by, reason string, before func(*guard.Approval) error) (*guard.Approval, error) {
	return hs.ReviewApproval(ctx, id, guard.Identity{Subject: by}, "", approve, reason, before)
}

// ReviewApproval records one person's review of a pending approval: who
// (by, verified as via says: "" for a typed name), approve or deny, and
// why. Like every decision, the review is a record in the audit log
// before anything changes (see decide), under the decisions lock that
// every process and replica on the database takes, so that of two
// reviews at one moment each counts, once, in turn.
//
// A review is refused, recorded nowhere, with an error wrapping
// guard.ErrNotApprover when its author made the held call, is not among
// the approval's Approvers, is a typed name where they need verified
// identities, or was not verified as the approval's RequiredVia says
// (whatever the configuration of the process that asks: the hold's
// configuration decided it); and with one wrapping
// guard.ErrAlreadyReviewed when they reviewed it already. Otherwise a denial ends the approval (denied); an
// approval approves it once Approvers.Needed distinct people have, and
// leaves it pending before. before, when set, runs under the lock once
// the review is known to decide the approval, and only then.
func (hs Holds) ReviewApproval(ctx context.Context, id string, by guard.Identity, via string, approve bool, reason string, before func(*guard.Approval) error) (*guard.Approval, error) {
	if by.Subject == "" {
		return nil, fmt.Errorf("review %s: %w: no one is named", id, guard.ErrNotApprover)
	}
	var a *guard.Approval
	var rv guard.ApprovalReview
	var state string
	var rec *guard.Record
	err := hs.db.decide(ctx, func(ctx context.Context) (*guard.Record, error) {
		var err error
		if a, err = hs.approval(ctx, hs.db.w, id); err != nil {
			return nil, err
		}
		rv = guard.ApprovalReview{By: by, Via: via, Approve: approve, Reason: reason, Time: hs.db.opts.Now().UTC()}
		if state, err = a.Review(rv); err != nil {
			return nil, err
		}
		if before != nil && state != guard.ApprovalPending {
			if err := before(a); err != nil {
				return nil, err
			}
		}
		rec = reviewRecord(a, rv, state)
		return rec, nil
	}, func(ctx context.Context) (bool, error) {
		return hs.applyReview(ctx, a, rv, state, rec.ID)
	})
	switch {
	case errors.Is(err, guard.ErrAlreadyDecided):
		return a, err
	case errors.Is(err, guard.ErrNotApprover), errors.Is(err, guard.ErrAlreadyReviewed):
		return nil, err // says why, for the person refused
	case err != nil:
		return nil, fmt.Errorf("review %s: %w", id, err)
	}
	a.Reviewed(rv, state)
	return a, nil
}

// applyReview stores a review recorded as record, and the approval's
// state after it (pending while more approvals are needed), in one
// transaction. The approval's count of reviews is compared and set with
// its state: a review that another slipped past would change nothing.
func (hs Holds) applyReview(ctx context.Context, a *guard.Approval, rv guard.ApprovalReview, state, record string) (bool, error) {
	tx, err := hs.db.w.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	decision := guard.ApprovalDenied
	if rv.Approve {
		decision = guard.ApprovalApproved
	}
	n := len(a.Reviews)
	if _, err := tx.ExecContext(ctx, `INSERT INTO approval_reviews (approval, n, subject, email, user_groups, via, decision, reason, at, record)
		VALUES (?,?,?,?,?,?,?,?,?,?)`, a.ID, n+1, rv.By.Subject, rv.By.Email, marshalIf(rv.By.Groups, len(rv.By.Groups) == 0),
		rv.Via, decision, rv.Reason, fmtTime(rv.Time), record); err != nil {
		return false, err
	}
	var res sql.Result
	if state == guard.ApprovalPending {
		res, err = tx.ExecContext(ctx, `UPDATE approvals SET reviews = ? WHERE id = ? AND state = 'pending' AND reviews = ?`,
			n+1, a.ID, n)
	} else {
		// The complete arguments were kept for the approver; once
		// decided, the audit log's redacted form is what stays.
		res, err = tx.ExecContext(ctx, `UPDATE approvals SET state = ?, decided_by = ?, reason = ?, decided_at = ?, arguments = '', reviews = ?
			WHERE id = ? AND state = 'pending' AND reviews = ?`, state, rv.By.Name(), rv.Reason, fmtTime(rv.Time), n+1, a.ID, n)
	}
	if ok, err := affected(res, err); !ok || err != nil {
		return ok, err
	}
	return true, tx.Commit()
}

// EndApproval ends a pending approval without a person's decision: it
// expired (guard.ApprovalExpired) or was withdrawn (guard.ApprovalWithdrawn),
// for the reason given, which the approval keeps as its Reason, so that a
// decision that comes later is told why. Like a decision, the end is
// recorded in the audit log before the approval's state changes, and
// refused when the record cannot be written. It reports false when the
// approval was no longer pending.
func (hs Holds) EndApproval(ctx context.Context, id, to, reason string) (bool, error) {
	// Refused before the lock when no pending approval ends so.
	if err := (&guard.Approval{ID: id, State: guard.ApprovalPending}).End(to); err != nil {
		return false, err
	}
	var now time.Time
	err := hs.db.decide(ctx, func(ctx context.Context) (*guard.Record, error) {
		a, err := hs.approval(ctx, hs.db.w, id)
		if err != nil {
			return nil, err
		}
		if err := a.End(to); err != nil {
			return nil, err
		}
		now = hs.db.opts.Now().UTC()
		return approvalRecord(a, to, ByGuard, reason, now), nil
	}, func(ctx context.Context) (bool, error) {
		res, err := hs.db.w.ExecContext(ctx, `UPDATE approvals SET state = ?, reason = ?, decided_at = ?, arguments = '' WHERE id = ? AND state = 'pending'`,
			to, reason, fmtTime(now), id)
		return affected(res, err)
	})
	if errors.Is(err, guard.ErrAlreadyDecided) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("approval %s %s: %w", id, to, err)
	}
	return true, nil
}

// TransitionApproval moves an approval from one state to another if it is
// still in the first (compare and set), and reports whether it did.
//
// A pending approval that expires or is withdrawn this way is recorded as
// EndApproval records it (with a reason that says only what happened).
func (hs Holds) TransitionApproval(ctx context.Context, id, from, to string) (bool, error) {
	if from == guard.ApprovalPending {
		reason := "no decision within the approval timeout"
		if to == guard.ApprovalWithdrawn {
			reason = "withdrawn before anyone decided"
		}
		return hs.EndApproval(ctx, id, to, reason)
	}
	now := fmtTime(hs.db.opts.Now())
	q := `UPDATE approvals SET state = ?, decided_at = ?, arguments = '' WHERE id = ? AND state = ?`
	if to == guard.ApprovalUsed {
		q = `UPDATE approvals SET state = ?, used_at = ? WHERE id = ? AND state = ?`
	}
	res, err := hs.db.w.ExecContext(ctx, q, to, now, id, from)
	if err != nil {
		return false, fmt.Errorf("approval %s %s→%s: %w", id, from, to, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("approval %s: %w", id, err)
	}
	return n == 1, nil
}

// ConsumeApproval takes, once, an approval of exactly this call (server,
// tool, argument digest, tool pin and policy version) that a person
// approved, that has not expired or been used, and whose scope takes in
// the session the call comes from: its own for guard.ScopeSession, any for
// guard.ScopeAny. The error wraps guard.ErrNotFound when there is none.
func (hs Holds) ConsumeApproval(ctx context.Context, server, tool, digest, pin, policyVersion, session string, now time.Time) (*guard.Approval, error) {
	tx, err := hs.db.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("consume approval: %w", err)
	}
	defer tx.Rollback()
	a, err := scanApproval(tx.QueryRowContext(ctx, hs.approvalSelect()+` FROM approvals
		WHERE server = ? AND tool = ? AND digest = ? AND state = 'approved' AND pin = ? AND policy_version = ?
		AND expires_at > ? AND (scope = 'any' OR session = ?) ORDER BY created_at LIMIT 1`,
		server, tool, digest, pin, policyVersion, fmtTime(now), session).Scan)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("consume approval: %w", guard.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("consume approval: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE approvals SET state = 'used', used_at = ? WHERE id = ? AND state = 'approved'`,
		fmtTime(now), a.ID); err != nil {
		return nil, fmt.Errorf("consume approval: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("consume approval: %w", err)
	}
	a.State, a.UsedAt = guard.ApprovalUsed, now
	return a, nil
}

// PendingApproval returns the newest pending approval of a call of this
// shape whose scope takes in the session (see ConsumeApproval), or an
// error wrapping guard.ErrNotFound.
func (hs Holds) PendingApproval(ctx context.Context, server, tool, digest, session string) (*guard.Approval, error) {
	a, err := scanApproval(hs.db.r.QueryRowContext(ctx, hs.approvalSelect()+` FROM approvals
		WHERE server = ? AND tool = ? AND digest = ? AND state = 'pending' AND (scope = 'any' OR session = ?)
		ORDER BY created_at DESC LIMIT 1`, server, tool, digest, session).Scan)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("pending approval: %w", guard.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("pending approval: %w", err)
	}
	return a, nil
}

// MarkSessionEnded notes on a pending approval when its held call's
// session ended; it reports false when the approval was no longer pending.
func (hs Holds) MarkSessionEnded(ctx context.Context, id string, at time.Time) (bool, error) {
	res, err := hs.db.w.ExecContext(ctx, `UPDATE approvals SET session_ended = ? WHERE id = ? AND state = 'pending'`, fmtTime(at), id)
	ok, err := affected(res, err)
	if err != nil {
		return false, fmt.Errorf("approval %s: session ended: %w", id, err)
	}
	return ok, nil
}

// WaitApproval returns the approval once it is no longer pending, whoever
// decided: this process, another sharing the SQLite file, or another
// replica on PostgreSQL. On SQLite it reads the approval every pollEvery.
// On PostgreSQL it reads it, then waits for the notification of its
// change (postgres.Listener), which comes within milliseconds of the commit; it
// reads it again every second in case a notification was lost, and every
// pollEvery while the connection that listens is down.
func (hs Holds) WaitApproval(ctx context.Context, id string) (*guard.Approval, error) {
	if hs.db.listen != nil {
		return hs.db.listen.Await(ctx, id, hs.Approval)
	}
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		a, err := hs.Approval(ctx, id)
		if err != nil {
			return nil, err
		}
		if a.State != guard.ApprovalPending {
			return a, nil
		}
		select {
		case <-ctx.Done():
			return a, ctx.Err()
		case <-t.C:
		}
	}
}

// Changes returns a channel that receives a value after each change to
// held calls, tool reviews or configuration changes that any replica
// commits (this one's too), and when the notifications resume after an
// interruption (what changed meanwhile is not known), until ctx ends.
// Changes close together may come as one value. Audit records are not
// announced. Changes returns nil on SQLite, which has no notifications:
// the caller reads the database to find changes.
func (db *DB) Changes(ctx context.Context) <-chan struct{} {
	if db.listen == nil {
		return nil
	}
	return db.listen.Subscribe(ctx)
}

// Holds keeps the held calls (approvals) and their reviews; DB.Holds
// returns it.
type Holds struct{ db *DB }

// Holds returns the store of held calls.
func (db *DB) Holds() Holds { return Holds{db} }
