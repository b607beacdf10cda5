package store

import (
	"context"
	"testing"
	"time"
)

// A bucket starts full, refills at its rate up to its burst, says how
// long to wait when empty, and a lowered burst caps what it holds.
func TestTakeToken(t *testing.T) {
	db := openDB(t, testPath(t))
	defer db.Close()
	ctx := context.Background()
	at := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	take := func(key string, rate float64, burst int, now time.Time) (bool, time.Duration) {
		t.Helper()
		ok, wait, err := db.TakeToken(ctx, key, rate, burst, now)
		if err != nil {
			t.Fatal(err)
		}
		return ok, wait
	}
	for i := range 3 { // burst 3, 1 per second
		if ok, _ := take("k", 1, 3, at); !ok {
			t.Fatalf("token %d of a full bucket refused", i+1)
		}
	}
	if ok, wait := take("k", 1, 3, at); ok || wait != time.Second {
		t.Fatalf("an empty bucket: %v, wait %v (want 1s)", ok, wait)
	}
	if ok, wait := take("k", 1, 3, at.Add(500*time.Millisecond)); ok || wait != 500*time.Millisecond {
		t.Fatalf("half refilled: %v, wait %v", ok, wait)
	}
	if ok, _ := take("k", 1, 3, at.Add(time.Second)); !ok {
		t.Fatal("a second later, no token")
	}
	// An hour later the bucket holds its burst, not 3600 tokens.
	later := at.Add(time.Hour)
	for i := range 3 {
		if ok, _ := take("k", 1, 3, later); !ok {
			t.Fatalf("token %d after an hour refused", i+1)
		}
	}
	if ok, _ := take("k", 1, 3, later); ok {
		t.Fatal("more than the burst after an hour")
	}
	// The limit lowered to a burst of 1: a bucket that held 3 holds 1.
	take("j", 1, 3, at)
	if ok, _ := take("j", 1, 1, at); !ok {
		t.Fatal("the lowered bucket refused its one token")
	}
	if ok, _ := take("j", 1, 1, at); ok {
		t.Fatal("a lowered burst still gave the old bucket's tokens")
	}
}
