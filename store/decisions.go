package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store/postgres"
)

// A decision (a person's approve or deny, an expiry, a withdrawal, a tool
// definition accepted or rejected, a configuration change applied or
// dismissed) is a record in the audit log before it takes effect: the
// working tables (approvals, tool_reviews, config_changes) only follow the
// log. The order is
//
//  1. take the decisions lock, a file lock beside the database that every
//     process deciding on it takes, so that of two decisions on one thing
//     only the first is recorded;
//  2. read the working state and refuse a decision that no longer applies
//     (decided already, not pending);
//  3. append the record and wait until it is durable: if it cannot be
//     written the decision is refused and nothing has changed;
//  4. wait, briefly, until it is in the database, so that it precedes in
//     the chain what other processes record once they see the change (the
//     outcome of a held call);
//  5. change the working state (one statement, compare and set).
//
// The record and the state are not one transaction: records reach the
// database through the journal and its ingester (writer.go), which
// decisions do not bypass. Should step 5 fail after the record is written
// (a database that refuses writes from then on), the decision is in the
// log and the error says so.

// decisionsLock is the suffix of the decisions lock's file.
const decisionsLock = ".decisions.lock"

// lockDecisions takes the decisions lock: on SQLite a file lock beside
// the database, which the processes of one machine share; on PostgreSQL
// an advisory lock of the database, which every replica shares, held by
// a connection of its own until unlock. A replica's own decisions take
// turns before they ask PostgreSQL for it (db.deciding): were each to
// wait there on a connection of the pool, enough of them would take
// every connection, and the one holding the lock could not read what it
// needs to finish (approve, and allow from now on, reads the rules
// learned so far under the lock); none would ever end.
func (db *DB) lockDecisions(ctx context.Context) (unlock func(), err error) {
	if !db.pg {
		unlock, err := lockFile(db.opts.Path + decisionsLock)
		if err != nil {
			return nil, fmt.Errorf("decisions lock: %w", err)
		}
		return unlock, nil
	}
	db.lockWaiters.Add(1)
	select {
	case db.deciding <- struct{}{}:
		db.lockWaiters.Add(-1)
	case <-ctx.Done():
		db.lockWaiters.Add(-1)
		return nil, fmt.Errorf("decisions lock: %w", ctx.Err())
	}
	unlockPG, _, err := db.pgLock(ctx, postgres.LockDecisions, false)
	if err != nil {
		<-db.deciding
		return nil, fmt.Errorf("decisions lock: %w", err)
	}
	return func() {
		unlockPG()
		<-db.deciding
	}, nil
}

// ByGuard is who decided when guard itself ended a held call (an expiry, a
// withdrawal).
const ByGuard = "guard"

// ErrNotApplied is wrapped by the error of a decision that was recorded in
// the audit log but whose working state could not be changed.
var ErrNotApplied = errors.New("recorded in the audit log, but not applied")

// decide runs one decision in the order above. check reads the working
// state and returns the record to append, or an error that refuses the
// decision; apply changes the working state and reports whether it did
// (its context does not end with the caller's: once recorded, a decision
// is applied).
func (db *DB) decide(ctx context.Context, check func(ctx context.Context) (*guard.Record, error), apply func(ctx context.Context) (bool, error)) error {
	if !db.writable {
		return fmt.Errorf("%w: %w", guard.ErrAuditWrite, errReadOnly)
	}
	unlock, err := db.lockDecisions(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	rec, err := check(ctx)
	if err != nil {
		return err
	}
	if err := db.Append(rec); err != nil {
		return fmt.Errorf("not decided: %w", err)
	}
	bg := context.WithoutCancel(ctx)
	db.ing.caughtUp(bg)
	ok, err := apply(bg)
	switch {
	case err != nil:
		return fmt.Errorf("%w (record %s): %w", ErrNotApplied, rec.ID, err)
	case !ok:
		return fmt.Errorf("%w (record %s): the state changed meanwhile", ErrNotApplied, rec.ID)
	}
	return nil
}

// affected reports whether a statement changed a row.
func affected(res sql.Result, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// detail renders a record's detail object.
func detail(m map[string]any) string {
	b, _ := json.Marshal(m)
	return string(b)
}

// approvalRecord is the decision record of a held call's approval: what
// happened (guard.ApprovalApproved, Denied, Expired or Withdrawn), who
// decided and why. Its call_id is the held call's, so that the call's
// decision can be read from the log; the complete arguments the approval
// keeps are not in it (the call's request record has them, redacted).
func approvalRecord(a *guard.Approval, state, by, reason string, now time.Time) *guard.Record {
	callID := a.CallID
	if callID == "" {
		callID = a.ID
	}
	return &guard.Record{
		ID: guard.NewID(), CallID: callID, Kind: guard.KindDecision, Time: now,
		Session: a.Session, Client: a.Client, User: a.Caller.Subject, UserEmail: a.Caller.Email, UserGroups: a.Caller.Groups,
		Server: a.Server, Direction: guard.ClientToServer,
		Method: "tools/call", Tool: a.Tool, Pin: a.Pin, Decision: state, DecidedBy: by, Approval: a.ID, Reason: reason,
		Detail: detail(approvalDetail(a)),
	}
}

func approvalDetail(a *guard.Approval) map[string]any {
	return map[string]any{"rule": a.Rule, "held_reason": a.HeldReason,
		"held": fmtTime(a.CreatedAt), "expires": fmtTime(a.ExpiresAt), "scope": a.Scope}
}

// reviewRecord is the decision record of one person's review of a held
// call. Its decision is the approval's state after the review: approved
// or denied, or none while the approval waits for more approvals (the
// call stays "held" in the log's view of it; the detail says whose
// approval this was, and how many there are of how many needed). The
// detail names the reviewer: subject, email, groups, and how the identity
// was verified ("via": oidc, passkey; absent for a typed name). A review
// by a typed name of an approval without approvers is recorded as before
// approval rules were: who decided, and nothing more.
func reviewRecord(a *guard.Approval, rv guard.ApprovalReview, state string) *guard.Record {
	decision := state
	if state == guard.ApprovalPending {
		decision = ""
	}
	r := approvalRecord(a, decision, rv.By.Name(), rv.Reason, rv.Time)
	if a.Approvers.IsZero() && a.Caller.IsZero() && rv.Via == "" && rv.By.Email == "" && len(rv.By.Groups) == 0 {
		return r
	}
	d := approvalDetail(a)
	d["review"] = "deny"
	if rv.Approve {
		d["review"] = "approve"
	}
	d["approver"] = rv.By
	if rv.Via != "" {
		d["via"] = rv.Via
	}
	if !a.Caller.IsZero() {
		d["requester"] = a.Caller.Name()
	}
	if !a.Approvers.IsZero() {
		d["approvers"] = a.Approvers
		d["needed"] = a.Approvers.Needed()
		d["approvals"] = guard.Approvals(a.Reviews)
		if rv.Approve {
			d["approvals"] = guard.Approvals(a.Reviews) + 1
		}
		if state == guard.ApprovalApproved {
			var by []string
			for _, x := range a.Reviews {
				if x.Approve {
					by = append(by, x.By.Name())
				}
			}
			d["approved_by"] = append(by, rv.By.Name())
		}
	}
	r.Detail = detail(d)
	return r
}

// toolReviewRecord is the record of a tool definition accepted or
// rejected.
func toolReviewRecord(r *guard.Review, state, by string, now time.Time) *guard.Record {
	return &guard.Record{
		Kind: guard.KindToolReview, Time: now, Server: r.Server, Tool: r.Name, Pin: r.Pin,
		Decision: state, DecidedBy: by, Reason: "the tool's definition was " + state,
		Detail: detail(map[string]any{"cause": r.Cause, "was": r.State}),
	}
}

// Operations keeps the records guard writes of its own operation: the
// configurations it loads, its processes starting, stopping and
// recovering, and the rules it learns from approvals; DB.Operations
// returns it.
type Operations struct{ db *DB }

// Operations returns the records of guard's own operation.
func (db *DB) Operations() Operations { return Operations{db} }

// ConfigLoad describes one configuration load for the audit log.
type ConfigLoad struct {
	Digest  string // of the files, as guard policy reload prints it
	Policy  string // the version of the policy compiled from them
	How     string // "loaded" (at start), "reloaded", or "held" (left to a person)
	By      string // who applied it, when a person did; else empty
	Reason  string // why, for people
	Changes string // what changed, one line each (a reload)
	Process string // the command of the process ("guard run")
}

// RecordConfig appends the record of a configuration load and waits until
// it is durable: a process puts a configuration in force only once its
// record is (an error wraps guard.ErrAuditWrite).
func (op Operations) RecordConfig(l ConfigLoad) error {
	d := map[string]any{"digest": l.Digest, "pid": os.Getpid()}
	if l.Policy != "" {
		d["policy"] = l.Policy
	}
	if l.Changes != "" {
		d["changes"] = l.Changes
	}
	if l.Process != "" {
		d["process"] = l.Process
	}
	return op.db.Append(&guard.Record{Kind: guard.KindConfig, Decision: l.How, DecidedBy: l.By, Reason: l.Reason, Detail: detail(d)})
}

// Lifecycle events.
const (
	LifecycleStarted = "started"
	LifecycleStopped = "stopped"
	// LifecycleRecovered: the process can write the audit log again,
	// after writes failed (one record for each recovery).
	LifecycleRecovered = "recovered"
)

// Lifecycle describes a guard process, or its UI, starting or stopping,
// or a process recovering from an audit log it could not write.
type Lifecycle struct {
	Event   string   // LifecycleStarted, LifecycleStopped or LifecycleRecovered
	Process string   // "guard run", "guard serve", "guard ui"
	Version string   // guard's version
	Server  string   // the server it relays (guard run)
	Serves  []string // what it serves: servers, addresses
	Reason  string   // for people
}

// RecordLifecycle appends the record of a process starting or stopping and
// waits until it is durable.
func (op Operations) RecordLifecycle(l Lifecycle) error {
	d := map[string]any{"process": l.Process, "version": l.Version, "pid": os.Getpid()}
	if len(l.Serves) > 0 {
		d["serves"] = l.Serves
	}
	return op.db.Append(&guard.Record{Kind: guard.KindLifecycle, Server: l.Server, Decision: l.Event,
		Reason: l.Reason, Detail: detail(d)})
}

// RuleAdded describes a policy rule learned from an approval.
type RuleAdded struct {
	Approval *guard.Approval // the approval it was learned from
	By       string
	Rule     string // its name
	Server   string // its server and tool globs
	Tool     string
	Method   string
	Action   string
	File     string // the file it was written to
}

// RecordRuleAdded appends the record of a rule learned from an approval and
// waits until it is durable: the rule is written only once its record is
// (an error wraps guard.ErrAuditWrite).
func (op Operations) RecordRuleAdded(r RuleAdded) error {
	a := r.Approval
	callID := a.CallID
	if callID == "" {
		callID = a.ID
	}
	return op.db.Append(&guard.Record{
		Kind: guard.KindRuleAdded, CallID: callID, Session: a.Session, Client: a.Client, Server: a.Server,
		Tool: a.Tool, Decision: r.Action, DecidedBy: r.By, Approval: a.ID,
		Reason: "approved, and " + a.Tool + " on " + a.Server + " is allowed from now on (rule " + r.Rule + ")",
		Detail: detail(map[string]any{"rule": r.Rule, "server": r.Server, "tool": r.Tool, "method": r.Method,
			"action": r.Action, "file": r.File}),
	})
}
