package store

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
)

// pendingBatches is how many batches wait for their call index rows.
func pendingBatches(t *testing.T, db *DB) int {
	t.Helper()
	var n int
	if err := db.r.QueryRowContext(context.Background(), `SELECT count(*) FROM call_pending`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// queriedCalls are the ids of the calls a query returns.
func queriedCalls(t *testing.T, db *DB, f Filter) []string {
	t.Helper()
	var ids []string
	if err := db.Reader().Query(context.Background(), f, func(c *Call) error {
		ids = append(ids, c.ID)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	return ids
}

// firstCalls are call-0 to call-(n-1), sorted as queriedCalls sorts.
func firstCalls(n int) []string {
	var ids []string
	for i := range n {
		ids = append(ids, fmt.Sprintf("call-%d", i))
	}
	slices.Sort(ids)
	return ids
}

// On PostgreSQL the call index's rows are written after the records'
// transaction commits; a writer that never writes them (its process
// stopped between the two) leaves its batches pending, and a query still
// finds every committed call, by their words too: it writes them itself.
// The rows it writes are those a rebuild from the records makes.
func TestAQueryWritesTheCallIndexAWriterLeft(t *testing.T) {
	postgresOnly(t)
	ctx := context.Background()
	path := testPath(t)
	db := openDB(t, path)
	defer db.Close()
	db.ing.noIndex.Store(true)
	for i := range 30 {
		recs := []*guard.Record{rec(i, guard.KindRequest)}
		if i%2 == 0 {
			o := rec(i, guard.KindOutcome)
			o.Outcome, o.Result = "ok", fmt.Sprintf("result word%d", i)
			recs = append(recs, o)
		}
		if err := db.Append(recs...); err != nil {
			t.Fatal(err)
		}
	}
	// An outcome in a batch of its own, after its request's.
	o := rec(1, guard.KindOutcome)
	o.Outcome, o.Result = "error", "late words"
	if err := db.Append(o); err != nil {
		t.Fatal(err)
	}
	if n := pendingBatches(t, db); n == 0 {
		t.Fatal("no batch pending: the call index was written with the records")
	}
	if got := queriedCalls(t, db, Filter{}); !slices.Equal(got, firstCalls(30)) {
		t.Fatalf("a query with batches pending found %v", got)
	}
	if got := queriedCalls(t, db, Filter{Text: "late"}); !slices.Equal(got, []string{"call-1"}) {
		t.Fatalf("the words of an outcome written after its request's: %v", got)
	}
	if got := queriedCalls(t, db, Filter{Text: "word4"}); !slices.Equal(got, []string{"call-4"}) {
		t.Fatalf("the words of a call: %v", got)
	}
	if n := pendingBatches(t, db); n != 0 {
		t.Fatalf("%d batches pending after a query", n)
	}
	written := callIndexRows(t, db)
	if err := db.CallIndex().RebuildCallIndex(ctx); err != nil {
		t.Fatal(err)
	}
	if rebuilt := callIndexRows(t, db); !slices.Equal(written, rebuilt) {
		t.Fatalf("the call index as the query wrote it:\n%v\nas rebuilt from the records:\n%v", written, rebuilt)
	}
	rep, err := db.Verifier().Verify(ctx)
	if err != nil || !rep.OK {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}

// A replica killed between a batch's commit and its call index rows
// leaves them pending: another replica's writer writes them once it
// commits a batch of its own, and until then its queries do; verify
// finds the index whole.
func TestAReplicaKilledBeforeItsCallIndexLeavesNoCallOut(t *testing.T) {
	postgresOnly(t)
	ctx := context.Background()
	path := testPath(t)
	key, _ := pgKeys.Load(path)
	other := openDB(t, path) // a replica already running
	defer other.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperUnindexed$")
	cmd.Env = append(os.Environ(), "GUARD_STORE_UNINDEXED_DB="+path, "GUARD_STORE_UNINDEXED_KEY="+key.(string))
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if n := pendingBatches(t, other); n == 0 {
		t.Fatal("the killed replica left no batch pending")
	}
	// A read-only verify checks the index before the batches pending,
	// which it cannot write, and a read-only query says it cannot see
	// them rather than miss them.
	ro, err := OpenReadOnly(ctx, Options{Path: path, KeyPath: key.(string)})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if rep, err := ro.Verifier().Verify(ctx); err != nil || !rep.OK || rep.Records != 50 {
		t.Fatalf("a read-only verify with batches pending: %+v %v", rep, err)
	}
	if err := ro.Reader().Query(ctx, Filter{}, func(*Call) error { return nil }); err == nil {
		t.Fatal("a read-only query with batches no one writes returned calls")
	}
	// The other replica's writer writes them with its next batch.
	if err := other.Append(rec(50, guard.KindRequest)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pending batches to be written", func() bool { return pendingBatches(t, other) == 0 })
	if got := queriedCalls(t, other, Filter{}); !slices.Equal(got, firstCalls(51)) {
		t.Fatalf("calls after the crash: %v", got)
	}
	// A replica that starts, and a query of its, see them all too.
	db := openDB(t, path)
	defer db.Close()
	if got := queriedCalls(t, db, Filter{}); !slices.Equal(got, firstCalls(51)) {
		t.Fatalf("calls seen by a new replica: %v", got)
	}
	rep, err := db.Verifier().Verify(ctx)
	if err != nil || !rep.OK || rep.Records != 51 {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}

// Several replicas append calls at once, each its request and outcome in
// batches of their own, a call's outcome often committed by another
// replica than its request: the call index their writers leave is the
// one a rebuild from the records makes.
func TestReplicasWriteTheCallIndexTogether(t *testing.T) {
	postgresOnly(t)
	ctx := context.Background()
	path := testPath(t)
	var dbs []*DB
	for range 3 {
		db := openDB(t, path)
		defer db.Close()
		dbs = append(dbs, db)
	}
	const calls = 300
	done := make(chan error, calls)
	for i := range calls {
		go func() {
			q := rec(i, guard.KindRequest)
			if err := dbs[i%3].Append(q); err != nil {
				done <- err
				return
			}
			o := rec(i, guard.KindOutcome)
			o.Outcome, o.Result = "ok", fmt.Sprintf("out%d", i)
			done <- dbs[(i+1)%3].Append(o)
		}()
	}
	for range calls {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if got := queriedCalls(t, dbs[0], Filter{Outcome: "ok"}); !slices.Equal(got, firstCalls(calls)) {
		t.Fatalf("%d calls with their outcome, want %d", len(got), calls)
	}
	written := callIndexRows(t, dbs[0])
	if err := dbs[0].CallIndex().RebuildCallIndex(ctx); err != nil {
		t.Fatal(err)
	}
	if rebuilt := callIndexRows(t, dbs[0]); !slices.Equal(written, rebuilt) {
		t.Fatalf("the call index as the replicas wrote it differs from the rebuilt one")
	}
	rep, err := dbs[1].Verifier().Verify(ctx)
	if err != nil || !rep.OK {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}

// TestHelperUnindexed appends records on PostgreSQL without writing their
// call index rows, and exits without closing the database: a replica
// killed between a batch's two transactions.
func TestHelperUnindexed(t *testing.T) {
	path := os.Getenv("GUARD_STORE_UNINDEXED_DB")
	if path == "" {
		t.Skip("run as a child process only")
	}
	db, err := Open(context.Background(), Options{Path: path, Durability: "normal", KeyPath: os.Getenv("GUARD_STORE_UNINDEXED_KEY")})
	if err != nil {
		t.Fatal(err)
	}
	db.ing.noIndex.Store(true)
	for i := range 50 {
		if err := db.Append(rec(i, guard.KindRequest)); err != nil {
			t.Fatal(err)
		}
	}
	os.Exit(3) // no Close
}

// The indexer lets batches gather before it writes their rows: a call
// whose request and outcome are committed in two batches within the
// linger gets its row and words written once, with the other calls of
// the linger, in one transaction; closing writes what waits.
func TestTheIndexerWritesTheBatchesOfItsLingerAtOnce(t *testing.T) {
	postgresOnly(t)
	ctx := context.Background()
	path := testPath(t)
	db := openDB(t, path)
	db.ing.linger.Store(int64(time.Hour))
	// A query first, which writes the index itself: the call index's
	// writers' connection is open, as on a busy day, and an indexer that
	// did not linger would write each batch before the next.
	if err := db.Append(rec(9, guard.KindRequest)); err != nil {
		t.Fatal(err)
	}
	if got := queriedCalls(t, db, Filter{}); !slices.Equal(got, []string{"call-9"}) {
		t.Fatalf("calls: %v", got)
	}
	for i := range 2 {
		if err := db.Append(rec(i, guard.KindRequest)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		o := rec(i, guard.KindOutcome)
		o.Outcome, o.Result = "ok", fmt.Sprintf("done word%d", i)
		if err := db.Append(o); err != nil {
			t.Fatal(err)
		}
	}
	if n := pendingBatches(t, db); n != 4 {
		t.Fatalf("%d batches pending within the linger, want the 4 committed", n)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openDB(t, path)
	defer db.Close()
	if n := pendingBatches(t, db); n != 0 {
		t.Fatalf("%d batches pending once the writer closed", n)
	}
	for _, table := range []string{"call_index", "call_text"} {
		var txns, rows int
		if err := db.r.QueryRowContext(ctx, `SELECT count(DISTINCT xmin::text), count(*) FROM `+table).Scan(&txns, &rows); err != nil {
			t.Fatal(err)
		}
		if txns != 2 || rows != 3 {
			t.Errorf("%s: %d rows written by %d transactions, want 3 by 2 (the query's, and the linger's)", table, rows, txns)
		}
	}
	if got := queriedCalls(t, db, Filter{Text: "word1"}); !slices.Equal(got, []string{"call-1"}) {
		t.Fatalf("the words of a call whose request and outcome were written at once: %v", got)
	}
}
