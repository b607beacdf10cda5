package app

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/config"
	"github.com/guard-mcp/guard/policy"
	"github.com/guard-mcp/guard/store"
)

// A server started as a script of a package is named for the package,
// unless the name its command line gave before is known already: in the
// catalog (its baseline stays where it is) or among the configured servers.
func TestAScriptsServerKeepsAKnownName(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "pkg", "dist", "index.js")
	if err := os.MkdirAll(filepath.Dir(script), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "pkg", "package.json"), `{"name":"@acme/mcp-notes"}`)
	writeFile(t, script, "")
	argv := []string{"node", script, "stdio"}
	ctx := context.Background()
	open := func(name string) *store.DB {
		db, err := store.Open(ctx, store.Options{Path: filepath.Join(dir, name), Durability: "normal"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	fresh, known := open("fresh.db"), open("known.db")
	if err := known.Catalog().RecordTools(ctx, "index.js", []guard.Tool{{Server: "index.js", Name: "add_note",
		Def: json.RawMessage(`{"name":"add_note"}`), Pin: "sha256:1"}}, time.Now(), false); err != nil {
		t.Fatal(err)
	}
	configured := config.Default()
	configured.Servers = map[string]*policy.Server{"index.js": {TrustAnnotations: true}}
	for _, tc := range []struct {
		what string
		db   *store.DB
		cfg  *config.Config
		want string
	}{
		{"a new server", fresh, config.Default(), "mcp-notes"},
		{"a server in the catalog", known, config.Default(), "index.js"},
		{"a configured server", fresh, configured, "index.js"},
	} {
		if got, err := derivedName(ctx, tc.db, tc.cfg, argv); err != nil || got != tc.want {
			t.Errorf("%s: named %q (%v), want %q", tc.what, got, err, tc.want)
		}
	}
}
