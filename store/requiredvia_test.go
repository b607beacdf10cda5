package store

import (
	"context"
	"errors"
	"strings"
	"testing"

	guard "github.com/guard-mcp/guard"
)

// A held call that was held where decisions need a passkey keeps that,
// and the store refuses any other review, whoever asks: a typed name (the
// command line, a UI's token link) and a login through the identity
// provider are refused, recorded nowhere; the passkey's review decides.
// A call held where the UI logs in only through the provider takes that
// login and nothing else.
func TestRequiredViaIsKeptAndEnforced(t *testing.T) {
	db := openDB(t, testPath(t))
	defer db.Close()
	ctx := context.Background()
	for _, id := range []string{"passkey", "oidc"} {
		a := heldApproval(id)
		a.Digest, a.RequiredVia = "sha256:"+id, id
		if err := db.Holds().CreateApproval(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"passkey", "oidc"} {
		if got, err := db.Holds().Approval(ctx, id); err != nil || got.RequiredVia != id {
			t.Fatalf("%s: kept as %+v %v", id, got, err)
		}
		if list, err := db.Holds().ApprovalsByID(ctx, []string{id}); err != nil || len(list) != 1 || list[0].RequiredVia != id {
			t.Fatalf("%s: listed as %+v %v", id, list, err)
		}
	}

	refused := func(id string, by guard.Identity, via, want string) {
		t.Helper()
		_, err := db.Holds().ReviewApproval(ctx, id, by, via, true, "", nil)
		if !errors.Is(err, guard.ErrNotApprover) || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s reviewed by %s (via %q): %v, want a refusal saying %q", id, by.Name(), via, err, want)
		}
	}
	refused("passkey", guard.Identity{Subject: "alice"}, "",
		`this call was held where decisions need the approver's passkey (ui.passkey: required), and "alice" is a typed name, not a verified identity: decide in the UI, with your passkey`)
	if _, err := db.Holds().DecideApproval(ctx, "passkey", false, "alice", "typed"); !errors.Is(err, guard.ErrNotApprover) {
		t.Fatalf("a typed denial: %v", err)
	}
	refused("passkey", alice, guard.ViaOIDC, "alice@example.com was verified by the identity provider")
	refused("oidc", guard.Identity{Subject: "alice"}, "", `a login through the identity provider (ui.oidc with ui.token_login: false), and "alice" is a typed name`)
	refused("oidc", guard.Identity{Subject: "alice"}, guard.ViaPasskey, "alice was verified with a passkey")
	if recs := recordsOf(t, db, guard.KindDecision); len(recs) != 0 {
		t.Fatalf("refused reviews were recorded: %+v", recs)
	}

	got, err := db.Holds().ReviewApproval(ctx, "passkey", guard.Identity{Subject: "alice"}, guard.ViaPasskey, true, "", nil)
	if err != nil || got.State != guard.ApprovalApproved || got.DecidedBy != "alice" {
		t.Fatalf("the passkey's review: %+v %v", got, err)
	}
	got, err = db.Holds().ReviewApproval(ctx, "oidc", alice, guard.ViaOIDC, false, "no", nil)
	if err != nil || got.State != guard.ApprovalDenied || got.DecidedBy != "alice@example.com" {
		t.Fatalf("the provider's login: %+v %v", got, err)
	}
}
