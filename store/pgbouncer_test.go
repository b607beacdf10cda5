package store

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/guard-mcp/guard/internal/pgtest"
)

// Through PgBouncer in session mode guard works as directly; in
// transaction or statement mode, which hand a client's statements to any
// server process and so break its advisory locks and LISTEN, it refuses to
// open the database, saying why.
func TestThroughPgBouncer(t *testing.T) {
	if !pgtest.Postgres() {
		t.Skip("PostgreSQL only (" + pgtest.EngineEnv + "=postgres)")
	}
	ctx := context.Background()
	c := pgtest.Start(t)
	if _, err := c.CreateDatabase("pooled"); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(t.TempDir(), "audit.key")
	for _, mode := range []string{"transaction", "statement"} {
		_, err := Open(ctx, Options{Path: c.Bouncer(t, mode, "pooled"), KeyPath: key})
		if err == nil || !strings.Contains(err.Error(), "pooler in transaction or statement mode") {
			t.Fatalf("PgBouncer in %s mode: %v, want a refusal naming the pool mode", mode, err)
		}
	}
	url := c.Bouncer(t, "session", "pooled")
	db, err := Open(ctx, Options{Path: url, KeyPath: key})
	if err != nil {
		t.Fatalf("PgBouncer in session mode: %v", err)
	}
	for i := range 5 {
		if err := db.Append(rec(i, "request")); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := OpenReadOnly(ctx, Options{Path: url, KeyPath: key})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if rep, err := ro.Verifier().Verify(ctx); err != nil || !rep.OK || rep.Records != 5 {
		t.Fatalf("verify through PgBouncer: %+v %v", rep, err)
	}
}
