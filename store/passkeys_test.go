package store

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
)

// An enrolment code lets one passkey in, for its user, until it expires;
// passkeys keep what the UI last wrote of them.
func TestPasskeyEnrolmentCodes(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	db, err := testOpen(ctx, Options{Path: testPath(t), Durability: "normal", Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Passkeys().AddPasskeyEnrolment(ctx, "code-1", "alice", c.now().Add(5*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if u, err := db.Passkeys().PasskeyEnrolment(ctx, "code-1"); err != nil || u != "alice" {
		t.Fatalf("the code: %q %v", u, err)
	}
	if _, err := db.Passkeys().PasskeyEnrolment(ctx, "code-2"); !errors.Is(err, guard.ErrNotFound) {
		t.Fatalf("an unknown code: %v", err)
	}
	if err := db.Passkeys().AddPasskey(ctx, "code-1", Passkey{ID: "k0", User: "mallory", Credential: []byte(`{}`)}); err == nil {
		t.Fatal("a code enrolled a passkey for another user")
	}
	// A code tried for another user is used up: another is needed.
	if _, err := db.Passkeys().PasskeyEnrolment(ctx, "code-1"); !errors.Is(err, guard.ErrNotFound) {
		t.Fatalf("a code tried for another user: %v", err)
	}
	if err := db.Passkeys().AddPasskeyEnrolment(ctx, "code-1", "alice", c.now().Add(5*time.Minute)); err != nil {
		t.Fatal(err)
	}
	// Two enrolments with one code: one passkey, one record.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() {
			errs[i] = db.Passkeys().AddPasskey(ctx, "code-1", Passkey{ID: []string{"k1", "k2"}[i], User: "alice", Credential: []byte(`{"n":1}`)})
		})
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Fatalf("one code, two enrolments: %v", errs)
	}
	// An expired code is refused.
	if err := db.Passkeys().AddPasskeyEnrolment(ctx, "code-3", "alice", c.now().Add(5*time.Minute)); err != nil {
		t.Fatal(err)
	}
	c.add(5 * time.Minute)
	if _, err := db.Passkeys().PasskeyEnrolment(ctx, "code-3"); !errors.Is(err, guard.ErrNotFound) {
		t.Fatalf("an expired code: %v", err)
	}
	if err := db.Passkeys().AddPasskey(ctx, "code-3", Passkey{ID: "k3", User: "alice", Credential: []byte(`{}`)}); !errors.Is(err, guard.ErrNotFound) {
		t.Fatalf("an expired code enrolled: %v", err)
	}
	// A person who used a passkey adds another without a code.
	if err := db.Passkeys().AddPasskey(ctx, "", Passkey{ID: "k4", User: "alice", Credential: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := db.Passkeys().UsePasskey(ctx, "k4", []byte(`{"n":2}`)); err != nil {
		t.Fatal(err)
	}
	if err := db.Passkeys().UsePasskey(ctx, "nosuch", []byte(`{}`)); !errors.Is(err, guard.ErrNotFound) {
		t.Fatalf("an unknown passkey used: %v", err)
	}
	// Each passkey stored is in the audit log, whom it is for first.
	var enrolled []string
	_ = db.Reader().Records(ctx, func(r *guard.Record) error {
		if r.Kind == guard.KindEvent && r.Method == MethodPasskeyEnrolled {
			enrolled = append(enrolled, r.DecidedBy+" "+r.Detail)
		}
		return nil
	})
	if len(enrolled) != 2 || !strings.Contains(enrolled[0], `"with_code":true`) ||
		!strings.Contains(enrolled[1], `"credential":"k4"`) || !strings.Contains(enrolled[1], `"with_code":false`) || !strings.HasPrefix(enrolled[1], "alice ") {
		t.Fatalf("enrolment records: %q", enrolled)
	}
	keys, err := db.Passkeys().Passkeys(ctx)
	if err != nil || len(keys) != 2 || keys[1].ID != "k4" || string(keys[1].Credential) != `{"n":2}` || keys[1].LastUsed.IsZero() || keys[0].User != "alice" {
		t.Fatalf("passkeys: %+v %v", keys, err)
	}
}
