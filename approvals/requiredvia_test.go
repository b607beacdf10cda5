package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
)

// A hold keeps how its deciders must be verified as the configuration in
// force says when the call is held (a reload changes it for the holds
// after): a typed name cannot decide a call held where passkeys were
// required, whatever the process that asks; the passkey's review can. A
// tool's definition accepted with a passkey releases the calls held for
// its review that need one; accepted by a typed name, it leaves them
// waiting, each refused.
func TestAHoldKeepsHowItsDecidersMustBeVerified(t *testing.T) {
	ctx := context.Background()
	var via atomic.Value
	via.Store(guard.ViaPasskey)
	m, db := newManager(t, filepath.Join(t.TempDir(), "g.db"), Options{RequiredVia: func() string { return via.Load().(string) }})
	strict := held("strict")
	if _, _, err := m.Hold(ctx, strict); err != nil {
		t.Fatal(err)
	}
	via.Store("")
	lax := held("lax")
	lax.Digest = "sha256:other"
	if _, _, err := m.Hold(ctx, lax); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"strict": guard.ViaPasskey, "lax": ""} {
		if got, err := m.Get(ctx, id); err != nil || got.RequiredVia != want {
			t.Fatalf("%s: %+v %v", id, got, err)
		}
	}
	// Another process, with a configuration of its own: a Manager
	// without RequiredVia on the same database.
	other := New(db.Holds(), Options{})
	if _, err := other.Decide(ctx, "strict", true, "alice", ""); !errors.Is(err, guard.ErrNotApprover) {
		t.Fatalf("a typed name on the strict hold: %v", err)
	}
	if _, err := other.Decide(ctx, "lax", true, "alice", ""); err != nil {
		t.Fatalf("a typed name on the lax hold: %v", err)
	}
	alice := Reviewer{Identity: guard.Identity{Subject: "alice"}, Via: guard.ViaPasskey}
	if got, err := other.Review(ctx, "strict", alice, true, "", nil); err != nil || got.State != guard.ApprovalApproved {
		t.Fatalf("the passkey's review: %+v %v", got, err)
	}

	// Calls held for the review of a tool's definition.
	v1 := guard.Tool{Server: "files", Name: "rm", Def: json.RawMessage(`{"name":"rm"}`), Pin: "sha256:v1"}
	if err := db.Catalog().RecordTools(ctx, "files", []guard.Tool{v1}, time.Now(), false); err != nil {
		t.Fatal(err)
	}
	via.Store(guard.ViaPasskey)
	for _, id := range []string{"review-1", "review-2"} {
		a := held(id)
		a.Tool, a.Rule, a.Pin, a.Digest = "rm", guard.ToolReviewRule, v1.Pin, "sha256:"+id
		if _, _, err := m.Hold(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	_, s, err := DecideDefinition(ctx, db.Catalog(), db.Holds(), other, "files", "rm", v1.Pin, true, Named("alice"), "")
	if !errors.Is(err, guard.ErrNotApprover) || s.Decided != 0 {
		t.Fatalf("accepted by a typed name: %+v %v", s, err)
	}
	_, s, err = DecideDefinition(ctx, db.Catalog(), db.Holds(), other, "files", "rm", v1.Pin, true, alice, "")
	if err != nil || s.Decided != 2 {
		t.Fatalf("accepted with a passkey: %+v %v", s, err)
	}
}
