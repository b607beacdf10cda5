package stream

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
	"github.com/guard-mcp/guard/stream/streamtest"
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

// streamUser is the caller the front authenticated for every fifth call
// of appendCalls, with a group a receiver's parser could trip on.
var streamUser = guard.Identity{Subject: "user-7f3a", Email: "alice@example.com", Groups: []string{"sre", `on-call "eu" [a\b]`}}

// appendCalls appends n calls (a request and an outcome each) whose
// arguments carry what a receiver's parser could trip on; every fifth is
// streamUser's.
func appendCalls(db *store.DB, from, n int) error {
	for i := from; i < from+n; i++ {
		call := guard.NewID()
		args := fmt.Sprintf(`{"path":"/tmp/f%d","text":"quote \" bracket ] backslash \\ café 日本 \u0007"}`, i)
		decision := guard.DecisionAllowed
		outcome := guard.OutcomeOK
		if i%7 == 3 {
			decision, outcome = guard.DecisionDenied, guard.OutcomeDenied
		}
		var who guard.Identity
		if i%5 == 2 {
			who = streamUser
		}
		err := db.Append(
			&guard.Record{CallID: call, Kind: guard.KindRequest, Server: "files", Method: "tools/call", Tool: "write_file",
				Arguments: args, Decision: decision, DecidedBy: "default", Session: "s1", Client: "test/1",
				User: who.Subject, UserEmail: who.Email, UserGroups: who.Groups},
			&guard.Record{CallID: call, Kind: guard.KindOutcome, Server: "files", Method: "tools/call", Tool: "write_file",
				Decision: decision, Outcome: outcome, Result: `{"content":[{"type":"text","text":"ok ` + strconv.Itoa(i) + `"}]}`, DurationMS: 3,
				User: who.Subject, UserEmail: who.Email, UserGroups: who.Groups})
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
	if err := db.Reader().Records(context.Background(), func(r *guard.Record) error { recs = append(recs, r); return nil }); err != nil {
		t.Fatal(err)
	}
	return recs
}

// running is a streamer started by a test.
type running struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func startStreamer(t *testing.T, db *store.DB, holder string, recv ...Config) *running {
	t.Helper()
	r, _ := startWith(t, Options{Log: db.Streams(), Receivers: recv, Holder: holder, LeaseTTL: 3 * time.Second,
		Logger: slog.New(slog.NewTextHandler(streamtest.LogWriter{T: t}, nil)), Hostname: "test-host"})
	return r
}

// startWith starts a streamer with opts (looking for records every 50 ms)
// until the test ends.
func startWith(t *testing.T, opts Options) (*running, *Streamer) {
	t.Helper()
	opts.Poll = 50 * time.Millisecond
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan struct{})}
	go func() { defer close(r.done); s.Run(ctx) }()
	t.Cleanup(r.stop)
	return r, s
}

func (r *running) stop() {
	r.cancel()
	<-r.done
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
	for k, want := range map[string]string{"user": r.User, "user_email": r.UserEmail} {
		if got, _ := w[k].(string); got != want {
			t.Errorf("record %d: %s = %q, want %q", r.Seq, k, got, want)
		}
	}
	var groups []string
	gs, _ := w["user_groups"].([]any)
	for _, g := range gs {
		groups = append(groups, g.(string))
	}
	if !slices.Equal(groups, r.UserGroups) {
		t.Errorf("record %d: user_groups %q, want %q", r.Seq, groups, r.UserGroups)
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

// entry is a receiver's entry in audit.stream.
func entry(r interface{ Receiver() streamtest.Entry }) Config { return Config(r.Receiver()) }

// receiver is a real receiver a test streams to.
type receiver interface {
	Receiver() streamtest.Entry
	Start()
	Stop()
	WaitRecords(n int)
	Seqs() []int64
}

// testOutage streams to a receiver that is stopped while records flow and
// started again: every record arrives, in order, at least once.
func testOutage(t *testing.T, rc receiver) {
	db := openDB(t, filepath.Join(t.TempDir(), "g.db"))
	mustAppend(t, db, 0, 50)
	startStreamer(t, db, "A", entry(rc))
	rc.WaitRecords(100)
	app := startAppender(t, db, 50)
	rc.WaitRecords(200) // records flowing
	rc.Stop()
	before := len(committed(t, db))
	streamtest.WaitFor(t, "records appended while the receiver is down", func() bool { return len(committed(t, db)) >= before+200 })
	rc.Start()
	rc.WaitRecords(before + 300)
	n := app.end()
	recs := committed(t, db)
	if len(recs) != 2*n {
		t.Fatalf("%d records for %d calls", len(recs), n)
	}
	rc.WaitRecords(len(recs))
	streamtest.CheckDelivery(t, rc.Seqs(), int64(len(recs)), false)
	streamtest.WaitFor(t, "the cursor to reach the end", func() bool {
		n, _, err := db.Streams().StreamLag(t.Context(), entry(rc).Name())
		return err == nil && n == 0
	})
}

// testRestart stops the streamer and the database, appends while guard is
// stopped, and starts both again: the new streamer resumes after the
// cursor, and a clean stop leaves nothing to send twice.
func testRestart(t *testing.T, rc receiver) {
	path := filepath.Join(t.TempDir(), "g.db")
	db := openDB(t, path)
	mustAppend(t, db, 0, 100)
	r := startStreamer(t, db, "first", entry(rc))
	rc.WaitRecords(200)
	r.stop()
	if n, err := db.Streams().StreamCursor(t.Context(), entry(rc).Name()); err != nil || n != 200 {
		t.Fatalf("cursor %d after a clean stop (%v), want 200", n, err)
	}
	mustAppend(t, db, 100, 100)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openDB(t, path)
	mustAppend(t, db, 200, 50)
	recs := committed(t, db)
	startStreamer(t, db, "second", entry(rc))
	rc.WaitRecords(len(recs))
	streamtest.CheckDelivery(t, rc.Seqs(), int64(len(recs)), true)
}

// testDelivery streams calls calls to a receiver (TLS ones verified
// against roots) and checks that each record arrived once, in order; it
// returns the records.
func testDelivery(t *testing.T, rc receiver, roots *x509.CertPool, calls int) []*guard.Record {
	t.Helper()
	db := openDB(t, filepath.Join(t.TempDir(), "g.db"))
	mustAppend(t, db, 0, calls)
	recs := committed(t, db)
	startWith(t, Options{Log: db.Streams(), Receivers: []Config{entry(rc)}, RootCAs: roots, Hostname: "test-host"})
	rc.WaitRecords(len(recs))
	streamtest.CheckDelivery(t, rc.Seqs(), int64(len(recs)), true)
	return recs
}
