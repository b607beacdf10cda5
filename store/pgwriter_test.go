package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/guard-mcp/guard/store/sqlite"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/internal/pgtest"
	"github.com/guard-mcp/guard/store/postgres"
)

// callIndexRows reads the call index and its words' presence, row by row.
func callIndexRows(t *testing.T, db *DB) []string {
	t.Helper()
	rows, err := db.r.QueryContext(context.Background(), `SELECT k, call_id, req_seq, out_seq, dec_seq, server, tool, client, session,
		decision, decided_by, outcome, approval, user_subject, user_email FROM call_index ORDER BY k`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k, req, o, d int64
		var id, server, tool, client, session, dec, by, outcome, ap, user, email string
		if err := rows.Scan(&k, &id, &req, &o, &d, &server, &tool, &client, &session, &dec, &by, &outcome, &ap, &user, &email); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprint(k, id, req, o, d, server, tool, client, session, dec, by, outcome, ap, user, email))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// The ingester keeps the call index as it appends (on PostgreSQL all of
// a batch's rows at once, worked out from what the batch read); making
// it again from the records, one record at a time, gives the same rows.
// The calls here have later rounds, held calls decided after their
// outcome, approvals named only by a decision, outcomes and decisions
// of calls that have no request, and many calls in one millisecond;
// they are appended all at once (sharing transactions) and one append per
// transaction (each reading what the ones before committed).
func TestCallIndexAsAppendedIsAsRebuilt(t *testing.T) {
	for _, apart := range []bool{false, true} {
		t.Run(map[bool]string{false: "together", true: "apart"}[apart], func(t *testing.T) { testCallIndexAsAppended(t, apart) })
	}
}

func testCallIndexAsAppended(t *testing.T, apart bool) {
	ctx := context.Background()
	db := openDB(t, testPath(t))
	defer db.Close()
	at := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	var batches [][]*guard.Record
	for i := range 40 {
		id := fmt.Sprintf("call-%d", i)
		r := func(kind string, f func(*guard.Record)) *guard.Record {
			rec := &guard.Record{CallID: id, Kind: kind, Server: "files", Tool: "write", Client: "c", Session: fmt.Sprint(i % 3),
				Arguments: fmt.Sprintf(`{"n":%d}`, i), Time: at.Add(time.Duration(i/10) * time.Millisecond)}
			if i%3 != 0 { // a caller the front authenticated
				rec.User, rec.UserEmail, rec.UserGroups = fmt.Sprintf("sub-%d", i%4), fmt.Sprintf("u%d@example.com", i%4), []string{"g"}
			}
			if f != nil {
				f(rec)
			}
			return rec
		}
		switch i % 5 {
		case 0: // allowed, answered
			batches = append(batches, []*guard.Record{r(guard.KindRequest, func(x *guard.Record) { x.Decision = guard.DecisionAllowed })},
				[]*guard.Record{r(guard.KindOutcome, func(x *guard.Record) { x.Outcome = "ok"; x.Result = "fine words" })})
		case 1: // held, then approved by a decision, then answered
			batches = append(batches, []*guard.Record{
				r(guard.KindRequest, func(x *guard.Record) { x.Decision = guard.DecisionHeld; x.Approval = "ap-" + id }),
				r(guard.KindDecision, func(x *guard.Record) { x.Decision = guard.DecisionAllowed; x.DecidedBy = "alice" }),
				r(guard.KindOutcome, func(x *guard.Record) { x.Outcome = "ok"; x.Result = "done" })})
		case 2: // two rounds: a second request, then a denial in the outcome
			batches = append(batches, []*guard.Record{r(guard.KindRequest, func(x *guard.Record) { x.Decision = guard.DecisionAllowed })},
				[]*guard.Record{r(guard.KindRequest, nil), r(guard.KindOutcome, func(x *guard.Record) {
					x.Outcome = "denied"
					x.Decision = guard.DecisionDenied
					x.DecidedBy = "rule:x"
				})})
		case 3: // a decision naming only an approval, then an outcome
			batches = append(batches, []*guard.Record{r(guard.KindRequest, func(x *guard.Record) { x.Decision = guard.DecisionHeld })},
				[]*guard.Record{r(guard.KindDecision, func(x *guard.Record) { x.Approval = "ap2-" + id })},
				[]*guard.Record{r(guard.KindOutcome, func(x *guard.Record) { x.Outcome = "error"; x.Result = "boom" })})
		case 4: // no request at all
			batches = append(batches, []*guard.Record{r(guard.KindOutcome, func(x *guard.Record) { x.Outcome = "ok" }),
				r(guard.KindDecision, func(x *guard.Record) { x.Decision = guard.DecisionDenied })})
		}
	}
	// Several appends in flight at once share transactions.
	var pending []<-chan error
	for _, b := range batches {
		pending = append(pending, db.AppendAsync(b...))
		if apart {
			db.ing.caughtUp(ctx)
		}
	}
	for _, p := range pending {
		if err := <-p; err != nil {
			t.Fatal(err)
		}
	}
	db.ing.caughtUp(ctx)
	appended := callIndexRows(t, db)
	if len(appended) != 32 { // every call but the 8 with no request
		t.Fatalf("%d rows in the call index, want 32:\n%v", len(appended), appended)
	}
	if err := db.CallIndex().RebuildCallIndex(ctx); err != nil {
		t.Fatal(err)
	}
	if rebuilt := callIndexRows(t, db); !slices.Equal(appended, rebuilt) {
		t.Fatalf("the call index as appended:\n%v\nas rebuilt from the records:\n%v", appended, rebuilt)
	}
}

// postgresOnly skips a test of what only PostgreSQL has when the tests run
// on SQLite.
func postgresOnly(t testing.TB) {
	t.Helper()
	if !pgtest.Postgres() {
		t.Skip("PostgreSQL only (" + pgtest.EngineEnv + "=postgres)")
	}
}

// While PostgreSQL is down, appends fail at once with the audit error
// (their calls are refused: fail closed); once it is back, appends go
// through again on the same DB, with no restart; and every append that
// was acknowledged, before, during or after, is in the log.
func TestPostgresDownFailsClosedAndRecovers(t *testing.T) {
	postgresOnly(t)
	c := pgtest.Start(t)
	ctx := context.Background()
	db, err := Open(ctx, Options{Path: c.URL, KeyPath: filepath.Join(t.TempDir(), "audit.key")})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var mu sync.Mutex
	var acked []string
	var failures []error
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r := rec(w*1000000+i, guard.KindRequest)
				err := db.Append(r)
				mu.Lock()
				if err == nil {
					acked = append(acked, r.ID)
				} else {
					failures = append(failures, err)
				}
				mu.Unlock()
			}
		}()
	}
	// until (an event, polled for): what the appenders have seen.
	until := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			mu.Lock()
			ok := cond()
			mu.Unlock()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("gave up waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	until("appends before the outage", func() bool { return len(acked) >= 50 })
	if err := c.Halt(); err != nil {
		t.Fatal(err)
	}
	until("a refused append", func() bool { return len(failures) > 0 })
	mu.Lock()
	first := failures[0]
	mu.Unlock()
	if !errors.Is(first, guard.ErrAuditWrite) {
		t.Errorf("an append while PostgreSQL is down failed with %v, want the audit write error", first)
	}
	if err := c.Resume(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	before := len(acked)
	mu.Unlock()
	until("appends after the outage", func() bool { return len(acked) >= before+50 })
	close(stop)
	wg.Wait()
	db.ing.caughtUp(ctx)
	var n int
	if err := db.r.QueryRowContext(ctx, `SELECT count(*) FROM records WHERE id = ANY(?)`, acked).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != len(acked) {
		t.Fatalf("%d of the %d acknowledged records are in the log", n, len(acked))
	}
	t.Logf("%d appends acknowledged, %d refused while PostgreSQL was down (first: %v)", len(acked), len(failures), first)
}

// A replica of the release before goes on after a newer one migrated the
// database (an added column, an added table): it appends and reads as
// before, and says in its log that it should be upgraded.
func TestAReplicaGoesOnWithANewerSchema(t *testing.T) {
	ctx := context.Background()
	path := testPath(t)
	db := openDB(t, path)
	latest := sqlite.LatestMigration()
	if db.pg {
		latest = postgres.LatestMigration()
	}
	// What the next release's migration might do.
	if _, err := db.w.ExecContext(ctx, `ALTER TABLE records ADD COLUMN future TEXT NOT NULL DEFAULT ''`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.w.ExecContext(ctx, `CREATE TABLE future_things (id TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.w.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied) VALUES (?, 'future.sql', '')`, latest+1); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	db, err := testOpen(ctx, Options{Path: path, Durability: "normal", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := db.Replicas().NewerSchema(); got != latest+1 {
		t.Errorf("NewerSchema() = %d, want %d", got, latest+1)
	}
	if !strings.Contains(logs.String(), "schema is newer than this guard") {
		t.Errorf("no warning in the log:\n%s", logs.String())
	}
	if err := db.Append(rec(1, guard.KindRequest), rec(1, guard.KindOutcome)); err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := db.Reader().Query(ctx, Filter{}, func(*Call) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("%d calls read back, want 1", n)
	}
}

// On PostgreSQL the writer makes the words of a call whose outcome comes
// in a later batch from the arguments it held since it committed the
// call's request, rather than from the request's record: the words are
// those the records make, as the verification checks them, whether the
// request went in an earlier batch of this writer, in the outcome's own
// batch, or in another writer's (which this one does not hold), with and
// without arguments.
func TestWordsOfACallsOutcomeAreThoseOfItsRecords(t *testing.T) {
	postgresOnly(t)
	ctx := context.Background()
	path := testPath(t)
	db := openDB(t, path)
	defer db.Close()
	other := openDB(t, path) // another replica
	defer other.Close()
	for i := range 9 {
		id := fmt.Sprintf("call-%d", i)
		req := &guard.Record{CallID: id, Kind: guard.KindRequest, Server: "files", Tool: "read", Decision: guard.DecisionAllowed,
			Arguments: fmt.Sprintf(`{"path":"alpha%d"}`, i)}
		if i >= 6 {
			req.Arguments = ""
		}
		out := &guard.Record{CallID: id, Kind: guard.KindOutcome, Server: "files", Tool: "read", Outcome: "ok", Result: fmt.Sprintf("beta%d", i)}
		var err error
		switch i % 3 {
		case 0:
			if err = db.Append(req); err == nil {
				err = db.Append(out)
			}
		case 1:
			err = db.Append(req, out)
		case 2:
			if err = other.Append(req); err == nil {
				err = db.Append(out)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	db.ing.caughtUp(ctx)
	if finding, err := db.Verifier().checkCallWords(ctx); err != nil || finding != "" {
		t.Fatalf("the text index against the records: %q, %v", finding, err)
	}
	var n int
	if err := db.r.QueryRowContext(ctx, `SELECT count(*) FROM call_text WHERE words @@ to_tsquery('simple', 'beta0 | beta3 | beta6')`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("%d calls found by their results' words (%v), want 3", n, err)
	}
}
