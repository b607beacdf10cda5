package store

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
)

// synthCalls appends n tool calls through the store's append path, a
// request and an outcome each, 10 ms apart from start, 500 calls to an
// append: over three servers and seven tools, one in 50 denied by
// "no-etc", one in 100 held (approved by alice after 90 s, the outcome's
// time), one in 20 of the allowed ones a tool error, the rest allowed by
// "read-files".
func synthCalls(tb testing.TB, db *DB, n int, start time.Time) {
	tb.Helper()
	var batch []*guard.Record
	for i := range n {
		at := start.Add(time.Duration(i) * 10 * time.Millisecond)
		id := fmt.Sprintf("synth-%08d", i)
		q := &guard.Record{CallID: id, Kind: guard.KindRequest, Time: at, Session: "s1", Client: "claude-ai/1.0",
			Server: "server-" + strconv.Itoa(i%3), Direction: guard.ClientToServer, Method: "tools/call",
			Tool: "tool_" + strconv.Itoa(i%7), Arguments: `{"path":"/srv/data/` + strconv.Itoa(i) + `.txt"}`}
		o := *q
		o.Kind, o.Arguments, o.Time, o.DurationMS = guard.KindOutcome, "", at.Add(5*time.Millisecond), 5
		switch {
		case i%50 == 0:
			q.Decision, q.DecidedBy, q.Reason = guard.DecisionDenied, "no-etc", "no writes under /etc"
			o.Decision, o.DecidedBy, o.Reason, o.Outcome = q.Decision, q.DecidedBy, q.Reason, guard.OutcomeDenied
		case i%100 == 1:
			q.Decision, q.DecidedBy, q.Reason = guard.DecisionHeld, "default", "destructive tool"
			o.Decision, o.DecidedBy, o.Reason, o.Outcome = guard.DecisionAllowed, "alice", "ok", guard.OutcomeOK
			o.Time = at.Add(90 * time.Second)
		default:
			q.Decision, q.DecidedBy = guard.DecisionAllowed, "read-files"
			o.Decision, o.DecidedBy, o.Outcome = q.Decision, q.DecidedBy, guard.OutcomeOK
			if i%20 == 3 {
				o.Outcome = guard.OutcomeToolError
			}
		}
		batch = append(batch, q, &o)
		if len(batch) == 1000 || i == n-1 {
			if err := db.Append(batch...); err != nil {
				tb.Fatal(err)
			}
			batch = nil
		}
	}
}

// TestActivityAtScale builds a log of GUARD_REPORT_CALLS calls (1,000,000:
// 2,000,000 records) and reports how long Activity and Verify take on it.
// It is a figure, not a check: it runs only when that variable is set.
func TestActivityAtScale(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("GUARD_REPORT_CALLS"))
	if n <= 0 {
		t.Skip("set GUARD_REPORT_CALLS to the number of calls")
	}
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "big.db")
	if p := os.Getenv("GUARD_REPORT_DB"); p != "" {
		path = p // kept, to run the command line on it
	}
	db := openDB(t, path)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := os.Stat(path + ".built"); err != nil {
		t0 := time.Now()
		synthCalls(t, db, n, start)
		t.Logf("%d calls appended in %v", n, time.Since(t0))
		_ = os.WriteFile(path+".built", nil, 0o600)
	}
	t0 := time.Now()
	a, err := db.Reader().Activity(ctx, start, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("activity of %d calls: %v (%d held)", a.Calls, time.Since(t0), len(a.Approvals))
	t0 = time.Now()
	a, err = db.Reader().Activity(ctx, start.Add(time.Duration(n)*10*time.Millisecond*29/30), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("activity of the last 30th, %d calls: %v", a.Calls, time.Since(t0))
	t0 = time.Now()
	rep, err := db.Verifier().Verify(ctx)
	if err != nil || !rep.OK {
		t.Fatal(rep, err)
	}
	t.Logf("verify of %d records: %v", rep.Records, time.Since(t0))
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// A held call's verdict comes from its first decision record, whichever
// words it uses (a call's decision or an approval's state), else from the
// call's outcome; the wait runs from the request to that record.
func TestActivityHeldCalls(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, filepath.Join(t.TempDir(), "h.db"))
	defer db.Close()
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	var recs []*guard.Record
	held := func(id string, after time.Duration, outcome string, decisions ...guard.Record) {
		recs = append(recs, &guard.Record{CallID: id, Kind: guard.KindRequest, Time: at, Server: "s", Method: "tools/call",
			Tool: "t", Decision: guard.DecisionHeld, DecidedBy: "default"})
		if outcome != "" {
			recs = append(recs, &guard.Record{CallID: id, Kind: guard.KindOutcome, Time: at.Add(after), Server: "s",
				Method: "tools/call", Tool: "t", Decision: guard.DecisionHeld, DecidedBy: "default", Outcome: outcome})
		}
		for i, d := range decisions {
			d.CallID, d.Kind, d.Time = id, guard.KindDecision, at.Add(time.Duration(i+1)*time.Minute)
			recs = append(recs, &d)
		}
	}
	held("approved-state", time.Second, guard.OutcomeAwaitingApproval,
		guard.Record{Decision: guard.ApprovalApproved, DecidedBy: "alice", Approval: "a-1"},
		guard.Record{Decision: guard.ApprovalDenied, DecidedBy: "bob"}) // too late: the first decision stands
	held("denied", time.Second, guard.OutcomeAwaitingApproval, guard.Record{Decision: guard.DecisionDenied, DecidedBy: "bob", Reason: "no"})
	held("expired-state", time.Second, guard.OutcomeAwaitingApproval, guard.Record{Decision: guard.ApprovalExpired})
	held("withdrawn", 3*time.Second, guard.OutcomeCancelled)
	held("waiting", time.Second, guard.OutcomeAwaitingApproval)
	held("in-flight", 0, "")
	if err := db.Append(recs...); err != nil {
		t.Fatal(err)
	}
	a, err := db.Reader().Activity(ctx, at, at.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		id, verdict, by, approval string
		waited                    time.Duration
	}{
		{"approved-state", audit.HeldApproved, "alice", "a-1", time.Minute},
		{"denied", audit.HeldDenied, "bob", "denied", time.Minute},
		{"expired-state", audit.HeldExpired, "", "expired-state", time.Minute},
		{"withdrawn", audit.HeldWithdrawn, "", "withdrawn", 3 * time.Second},
		{"waiting", audit.HeldUndecided, "", "waiting", 0},
		{"in-flight", audit.HeldUndecided, "", "in-flight", 0},
	}
	if len(a.Approvals) != len(want) || a.Held != int64(len(want)) {
		t.Fatalf("%d held calls, %d counted: %+v", len(a.Approvals), a.Held, a.Approvals)
	}
	for i, w := range want {
		h := a.Approvals[i]
		if h.CallID != w.id || h.Verdict != w.verdict || h.DecidedBy != w.by || h.Approval != w.approval || h.Waited != w.waited {
			t.Errorf("%s: %+v, want %+v", w.id, h, w)
		}
	}
}

// A review recorded in the log is reported as the log has it, over the
// catalog's working table; a review of a definition the catalog does not
// have is reported too.
func TestActivityToolReviewsFromTheLog(t *testing.T) {
	ctx := context.Background()
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	db, err := Open(ctx, Options{Path: filepath.Join(t.TempDir(), "r.db"), Durability: "normal", Now: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	def := func(desc string) guard.Tool {
		return guard.Tool{Name: "t", Def: []byte(`{"name":"t","description":"` + desc + `"}`), Pin: "sha256:" + desc}
	}
	if err := db.Catalog().RecordTools(ctx, "s", []guard.Tool{def("v1")}, at.Add(-time.Hour), false); err != nil {
		t.Fatal(err)
	}
	if err := db.Catalog().RecordTools(ctx, "s", []guard.Tool{def("v2")}, at, false); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Catalog().DecideTool(ctx, "s", "t", "sha256:v2", true, "alice"); err != nil {
		t.Fatal(err)
	}
	if err := db.Append(
		&guard.Record{Kind: guard.KindToolReview, Time: at.Add(time.Minute), Server: "s", Tool: "t", Pin: "sha256:v2",
			Decision: guard.ReviewRejected, DecidedBy: "alice@example.com", Detail: `{"cause":"changed"}`},
		&guard.Record{Kind: guard.KindToolReview, Time: at.Add(2 * time.Minute), Server: "s", Tool: "gone", Pin: "sha256:gone",
			Decision: guard.ReviewAccepted, DecidedBy: "bob", Detail: `{"cause":"new"}`}); err != nil {
		t.Fatal(err)
	}
	a, err := db.Reader().Activity(ctx, at, at.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(a.ToolChanges) != 2 {
		t.Fatalf("%+v", a.ToolChanges)
	}
	if c := a.ToolChanges[0]; c.Pin != "sha256:v2" || c.Cause != guard.CauseChanged || c.State != guard.ReviewRejected ||
		c.DecidedBy != "alice@example.com" || !c.DecidedAt.Equal(at.Add(time.Minute)) || !c.FirstSeen.Equal(at) {
		t.Errorf("the changed definition: %+v", c)
	}
	if c := a.ToolChanges[1]; c.Tool != "gone" || c.Cause != guard.CauseNew || c.State != guard.ReviewAccepted || c.DecidedBy != "bob" || !c.FirstSeen.IsZero() {
		t.Errorf("a definition the catalog does not have: %+v", c)
	}
}
