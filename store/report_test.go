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
	a, err := db.Activity(ctx, start, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("activity of %d calls: %v (%d held)", a.Calls, time.Since(t0), len(a.Approvals))
	t0 = time.Now()
	a, err = db.Activity(ctx, start.Add(time.Duration(n)*10*time.Millisecond*29/30), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("activity of the last 30th, %d calls: %v", a.Calls, time.Since(t0))
	t0 = time.Now()
	rep, err := db.Verify(ctx)
	if err != nil || !rep.OK {
		t.Fatal(rep, err)
	}
	t.Logf("verify of %d records: %v", rep.Records, time.Since(t0))
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}
