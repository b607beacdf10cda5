package guard

import (
	"fmt"
	"time"
)

// A held call's approval changes state only through these pure
// transitions: the store works the next state out with them inside its
// transaction (under the decisions lock), records it, and applies it. An
// approval leaves pending exactly once; once it has, later reviews and
// ends are refused with ErrAlreadyDecided and change nothing.

// Review works out what one person's review does to a: the state it
// leaves a in (ApprovalDenied for a denial; ApprovalApproved once
// Approvers.Needed distinct people approved; ApprovalPending before), or
// the error that refuses it: ErrAlreadyDecided (AlreadyDecided) when a is
// no longer pending, ErrNotApprover or ErrAlreadyReviewed (MayReview)
// when its author may not review it. It changes nothing: Reviewed applies
// it.
func (a *Approval) Review(rv ApprovalReview) (string, error) {
	if a.State != ApprovalPending {
		return "", AlreadyDecided(a)
	}
	if err := a.MayReview(rv.By, rv.Via); err != nil {
		return "", err
	}
	switch {
	case !rv.Approve:
		return ApprovalDenied, nil
	case Approvals(a.Reviews)+1 >= a.Approvers.Needed():
		return ApprovalApproved, nil
	}
	return ApprovalPending, nil
}

// Reviewed applies a review that Review let through, to state: a keeps
// it, and a review that decides sets who decided, why and when; the
// complete arguments, kept for the approvers, go (the audit log's
// redacted form is what stays).
func (a *Approval) Reviewed(rv ApprovalReview, state string) {
	a.Reviews = append(a.Reviews, rv)
	if state != ApprovalPending {
		a.State, a.DecidedBy, a.Reason, a.DecidedAt, a.Arguments = state, rv.By.Name(), rv.Reason, rv.Time, ""
	}
}

// End refuses the end of a without a person's decision unless a is
// pending and to is how such an end goes: ApprovalExpired (no decision
// in time) or ApprovalWithdrawn (the client cancelled, its session
// ended). Ended applies it.
func (a *Approval) End(to string) error {
	if to != ApprovalExpired && to != ApprovalWithdrawn {
		return fmt.Errorf("approval %s: %q is not how a pending approval ends without a decision", a.ID, to)
	}
	if a.State != ApprovalPending {
		return AlreadyDecided(a)
	}
	return nil
}

// Ended applies an end that End let through: a keeps why, so that a
// decision that comes later is told, and loses its complete arguments.
func (a *Approval) Ended(to, reason string, at time.Time) {
	a.State, a.Reason, a.DecidedAt, a.Arguments = to, reason, at, ""
}

// AlreadyDecided is the error, wrapping ErrAlreadyDecided, of a review
// or end of an approval no longer pending: who decided and when, or how
// it ended and why.
func AlreadyDecided(a *Approval) error {
	when := a.DecidedAt.UTC().Format(time.RFC3339)
	switch a.State {
	case ApprovalApproved, ApprovalUsed:
		return fmt.Errorf("%w: approved by %s at %s", ErrAlreadyDecided, a.DecidedBy, when)
	case ApprovalDenied:
		return fmt.Errorf("%w: denied by %s at %s", ErrAlreadyDecided, a.DecidedBy, when)
	case ApprovalExpired:
		return fmt.Errorf("%w: expired at %s with no decision", ErrAlreadyDecided, when)
	case ApprovalWithdrawn:
		if a.Reason == "" { // withdrawn before guard kept why: the client cancelled, or its session ended
			return fmt.Errorf("%w: withdrawn by the client at %s", ErrAlreadyDecided, when)
		}
		return fmt.Errorf("%w: withdrawn at %s: %s", ErrAlreadyDecided, when, a.Reason)
	}
	return fmt.Errorf("%w: %s", ErrAlreadyDecided, a.State)
}
