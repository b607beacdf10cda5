package store

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
)

// clock is a time that tests move.
type clock struct{ ns atomic.Int64 }

func (c *clock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }
func newClock() *clock               { c := &clock{}; c.ns.Store(time.Now().UnixNano()); return c }
func openAt(t *testing.T, path string, c *clock) *DB {
	t.Helper()
	db, err := Open(context.Background(), Options{Path: path, Durability: "normal", Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestLeaseOneHolderAtATime(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "l.db")
	c := newClock()
	a, b := openAt(t, path, c), openAt(t, path, c)
	const ttl = 10 * time.Second
	take := func(db *DB, holder string) bool {
		t.Helper()
		ok, err := db.Streams().Lease(ctx, "stream", holder, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !take(a, "A") {
		t.Fatal("A could not take a free lease")
	}
	if take(b, "B") {
		t.Fatal("B took the lease A holds")
	}
	c.add(ttl / 2)
	if !take(a, "A") {
		t.Fatal("A could not renew its lease")
	}
	c.add(ttl * 3 / 4) // past the first expiry, not the renewed one
	if take(b, "B") {
		t.Fatal("B took the lease A renewed")
	}
	if h, _ := b.Streams().LeaseHolder(ctx, "stream"); h != "A" {
		t.Fatalf("holder %q, want A", h)
	}
	// Another lease by another name is another matter.
	if ok, err := b.Streams().Lease(ctx, "checkpoint", "B", ttl); err != nil || !ok {
		t.Fatalf("B could not take the checkpoint lease: %v", err)
	}
	// A stops renewing: B takes over once it expired, and A has lost it.
	c.add(ttl)
	if !take(b, "B") {
		t.Fatal("B did not take the expired lease")
	}
	if take(a, "A") {
		t.Fatal("A took back the lease B holds")
	}
	// B releases it: A takes it at once.
	if err := b.Streams().ReleaseLease(ctx, "stream", "B"); err != nil {
		t.Fatal(err)
	}
	if !take(a, "A") {
		t.Fatal("A did not take the released lease")
	}
	// Releasing what one does not hold changes nothing.
	if err := b.Streams().ReleaseLease(ctx, "stream", "B"); err != nil {
		t.Fatal(err)
	}
	if h, _ := a.Streams().LeaseHolder(ctx, "stream"); h != "A" {
		t.Fatalf("holder %q, want A", h)
	}
}

func TestStreamCursorOnlyForTheHolderAndForward(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "c.db")
	c := newClock()
	a, b := openAt(t, path, c), openAt(t, path, c)
	if _, err := a.Streams().Lease(ctx, "stream", "A", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := a.Streams().SetStreamCursor(ctx, "stream", "A", "syslog tcp://x:1", 7); err != nil {
		t.Fatal(err)
	}
	if err := b.Streams().SetStreamCursor(ctx, "stream", "B", "syslog tcp://x:1", 9); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a process without the lease moved the cursor: %v", err)
	}
	if err := a.Streams().SetStreamCursor(ctx, "stream", "A", "syslog tcp://x:1", 3); err != nil {
		t.Fatal(err)
	}
	if n, err := b.Streams().StreamCursor(ctx, "syslog tcp://x:1"); err != nil || n != 7 {
		t.Fatalf("cursor %d (%v), want 7: it moved back or to the other process's", n, err)
	}
	if n, _ := b.Streams().StreamCursor(ctx, "otlp http://y:2"); n != 0 {
		t.Fatalf("a receiver never streamed to has cursor %d", n)
	}
}

func TestRecordsAfterAndLag(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "r.db")
	c := newClock()
	db := openAt(t, path, c)
	for i := range 5 {
		if err := db.Append(rec(i, guard.KindRequest)); err != nil {
			t.Fatal(err)
		}
	}
	// Records waits for the ingester; RecordsAfter reads what is there.
	if err := db.Reader().Records(ctx, func(*guard.Record) error { return nil }); err != nil {
		t.Fatal(err)
	}
	recs, err := db.Streams().RecordsAfter(ctx, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Seq != 3 || recs[1].Seq != 4 || recs[0].CallID != "call-2" {
		t.Fatalf("records after 2: %+v", recs)
	}
	if _, err := db.Streams().Lease(ctx, "stream", "A", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := db.Streams().SetStreamCursor(ctx, "stream", "A", "r", 2); err != nil {
		t.Fatal(err)
	}
	n, oldest, err := db.Streams().StreamLag(ctx, "r")
	if err != nil || n != 3 || !oldest.Equal(recs[0].Time) {
		t.Fatalf("lag %d records, oldest %v (%v): want 3, %v", n, oldest, err, recs[0].Time)
	}
	if n, oldest, _ := db.Streams().StreamLag(ctx, "never"); n != 5 || oldest.IsZero() {
		t.Fatalf("lag of a new receiver: %d, %v", n, oldest)
	}
}

// TestWithLeaseTakeover runs two handles on one file, as two processes
// would: the second runs once the first has released the lease, and
// once a holder that stopped renewing it (a crashed process) let it
// expire.
func TestWithLeaseTakeover(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.db")
	a := openDB(t, path)
	defer a.Close()
	b := openDB(t, path)
	defer b.Close()
	const ttl = 300 * time.Millisecond
	ctxA, stopA := context.WithCancel(context.Background())
	ctxB, stopB := context.WithCancel(context.Background())
	running := make(chan string, 4)
	run := func(name string) func(context.Context) {
		return func(ctx context.Context) {
			running <- name
			<-ctx.Done()
			running <- name + " stopped"
		}
	}
	doneA := make(chan struct{})
	go func() { a.Streams().WithLease(ctxA, "stream", "A", ttl, run("A")); close(doneA) }()
	if got := <-running; got != "A" {
		t.Fatalf("first to run: %s", got)
	}
	doneB := make(chan struct{})
	go func() { b.Streams().WithLease(ctxB, "stream", "B", ttl, run("B")); close(doneB) }()
	if h, _ := b.Streams().LeaseHolder(context.Background(), "stream"); h != "A" {
		t.Fatalf("holder %q while A runs", h)
	}
	stopA()
	if got := <-running; got != "A stopped" {
		t.Fatalf("got %s, want A stopped", got)
	}
	<-doneA
	if got := <-running; got != "B" {
		t.Fatalf("got %s, want B to take over", got)
	}
	stopB()
	if got := <-running; got != "B stopped" {
		t.Fatalf("got %s, want B stopped", got)
	}
	<-doneB
	if h, _ := a.Streams().LeaseHolder(context.Background(), "stream"); h != "" {
		t.Fatalf("holder %q after both stopped", h)
	}

	// A crashed holder: C takes the lease and never renews nor releases it.
	if ok, err := a.Streams().Lease(context.Background(), "stream", "C", ttl); !ok || err != nil {
		t.Fatalf("C could not take the free lease: %v", err)
	}
	ctxB, stopB = context.WithCancel(context.Background())
	defer stopB()
	go b.Streams().WithLease(ctxB, "stream", "B", ttl, run("B"))
	if got := <-running; got != "B" {
		t.Fatalf("got %s, want B to take over", got)
	}
	if h, _ := a.Streams().LeaseHolder(context.Background(), "stream"); h != "B" {
		t.Fatalf("holder %q, want B", h)
	}
}
