package web

import (
	"strings"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
)

// A held call's record and its approval's state, side by side, read as if
// they contradicted: outcome awaiting_approval beside "approved by alice".
// Both are true at different times: the client was told to retry, a
// person approved later, and the same call made again passed, or never
// came. callStory tells that in order, in words.

// callStory is what became of a call that an approval concerns, step by
// step: "told to retry at 14:03:12 · approved by alice at 14:05:40 · the
// retry passed at 14:06:02".
type callStory struct {
	// State is the approval's decision (approvalState; expired once an
	// undecided hold is past its expiry), for the page's style and for
	// automation (data-approval-state).
	State string
	// Sep goes between steps: " · " for a sequence of events, ", " for
	// the clauses of one.
	Sep   string
	Steps []storyStep
}

// sep is what goes before the step i.
func (s callStory) sep(i int) string {
	if i == 0 {
		return ""
	}
	return s.Sep
}

// storyStep is one step of a story.
type storyStep struct {
	// Kind names the step for automation (data-step): told-to-retry,
	// client-gone, waiting, approved, denied, expired, withdrawn,
	// retry-passed, no-retry-yet, retry-never-made, passed-on, held-call,
	// other-session, retried.
	Kind string
	Text string
	Link string // the page of the call the step names, "" for none
}

// String is the story as one line of text.
func (s callStory) String() string {
	parts := make([]string, len(s.Steps))
	for i, st := range s.Steps {
		parts[i] = st.Text
	}
	return strings.Join(parts, s.Sep)
}

// approvalCalls are an approval and the calls that name it: the call held
// for it, the one it let through, and any made again while it was open
// (held on it in turn).
type approvalCalls struct {
	a     *guard.Approval
	calls []*store.Call
}

// held is the call the approval was made for, nil when the log does not
// hold it.
func (ac approvalCalls) held() *store.Call {
	id := heldCallID(ac.a)
	for _, c := range ac.calls {
		if c.ID == id {
			return c
		}
	}
	return nil
}

// passer is the call the approval let through, other than the held call
// itself (a call made again: its approval used, or approved while it
// waited on it), nil when there is none. A call is let through once; were
// there several, the first is the one.
func (ac approvalCalls) passer() *store.Call {
	var first *store.Call
	for _, c := range ac.calls {
		if c.ID != heldCallID(ac.a) && c.Decision == guard.DecisionAllowed && (first == nil || c.Key < first.Key) {
			first = c
		}
	}
	return first
}

// toldAt is when a call was answered "retry" (approval.wait passed
// without a decision): its outcome awaiting_approval, recorded with how
// long it waited.
func toldAt(c *store.Call) (time.Time, bool) {
	if c == nil || c.Outcome != guard.OutcomeAwaitingApproval {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, c.Time)
	if err != nil {
		return time.Time{}, false
	}
	return t.Add(time.Duration(c.DurationMS) * time.Millisecond), true
}

// storyOf tells what became of row, a call that names the approval of
// ac: the call held for it, the call it let through, or the same call
// made again while it was open. now decides whether an open approval has
// run out. full is for the call's own page: times with their dates, and
// the reasons given; otherwise it is one line for Activity, its times
// without the date when they fall on the row's day.
func storyOf(row *store.Call, ac approvalCalls, now time.Time, full bool) callStory {
	a := ac.a
	s := callStory{State: approvalState(a), Sep: " · "}
	if a.State == guard.ApprovalPending && !now.Before(a.ExpiresAt) {
		s.State = guard.ApprovalExpired
	}
	t := storyTeller{a: a, now: now, full: full, held: ac.held(), passer: ac.passer()}
	t.day, _ = time.Parse(time.RFC3339Nano, row.Time)
	switch {
	case row.ID == heldCallID(a):
		s.Steps = t.heldSteps(row)
	case row.Decision == guard.DecisionAllowed:
		s.Sep, s.Steps = ", ", t.passedSteps(row)
	default:
		s.Steps = append([]storyStep{t.heldCall("retried", "the same call made again while the approval of ", " was open")}, t.heldSteps(row)...)
	}
	return s
}

// storyTeller holds what the steps of a story are told from.
type storyTeller struct {
	a            *guard.Approval
	held, passer *store.Call
	now, day     time.Time
	full         bool
}

// at writes a time of the story.
func (t storyTeller) at(x time.Time) string {
	if !t.full && !t.day.IsZero() && x.UTC().Format(time.DateOnly) == t.day.UTC().Format(time.DateOnly) {
		return x.UTC().Format(time.TimeOnly)
	}
	return fmtTime(x)
}

// passWord is what a call let through did: one held for its tool's review
// went on to the rules, which may have held it again.
func (t storyTeller) passWord() string {
	if t.a.Rule == guard.ToolReviewRule {
		return "went on to the rules"
	}
	return "passed"
}

// heldSteps are the story of a call that waited on the approval: told to
// retry (or not), its client gone, the decision, and what came of it.
func (t storyTeller) heldSteps(c *store.Call) []storyStep {
	a := t.a
	var steps []storyStep
	told, wasTold := toldAt(c)
	if wasTold {
		steps = append(steps, storyStep{Kind: "told-to-retry", Text: "told to retry at " + t.at(told)})
	}
	if !a.SessionEnded.IsZero() {
		steps = append(steps, storyStep{Kind: "client-gone", Text: "its client went at " + t.at(a.SessionEnded)})
	}
	decided := t.at(a.DecidedAt)
	switch a.State {
	case guard.ApprovalPending:
		if !t.now.Before(a.ExpiresAt) {
			return append(steps, storyStep{Kind: "expired", Text: "expired at " + t.at(a.ExpiresAt) + " with no decision"})
		}
		return append(steps, storyStep{Kind: "waiting", Text: "awaiting a decision until " + t.at(a.ExpiresAt)})
	case guard.ApprovalDenied:
		return append(steps, storyStep{Kind: "denied", Text: "denied by " + a.DecidedBy + " at " + decided + t.reason(a.Reason)})
	case guard.ApprovalExpired:
		return append(steps, storyStep{Kind: "expired", Text: "expired at " + decided + " with no decision"})
	case guard.ApprovalWithdrawn:
		return append(steps, storyStep{Kind: "withdrawn", Text: "withdrawn at " + decided + t.withdrawal()})
	}
	approved := storyStep{Kind: "approved", Text: "approved by " + a.DecidedBy + " at " + decided + t.reason(a.Reason)}
	gone := wasTold || !a.SessionEnded.IsZero() // its client no longer waited on it
	switch {
	case a.State == guard.ApprovalUsed && t.passer != nil && t.passer.ID != c.ID:
		return append(steps, approved, storyStep{Kind: "retry-passed", Text: "the retry " + t.passWord() + " at " + t.at(usedAt(a, t.passer)),
			Link: "/activity/" + pathID(t.passer.ID)})
	case a.State == guard.ApprovalUsed && !gone:
		approved.Text += ", while the call waited"
		return append(steps, approved)
	case a.State == guard.ApprovalUsed:
		return append(steps, approved, storyStep{Kind: "retry-passed", Text: "a retry " + t.passWord() + " at " + t.at(a.UsedAt)})
	case !gone && c.Outcome == "":
		return append(steps, approved) // the waiting call goes on now
	case t.now.Before(a.ExpiresAt):
		return append(steps, approved, storyStep{Kind: "no-retry-yet", Text: "no retry yet: the approval lets one through until " + t.at(a.ExpiresAt)})
	}
	return append(steps, approved, storyStep{Kind: "retry-never-made", Text: "the retry was never made"})
}

// passedSteps are the story of the call the approval let through: on
// which approval, who approved it and when, for which held call.
func (t storyTeller) passedSteps(c *store.Call) []storyStep {
	a := t.a
	steps := []storyStep{
		{Kind: "passed-on", Text: t.passWord() + " on approval " + a.ID},
		{Kind: "approved", Text: "approved by " + a.DecidedBy + " at " + t.at(a.DecidedAt)},
	}
	if t.held != nil || !a.CreatedAt.IsZero() {
		steps = append(steps, t.heldCall("held-call", "for ", ""))
	}
	if t.full && a.Session != "" && c.Session != a.Session {
		steps = append(steps, storyStep{Kind: "other-session", Text: "made in another session than the held call's (approval.scope: any)"})
	}
	return steps
}

// heldCall is a step that names the held call, between lead and tail:
// "the call told to retry at T", else "the call held at T", linked to its
// page when the log holds it.
func (t storyTeller) heldCall(kind, lead, tail string) storyStep {
	name := "the call held at " + t.at(t.a.CreatedAt)
	st := storyStep{Kind: kind}
	if t.held != nil {
		if told, ok := toldAt(t.held); ok {
			name = "the call told to retry at " + t.at(told)
		} else if at, err := time.Parse(time.RFC3339Nano, t.held.Time); err == nil {
			name = "the call held at " + t.at(at)
		}
		st.Link = "/activity/" + pathID(t.held.ID)
	}
	st.Text = lead + name + tail
	return st
}

// reason is a person's reason, on the call's own page.
func (t storyTeller) reason(r string) string {
	if !t.full || r == "" {
		return ""
	}
	return ": " + r
}

// withdrawal is why the approval was withdrawn: the approval's own
// reason where it keeps one, else the one its decision record gave
// (the held call's row shows it when that record was its latest), else
// nothing.
func (t storyTeller) withdrawal() string {
	r := t.a.Reason
	if r == "" && t.held != nil && t.held.Decision == guard.ApprovalWithdrawn {
		r = t.held.Reason
	}
	if r == "" {
		return ""
	}
	return ": " + r
}

// usedAt is when an approval let a call through: when it was used, else
// when that call was made.
func usedAt(a *guard.Approval, c *store.Call) time.Time {
	if !a.UsedAt.IsZero() {
		return a.UsedAt
	}
	at, _ := time.Parse(time.RFC3339Nano, c.Time)
	return at
}
