package approvals

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
)

// A held call with approvers: a wait ends only once enough people
// approved; "allow from now on" is refused for it; typed names are not
// reviewers of it.
func TestAwaitEndsAfterTheApprovalsNeeded(t *testing.T) {
	m, _ := newManager(t, filepath.Join(t.TempDir(), "g.db"), Options{Wait: 30 * time.Second})
	ctx := context.Background()
	a := held("a")
	a.Approvers = guard.Approvers{Groups: []string{"sre"}, Count: 2}
	if _, _, err := m.Hold(ctx, a); err != nil {
		t.Fatal(err)
	}
	type result struct {
		r   guard.WaitResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := m.Await(ctx, "a", nil)
		done <- result{r, err}
	}()
	alice := Reviewer{Identity: guard.Identity{Subject: "u-alice", Email: "alice@example.com", Groups: []string{"sre"}}, Via: guard.ViaOIDC}
	bob := Reviewer{Identity: guard.Identity{Subject: "u-bob", Groups: []string{"sre"}}, Via: guard.ViaPasskey}
	if _, err := m.Review(ctx, "a", alice, true, "", func(*guard.Approval) error { return nil }); !errors.Is(err, guard.ErrNotApprover) ||
		!strings.Contains(err.Error(), "cannot be learned") {
		t.Fatalf("allow from now on: %v", err)
	}
	if _, err := m.Decide(ctx, "a", true, "alice", ""); !errors.Is(err, guard.ErrNotApprover) {
		t.Fatalf("a typed name: %v", err)
	}
	got, err := m.Review(ctx, "a", alice, true, "", nil)
	if err != nil || got.State != guard.ApprovalPending {
		t.Fatalf("first approval: %+v %v", got, err)
	}
	if w := Waiting(got); w != "1 more approval from members of sre, each a verified identity" {
		t.Fatalf("waiting: %q", w)
	}
	select {
	case r := <-done:
		t.Fatalf("the wait ended after one approval of two: %+v", r)
	default:
	}
	if got, err = m.Review(ctx, "a", bob, true, "", nil); err != nil || got.State != guard.ApprovalApproved || got.DecidedBy != "u-bob" {
		t.Fatalf("second approval: %+v %v", got, err)
	}
	r := <-done
	if r.err != nil || r.r.End != guard.WaitApproved {
		t.Fatalf("the wait: %+v %v", r.r, r.err)
	}
	if Waiting(got) != "" {
		t.Fatal("an approved call still waits for approvals")
	}
}

// An identical call of another authenticated caller is not folded into a
// pending approval: it gets one of its own.
func TestHoldKeepsCallersApart(t *testing.T) {
	m, _ := newManager(t, filepath.Join(t.TempDir(), "g.db"), Options{})
	ctx := context.Background()
	first := held("a1")
	first.Caller = guard.Identity{Subject: "u-1"}
	if _, _, err := m.Hold(ctx, first); err != nil {
		t.Fatal(err)
	}
	again := held("a2")
	again.Caller = guard.Identity{Subject: "u-1"}
	if p, reused, err := m.Hold(ctx, again); err != nil || !reused || p.ID != "a1" {
		t.Fatalf("the same caller's retry: %+v %v %v", p, reused, err)
	}
	other := held("a3")
	other.Caller = guard.Identity{Subject: "u-2"}
	if p, reused, err := m.Hold(ctx, other); err != nil || reused || p.ID != "a3" {
		t.Fatalf("another caller's identical call: %+v %v %v", p, reused, err)
	}
}
