package stream

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/policy"
	"github.com/guard-mcp/guard/store"
)

func openDB(t *testing.T, path string) *store.DB {
	t.Helper()
	db, err := store.Open(context.Background(), store.Options{Path: path, Durability: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() }) // after the streamers' cleanups
	return db
}

// appendCalls appends n calls (a request and an outcome each) whose
// arguments carry what a receiver's parser could trip on.
func appendCalls(db *store.DB, from, n int) error {
	for i := from; i < from+n; i++ {
		call := guard.NewID()
		args := fmt.Sprintf(`{"path":"/tmp/f%d","text":"quote \" bracket ] backslash \\ café 日本 \u0007"}`, i)
		decision := guard.DecisionAllowed
		outcome := guard.OutcomeOK
		if i%7 == 3 {
			decision, outcome = guard.DecisionDenied, guard.OutcomeDenied
		}
		err := db.Append(
			&guard.Record{CallID: call, Kind: guard.KindRequest, Server: "files", Method: "tools/call", Tool: "write_file",
				Arguments: args, Decision: decision, DecidedBy: "default", Session: "s1", Client: "test/1"},
			&guard.Record{CallID: call, Kind: guard.KindOutcome, Server: "files", Method: "tools/call", Tool: "write_file",
				Decision: decision, Outcome: outcome, Result: `{"content":[{"type":"text","text":"ok ` + strconv.Itoa(i) + `"}]}`, DurationMS: 3})
		if err != nil {
			return err
		}
	}
	return nil
}

// mustAppend is appendCalls in a test's goroutine.
func mustAppend(t *testing.T, db *store.DB, from, n int) {
	t.Helper()
	if err := appendCalls(db, from, n); err != nil {
		t.Fatal(err)
	}
}

// committed waits until the database holds every record appended.
func committed(t *testing.T, db *store.DB) []*guard.Record {
	t.Helper()
	var recs []*guard.Record
	if err := db.Records(context.Background(), func(r *guard.Record) error { recs = append(recs, r); return nil }); err != nil {
		t.Fatal(err)
	}
	return recs
}

// running is a streamer started by a test.
type running struct {
	cancel context.CancelFunc
	done   chan struct{}
	s      *Streamer
}

func startStreamer(t *testing.T, db *store.DB, holder string, recv ...policy.Stream) *running {
	t.Helper()
	s, err := New(Options{Log: db, Receivers: recv, Holder: holder, Poll: 50 * time.Millisecond, LeaseTTL: 3 * time.Second,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil)), Hostname: "test-host"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan struct{}), s: s}
	go func() { defer close(r.done); s.Run(ctx) }()
	t.Cleanup(r.stop)
	return r
}

func (r *running) stop() {
	r.cancel()
	<-r.done
}

// testWriter sends the streamer's log to the test's.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(string(b))
	return len(b), nil
}

// waitFor polls cond until it holds, failing the test after a while.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freePort returns a loopback port no one listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// checkDelivery checks what a receiver got, as a list of seqs in the order
// received, against the log of n records: every record at least once, and
// each for the first time only after every record before it.
func checkDelivery(t *testing.T, got []int64, n int64, exact bool) {
	t.Helper()
	var next int64 = 1
	dups := 0
	for i, s := range got {
		switch {
		case s == next:
			next++
		case s < next:
			dups++
		default:
			t.Fatalf("record %d arrived (at %d) before record %d: a gap or a reorder", s, i, next)
		}
	}
	if next != n+1 {
		t.Fatalf("received records 1 to %d of %d", next-1, n)
	}
	if exact && dups > 0 {
		t.Fatalf("%d duplicates where none were expected: %v", dups, got)
	}
	t.Logf("%d records received in order, %d duplicates", n, dups)
}

// checkBody checks a received record's JSON against the record.
func checkBody(t *testing.T, body []byte, r *guard.Record) {
	t.Helper()
	var w map[string]any
	if err := json.Unmarshal(body, &w); err != nil {
		t.Fatalf("record %d: %v: %s", r.Seq, err, body)
	}
	for k, want := range map[string]any{"seq": float64(r.Seq), "id": r.ID, "call_id": r.CallID, "kind": r.Kind,
		"hash": r.Hash, "prev_hash": r.PrevHash, "time": r.Time.UTC().Format(timeLayout), "server": r.Server} {
		if w[k] != want {
			t.Errorf("record %d: %s = %v, want %v", r.Seq, k, w[k], want)
		}
	}
	if r.Arguments != "" {
		var args any
		_ = json.Unmarshal([]byte(r.Arguments), &args)
		if b1, b2 := mustJSON(w["arguments"]), mustJSON(args); b1 != b2 {
			t.Errorf("record %d: arguments %s, want %s", r.Seq, b1, b2)
		}
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// lines reads a file's lines (none when it does not exist yet).
func lines(t *testing.T, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out [][]byte
	for len(b) > 0 {
		i := 0
		for i < len(b) && b[i] != '\n' {
			i++
		}
		if i == len(b) {
			break // a line being written
		}
		out = append(out, b[:i])
		b = b[i+1:]
	}
	return out
}

// appender appends calls in the background until stopped.
type appender struct {
	stop chan struct{}
	wg   sync.WaitGroup
	n    int
}

func startAppender(t *testing.T, db *store.DB, from int) *appender {
	a := &appender{stop: make(chan struct{}), n: from}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		for {
			select {
			case <-a.stop:
				return
			default:
			}
			if err := appendCalls(db, a.n, 5); err != nil {
				t.Error(err)
				return
			}
			a.n += 5
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return a
}

// end stops it and returns the number of calls appended.
func (a *appender) end() int {
	close(a.stop)
	a.wg.Wait()
	return a.n
}
