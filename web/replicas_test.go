package web_test

import (
	"context"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/internal/pgtest"
	"github.com/guard-mcp/guard/web"
)

// TestMain stops the PostgreSQL cluster the tests started, if any.
func TestMain(m *testing.M) { pgtest.Main(m) }

// Two replicas of guard serve on one PostgreSQL database, each with its
// own UI. Replica B's UI reads the store once an hour here, so only the
// store's notifications can tell it of a change: a hold taken on replica
// A, its decision, a configuration change and a tool review made there
// reach B's open page at once.
func TestAnotherReplicasChangesShowLive(t *testing.T) {
	url := pgtest.Database(t)
	a := newEnvAt(t, url)
	b := newEnvAt(t, url, func(o *web.Options) { o.PollEvery = time.Hour })
	c, _, err := b.login("alice").dialWS("http://" + b.host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const bound = 10 * time.Second // a failure bound, not a pause
	// A page that opens its WebSocket hears of everything once.
	for _, w := range []string{"pending", "activity", "tools", "config"} {
		if !readChanged(t, c, w, bound) {
			t.Fatalf("no first %q", w)
		}
	}
	step := func(what, want string, do func()) {
		t.Helper()
		start := time.Now()
		do()
		if !readChanged(t, c, want, bound) {
			t.Fatalf("%s on replica A: replica B's page was not told", what)
		}
		t.Logf("%s on replica A: replica B's page told after %v", what, time.Since(start))
	}
	var held *guard.Approval
	step("a hold", "pending", func() { held = a.hold("files", "delete_file", `{"path":"/srv/x"}`) })
	step("a decision", "pending", func() {
		if _, err := a.m.Decide(context.Background(), held.ID, false, "bob", "not now"); err != nil {
			t.Fatal(err)
		}
	})
	step("a configuration change", "config", func() { a.note(digestA, `rule "no-echo" added`) })
	ctx := context.Background()
	v1 := tool("files", "write_file", `{"name":"write_file"}`)
	v2 := tool("files", "write_file", `{"name":"write_file","description":"changed"}`)
	step("a server's first listing", "tools", func() {
		if err := a.db.Catalog().RecordTools(ctx, "files", []guard.Tool{v1}, time.Now(), false); err != nil {
			t.Fatal(err)
		}
	})
	step("a changed definition", "tools", func() {
		if err := a.db.Catalog().RecordTools(ctx, "files", []guard.Tool{v2}, time.Now(), false); err != nil {
			t.Fatal(err)
		}
	})
	step("a review", "tools", func() {
		if _, err := a.db.Catalog().DecideTool(ctx, "files", "write_file", v2.Pin, true, "bob"); err != nil {
			t.Fatal(err)
		}
	})
}
