package store

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
)

// A verification on schedule passes on an intact log and catches one
// rewritten by someone with the file (the triggers dropped first); the
// failure is kept, counted and logged at error level, naming the problem,
// and a process does not verify again within the period.
func TestAScheduledVerificationCatchesATamperedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.db")
	var logs syncLog
	db, err := Open(context.Background(), Options{Path: path, Durability: "normal",
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	for i := range 5 {
		if err := db.Append(rec(i, guard.KindRequest)); err != nil {
			t.Fatal(err)
		}
	}
	db.ing.caughtUp(ctx)
	if err := db.ckpt.writeCheckpoint(); err != nil {
		t.Fatal(err)
	}
	if v, err := db.Verifier().LastVerification(ctx); v != nil || err != nil {
		t.Fatalf("a verification before any: %+v %v", v, err)
	}
	v, err := db.Verifier().VerifyIfDue(ctx, time.Hour)
	if err != nil || v == nil || !v.OK || v.Records != 5 {
		t.Fatalf("first verification: %+v %v", v, err)
	}
	if v, err := db.Verifier().VerifyIfDue(ctx, time.Hour); v != nil || err != nil {
		t.Fatalf("verified again within the period: %+v %v", v, err)
	}

	raw := rawDB(t, path) // drops the triggers, as an attacker would
	if _, err := raw.Exec(`UPDATE records SET arguments = '{"path":"/tmp/elsewhere"}' WHERE seq = 3`); err != nil {
		t.Fatal(err)
	}
	v, err = db.Verifier().VerifyIfDue(ctx, 0)
	if err != nil || v == nil || v.OK || !strings.Contains(v.Problem, "3") {
		t.Fatalf("verification of the tampered file: %+v %v", v, err)
	}
	last, err := db.Verifier().LastVerification(ctx)
	if err != nil || last == nil || last.OK || last.Problem != v.Problem {
		t.Fatalf("last verification: %+v %v", last, err)
	}
	if n, err := db.Verifier().VerificationFailures(ctx); n != 1 || err != nil {
		t.Fatalf("failures: %d %v", n, err)
	}
	if !strings.Contains(logs.String(), "level=ERROR msg=\"audit log verification failed\"") || !strings.Contains(logs.String(), v.Problem) {
		t.Fatalf("the failure was not logged at error level with its problem:\n%s", logs.String())
	}
}

// Processes sharing a database do not verify at once: one that finds
// another verifying skips the round, and the other's result counts for
// all of them.
func TestAProcessVerifyingMakesTheOthersSkip(t *testing.T) {
	ctx := context.Background()
	p := testPath(t)
	db, err := testOpen(ctx, Options{Path: p})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	other, err := testOpen(ctx, Options{Path: p}) // another process on the database
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	unlock, ok, err := other.tryLock(ctx, verifyLock) // verifying
	if err != nil || !ok {
		t.Fatalf("lock: %v %v", ok, err)
	}
	if v, err := db.Verifier().VerifyIfDue(ctx, time.Hour); v != nil || err != nil {
		t.Fatalf("verified while another process does: %+v %v", v, err)
	}
	unlock()
	if v, err := db.Verifier().VerifyIfDue(ctx, time.Hour); v == nil || err != nil {
		t.Fatalf("no verification once the other is done: %+v %v", v, err)
	}
}

// RunVerifier verifies a period after it starts when there was no
// verification, and hands each result on.
func TestRunVerifierVerifiesAPeriodAfterTheStart(t *testing.T) {
	db := openDB(t, testPath(t))
	defer db.Close()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan Verification, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		db.Verifier().RunVerifier(ctx, 20*time.Millisecond, func(v Verification) { got <- v })
	}()
	v := <-got
	cancel()
	<-done
	if !v.OK {
		t.Fatalf("%+v", v)
	}
}

// syncLog is a log sink safe for concurrent writes.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncLog) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A verification dated in the future, as whoever can write the file could
// make one, does not put the next round off.
func TestAVerificationDatedInTheFutureIsNoReasonToSkip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.db")
	db := openDB(t, path)
	defer db.Close()
	ctx := context.Background()
	if v, err := db.Verifier().VerifyIfDue(ctx, time.Hour); v == nil || err != nil {
		t.Fatalf("first verification: %+v %v", v, err)
	}
	if v, err := db.Verifier().VerifyIfDue(ctx, time.Hour); v != nil || err != nil {
		t.Fatalf("verified again within the period: %+v %v", v, err)
	}
	raw := rawDB(t, path)
	defer raw.Close()
	if _, err := raw.Exec(`INSERT INTO audit_verifications (time, ok, records, problem, took_ms) VALUES ('2099-01-01T00:00:00.000Z', 1, 0, '', 0)`); err != nil {
		t.Fatal(err)
	}
	if v, err := db.Verifier().VerifyIfDue(ctx, time.Hour); v == nil || err != nil {
		t.Fatalf("a verification dated 2099 put the next one off: %+v %v", v, err)
	}
}

// A database opened read-only (guard audit verify on any replica) checks
// the whole log: its records, tree and checkpoints, read as of one
// moment, on each engine.
func TestAReadOnlyOpenVerifiesTheLog(t *testing.T) {
	ctx := context.Background()
	p := testPath(t)
	db, err := testOpen(ctx, Options{Path: p})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := db.Append(rec(i, "request")); err != nil {
			t.Fatal(err)
		}
	}
	key := db.opts.KeyPath
	if err := db.Close(); err != nil { // signs the checkpoint of all five
		t.Fatal(err)
	}
	ro, err := OpenReadOnly(ctx, Options{Path: p, KeyPath: key})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	rep, err := ro.Verifier().Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.Records != 5 {
		t.Fatalf("verify of a read-only open: %+v, want ok with 5 records", rep)
	}
}
