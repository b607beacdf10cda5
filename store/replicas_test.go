package store

import (
	"context"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
)

// A round is taken once, by any process on the database, until it
// expires; a round kept again under its key replaces the first.
func TestRoundsAreTakenOnce(t *testing.T) {
	ctx := context.Background()
	p := testPath(t)
	now := time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	a, err := testOpen(ctx, Options{Path: p, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := testOpen(ctx, Options{Path: p, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r := guard.Round{CallID: "c1", Tool: "t", ArgsDigest: "sha256:x", Pin: "sha256:p", Decision: guard.DecisionAllowed, DecidedBy: "carol", Reason: "approved"}
	if err := a.Replicas().NoteRound(ctx, "k", r, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	got, err := b.Replicas().TakeRound(ctx, "k")
	if err != nil || got == nil || *got != r {
		t.Fatalf("the round taken by another process: %+v %v, want %+v", got, err, r)
	}
	if again, err := a.Replicas().TakeRound(ctx, "k"); err != nil || again != nil {
		t.Fatalf("a round taken twice: %+v %v", again, err)
	}
	r2 := r
	r2.CallID = "c2"
	if err := a.Replicas().NoteRound(ctx, "k", r, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := a.Replicas().NoteRound(ctx, "k", r2, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Replicas().TakeRound(ctx, "k"); err != nil || got == nil || got.CallID != "c2" {
		t.Fatalf("a round kept again: %+v %v, want call c2", got, err)
	}
	if err := a.Replicas().NoteRound(ctx, "old", r, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Minute)
	if got, err := b.Replicas().TakeRound(ctx, "old"); err != nil || got != nil {
		t.Fatalf("an expired round taken: %+v %v", got, err)
	}
}
