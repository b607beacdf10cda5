// Package storetest gives tests the waits on what a store holds that the
// relay's tests share: the one pending approval, its settling, the reason
// it was withdrawn, an audit record. It imports nothing of the relay, so
// that package proxy's own tests can use it too.
package storetest

import (
	"context"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
)

// PendingIn waits for the one pending approval of a database.
func PendingIn(t testing.TB, db *store.DB) *guard.Approval {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		list, err := db.Holds().Approvals(context.Background(), guard.ApprovalPending)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 1 {
			return list[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d pending approvals, want 1", len(list))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// SettledWithin waits, at most d (well below the hold's approval.wait, so
// that only the client's going settles it), until an approval is no longer
// pending or, with scope any, is marked as its client gone.
func SettledWithin(t testing.TB, db *store.DB, id string, d time.Duration) *guard.Approval {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		a, err := db.Holds().Approval(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if a.State != guard.ApprovalPending || !a.SessionEnded.IsZero() {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("approval %s still pending, its client not marked gone, after %v", id, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// WithdrawalReason is the reason of the decision record that withdrew an
// approval ("" when there is none).
func WithdrawalReason(t testing.TB, db *store.DB, id string) string {
	t.Helper()
	reason := ""
	if err := db.Reader().Records(context.Background(), func(r *guard.Record) error {
		if r.Kind == guard.KindDecision && r.Approval == id && r.Decision == guard.ApprovalWithdrawn {
			reason = r.Reason
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return reason
}

// WaitRecord waits until a record that match accepts is in db.
func WaitRecord(t testing.TB, db interface {
	Records(context.Context, func(*guard.Record) error) error
}, match func(*guard.Record) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		found := false
		if err := db.Records(context.Background(), func(r *guard.Record) error {
			found = found || match(r)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if found {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no such record within 10s")
}
