package web

import (
	"bytes"
	"context"
	"html"
	"regexp"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
)

// The story of a held call, in words, for each way it can go: told to
// retry, then decided, then retried or not; decided while it still
// waited; withdrawn or expired. On Activity it is one line whose times
// leave out the row's day; on the call's page it has dates and reasons.
func TestStoryOfAHeldCall(t *testing.T) {
	day := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	at := func(h, m, s int) time.Time {
		return day.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute + time.Duration(s)*time.Second)
	}
	call := func(id string, made time.Time, decision, outcome string, waited time.Duration) *store.Call {
		return &store.Call{ID: id, Time: made.Format(time.RFC3339Nano), Session: "s1", Decision: decision, Outcome: outcome,
			DurationMS: waited.Milliseconds(), Approval: "appr", Key: made.UnixMilli()}
	}
	approval := func(state string, decided time.Time, by, reason string) *guard.Approval {
		return &guard.Approval{ID: "appr", CallID: "held", Session: "s1", State: state, DecidedBy: by, DecidedAt: decided, Reason: reason,
			CreatedAt: at(14, 2, 22), ExpiresAt: at(14, 12, 22), Scope: guard.ScopeSession}
	}
	// Held at 14:02:22, told to retry 50 s later.
	told := call("held", at(14, 2, 22), guard.DecisionHeld, guard.OutcomeAwaitingApproval, 50*time.Second)
	retry := call("retry", at(14, 6, 2), guard.DecisionAllowed, guard.OutcomeOK, 0)
	used := approval(guard.ApprovalUsed, at(14, 5, 40), "alice", "checked the path")
	used.UsedAt = at(14, 6, 2)
	gone := approval(guard.ApprovalPending, time.Time{}, "", "")
	gone.Scope, gone.SessionEnded = guard.ScopeAny, at(14, 3, 30)
	noReason := approval(guard.ApprovalWithdrawn, at(14, 4, 0), "guard", "")
	with := func(a *guard.Approval, change func(*guard.Approval)) *guard.Approval {
		c := *a
		change(&c)
		return &c
	}
	for _, tc := range []struct {
		name        string
		a           *guard.Approval
		calls       []*store.Call
		row         string // the call whose story is told
		now         time.Time
		state       string
		line, full  string
		kinds, link string
	}{
		{name: "told to retry, approved, and the retry passed", a: used, calls: []*store.Call{told, retry}, row: "held",
			state: guard.ApprovalApproved,
			line:  "told to retry at 14:03:12 · approved by alice at 14:05:40 · the retry passed at 14:06:02",
			full:  "told to retry at 2026-03-01 14:03:12Z · approved by alice at 2026-03-01 14:05:40Z: checked the path · the retry passed at 2026-03-01 14:06:02Z",
			kinds: "told-to-retry approved retry-passed", link: "/activity/retry"},
		{name: "the retry's own story", a: used, calls: []*store.Call{told, retry}, row: "retry",
			state: guard.ApprovalApproved,
			line:  "passed on approval appr, approved by alice at 14:05:40, for the call told to retry at 14:03:12",
			full:  "passed on approval appr, approved by alice at 2026-03-01 14:05:40Z, for the call told to retry at 2026-03-01 14:03:12Z",
			kinds: "passed-on approved held-call", link: "/activity/held"},
		{name: "approved, the retry not made yet", a: approval(guard.ApprovalApproved, at(14, 5, 40), "alice", ""), calls: []*store.Call{told},
			row: "held", now: at(14, 7, 0), state: guard.ApprovalApproved,
			line:  "told to retry at 14:03:12 · approved by alice at 14:05:40 · no retry yet: the approval lets one through until 14:12:22",
			kinds: "told-to-retry approved no-retry-yet"},
		{name: "approved, and the retry never made", a: approval(guard.ApprovalApproved, at(14, 5, 40), "alice", ""), calls: []*store.Call{told},
			row: "held", now: at(15, 0, 0), state: guard.ApprovalApproved,
			line:  "told to retry at 14:03:12 · approved by alice at 14:05:40 · the retry was never made",
			kinds: "told-to-retry approved retry-never-made"},
		{name: "denied", a: approval(guard.ApprovalDenied, at(14, 5, 40), "bob", "not on production"), calls: []*store.Call{told},
			row: "held", state: guard.ApprovalDenied,
			line:  "told to retry at 14:03:12 · denied by bob at 14:05:40",
			full:  "told to retry at 2026-03-01 14:03:12Z · denied by bob at 2026-03-01 14:05:40Z: not on production",
			kinds: "told-to-retry denied"},
		{name: "expired", a: approval(guard.ApprovalExpired, at(14, 12, 22), "guard", ""), calls: []*store.Call{told},
			row: "held", state: guard.ApprovalExpired,
			line:  "told to retry at 14:03:12 · expired at 14:12:22 with no decision",
			kinds: "told-to-retry expired"},
		{name: "past its expiry, not yet ended", a: approval(guard.ApprovalPending, time.Time{}, "", ""), calls: []*store.Call{told},
			row: "held", now: at(14, 20, 0), state: guard.ApprovalExpired,
			line:  "told to retry at 14:03:12 · expired at 14:12:22 with no decision",
			kinds: "told-to-retry expired"},
		{name: "withdrawn, with the approval's reason", a: approval(guard.ApprovalWithdrawn, at(14, 4, 0), "guard", "the call's client is gone"),
			calls: []*store.Call{told}, row: "held", state: guard.ApprovalWithdrawn,
			line:  "told to retry at 14:03:12 · withdrawn at 14:04:00: the call's client is gone",
			kinds: "told-to-retry withdrawn"},
		{name: "withdrawn, with the decision record's reason", a: noReason, row: "held", state: guard.ApprovalWithdrawn,
			calls: []*store.Call{{ID: "held", Time: told.Time, Decision: guard.ApprovalWithdrawn, Reason: "the client's session ended: no later call of it can use this approval",
				Outcome: guard.OutcomeAwaitingApproval, DurationMS: told.DurationMS, Approval: "appr"}},
			line:  "told to retry at 14:03:12 · withdrawn at 14:04:00: the client's session ended: no later call of it can use this approval",
			kinds: "told-to-retry withdrawn"},
		{name: "withdrawn, no reason known", a: noReason, calls: []*store.Call{call("held", at(14, 2, 22), guard.DecisionHeld, guard.OutcomeCancelled, 0)},
			row: "held", state: guard.ApprovalWithdrawn,
			line:  "withdrawn at 14:04:00",
			kinds: "withdrawn"},
		{name: "approved while the call still waited", a: with(approval(guard.ApprovalUsed, at(14, 2, 40), "alice", ""), func(a *guard.Approval) { a.UsedAt = at(14, 2, 40) }), calls: []*store.Call{call("held", at(14, 2, 22), guard.DecisionAllowed, guard.OutcomeOK, 18*time.Second)},
			row: "held", state: guard.ApprovalApproved,
			line:  "approved by alice at 14:02:40, while the call waited",
			kinds: "approved"},
		{name: "its client gone, the hold open to any session", a: gone, calls: []*store.Call{told}, row: "held", now: at(14, 4, 0),
			state: guard.ApprovalPending,
			line:  "told to retry at 14:03:12 · its client went at 14:03:30 · awaiting a decision until 14:12:22",
			kinds: "told-to-retry client-gone waiting"},
		{name: "the same call made again while the approval was open", a: approval(guard.ApprovalDenied, at(14, 5, 40), "bob", "no"),
			calls: []*store.Call{told, call("again", at(14, 4, 0), guard.ApprovalDenied, guard.OutcomeDenied, 100*time.Second)},
			row:   "again", state: guard.ApprovalDenied,
			line:  "the same call made again while the approval of the call told to retry at 14:03:12 was open · denied by bob at 14:05:40",
			kinds: "retried denied", link: "/activity/held"},
		{name: "a retry from another session (approval.scope: any)", a: with(used, func(a *guard.Approval) { a.Scope = guard.ScopeAny }), calls: []*store.Call{told, {ID: "retry", Time: retry.Time, Session: "s2", Decision: guard.DecisionAllowed, Outcome: guard.OutcomeOK, Approval: "appr"}},
			row: "retry", state: guard.ApprovalApproved,
			full:  "passed on approval appr, approved by alice at 2026-03-01 14:05:40Z, for the call told to retry at 2026-03-01 14:03:12Z, made in another session than the held call's (approval.scope: any)",
			kinds: "passed-on approved held-call", link: "/activity/held"},
		{name: "the call let past its tool's review", a: with(used, func(a *guard.Approval) { a.Rule = guard.ToolReviewRule }), calls: []*store.Call{told, retry}, row: "held", state: guard.ApprovalApproved,
			line:  "told to retry at 14:03:12 · approved by alice at 14:05:40 · the retry went on to the rules at 14:06:02",
			kinds: "told-to-retry approved retry-passed", link: "/activity/retry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := tc.now
			if now.IsZero() {
				now = at(14, 8, 0)
			}
			ac := approvalCalls{a: tc.a, calls: tc.calls}
			var row *store.Call
			for _, c := range tc.calls {
				if c.ID == tc.row {
					row = c
				}
			}
			line, full := storyOf(row, ac, now, false), storyOf(row, ac, now, true)
			if line.State != tc.state {
				t.Errorf("state %q, want %q", line.State, tc.state)
			}
			if tc.line != "" && line.String() != tc.line {
				t.Errorf("on Activity:\n %q\nwant\n %q", line, tc.line)
			}
			if tc.full != "" && full.String() != tc.full {
				t.Errorf("on the call's page:\n %q\nwant\n %q", full, tc.full)
			}
			var kinds, links []string
			for _, st := range line.Steps {
				kinds = append(kinds, st.Kind)
				if st.Link != "" {
					links = append(links, st.Link)
				}
			}
			if got := strings.Join(kinds, " "); got != tc.kinds {
				t.Errorf("steps %q, want %q", got, tc.kinds)
			}
			if got := strings.Join(links, " "); got != tc.link {
				t.Errorf("links %q, want %q", got, tc.link)
			}
			// Rendered, the story reads the same, its links to the calls
			// it names.
			var b bytes.Buffer
			if err := storyLine(line).Render(context.Background(), &b); err != nil {
				t.Fatal(err)
			}
			if text := html.UnescapeString(regexp.MustCompile(`<[^>]*>`).ReplaceAllString(b.String(), "")); text != line.String() {
				t.Errorf("rendered as %q, want %q", text, line.String())
			}
			if tc.link != "" && !strings.Contains(b.String(), `<a href="`+tc.link+`">`) {
				t.Errorf("rendered without its link: %s", b.String())
			}
		})
	}
}
