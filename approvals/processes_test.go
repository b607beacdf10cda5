package approvals

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
)

// The holds of a guard process that was killed: one scoped to its
// session can never be used, so a review of it is refused, saying why,
// and the sweep withdraws the others, each recorded with the process's
// name; one scoped to any session stays open for another session's call
// (and says its client went), as does a 2026-07-28 hold, which belongs
// to its client, and one held before guard kept the process. Nothing is
// withdrawn while the process beats.
func TestTheHoldsOfAGoneProcess(t *testing.T) {
	ctx := context.Background()
	killed, db := newManager(t, filepath.Join(t.TempDir(), "g.db"), Options{Process: "killed"})
	killedAny := New(db.Holds(), Options{Process: "killed", Scope: guard.ScopeAny})
	alive := New(db.Holds(), Options{Process: "alive"})
	unnamed := New(db.Holds(), Options{})
	for _, h := range []struct {
		m           *Manager
		id, session string
	}{
		{killed, "session", "s1"}, {killed, "reviewed", "s2"}, {killedAny, "any", "s1"},
		{killed, "client", "client:8f1c"}, {alive, "alive", "s3"}, {unnamed, "unnamed", "s4"},
	} {
		a := held(h.id)
		a.Session, a.Digest = h.session, "sha256:"+h.id
		if _, _, err := h.m.Hold(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	if a, _ := db.Holds().Approval(ctx, "session"); a.Process != "killed" {
		t.Fatalf("the hold's process: %q, want killed", a.Process)
	}
	beat := func(id string, at time.Time) {
		t.Helper()
		r := store.Replica{ID: id, Host: "laptop", PID: 4242, Process: "guard run", Started: at, Seen: at, Lapse: time.Second}
		if err := db.Replicas().Heartbeat(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC)
	beat("killed", t0)
	beat("alive", t0)
	if n, err := alive.SettleGone(ctx); n != 0 || err != nil {
		t.Fatalf("settled while every process beats: %d %v", n, err)
	}
	beat("alive", t0.Add(500*time.Millisecond))
	beat("alive", t0.Add(time.Second)) // killed missed its lapse meanwhile

	a, err := alive.Decide(ctx, "reviewed", true, "alice", "")
	if !errors.Is(err, guard.ErrAlreadyDecided) || !strings.Contains(err.Error(), "the call's guard process is gone") ||
		!strings.Contains(err.Error(), "guard run (pid 4242 on laptop)") {
		t.Fatalf("approving a hold of a gone process: %v", err)
	}
	if a == nil || a.State != guard.ApprovalWithdrawn || !strings.HasPrefix(a.Reason, ProcessGoneReason+": guard run (pid 4242") {
		t.Fatalf("the hold after the review: %+v", a)
	}
	if _, err := alive.Decide(ctx, "reviewed", false, "bob", "no"); !errors.Is(err, guard.ErrAlreadyDecided) ||
		!strings.Contains(err.Error(), "withdrawn at ") || !strings.Contains(err.Error(), ProcessGoneReason) {
		t.Fatalf("a review after the withdrawal: %v", err)
	}

	if n, err := alive.SettleGone(ctx); n != 1 || err != nil {
		t.Fatalf("settled: %d %v, want the one session-scoped hold withdrawn", n, err)
	}
	want := map[string]string{"session": guard.ApprovalWithdrawn, "reviewed": guard.ApprovalWithdrawn, "any": guard.ApprovalPending,
		"client": guard.ApprovalPending, "alive": guard.ApprovalPending, "unnamed": guard.ApprovalPending}
	for id, state := range want {
		a, err := db.Holds().Approval(ctx, id)
		if err != nil || a.State != state {
			t.Fatalf("%s: %+v %v, want %s", id, a, err, state)
		}
		if gone := !a.SessionEnded.IsZero(); gone != (id == "any") {
			t.Errorf("%s: its client marked gone: %v", id, gone)
		}
	}
	var withdrawals []*guard.Record
	err = db.Reader().Records(ctx, func(r *guard.Record) error {
		if r.Kind == guard.KindDecision && r.Decision == guard.ApprovalWithdrawn {
			withdrawals = append(withdrawals, r)
		}
		return nil
	})
	if err != nil || len(withdrawals) != 2 {
		t.Fatalf("withdrawal records: %d %v, want 2", len(withdrawals), err)
	}
	for _, r := range withdrawals {
		if r.DecidedBy != store.ByGuard || !strings.HasPrefix(r.Reason, ProcessGoneReason+": guard run (pid 4242 on laptop)") {
			t.Errorf("the withdrawal of %s: by %q, %q", r.Approval, r.DecidedBy, r.Reason)
		}
	}
	// Another session's call may still use the hold scoped to any.
	if a, err := alive.Decide(ctx, "any", true, "alice", ""); err != nil || a.State != guard.ApprovalApproved {
		t.Fatalf("approving the hold scoped to any session: %+v %v", a, err)
	}
}
