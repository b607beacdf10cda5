package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/guard-mcp/guard/store"
)

var appliedRE = regexp.MustCompile(`Applied (sha256:[0-9a-f]+) \(by ([^)]+)\)`)

// guard policy reload decides through store.ApplyConfig, as the UI does:
// a change no guard noted is applied as it is, a superseded one whose
// files are back is applied, a dismissed one stays dismissed.
func TestPolicyReloadDecidesAsTheUIDoes(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "guard.yaml")
	if err := os.WriteFile(cfg, []byte("policy:\n  default: allow\n  rules: [{name: no-echo, tool: echo, action: deny}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	open := func(name string) (*store.DB, string) {
		t.Helper()
		path := filepath.Join(dir, name)
		db, err := store.Open(context.Background(), store.Options{Path: path, Durability: "normal"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db, path
	}
	ctx := context.Background()

	// Never noted: applied as it is.
	db1, path1 := open("1.db")
	stdout, stderr, code := run(t, dir, "policy", "reload", "--config", cfg, "--db", path1, "--by", "erin")
	m := appliedRE.FindStringSubmatch(stdout)
	if code != 0 || m == nil || m[2] != "erin" || !strings.Contains(stdout, "No running guard has noted") {
		t.Fatalf("reload (%d): %s %s", code, stdout, stderr)
	}
	digest := m[1]
	if c, _ := db1.Configs().ConfigChangeByDigest(ctx, digest); c == nil || c.State != store.ConfigApplied || c.DecidedBy != "erin" {
		t.Fatalf("after reload: %+v", c)
	}
	if stdout, _, code := run(t, dir, "policy", "reload", "--config", cfg, "--db", path1); code != 0 || !strings.Contains(stdout, "Already applied by erin") {
		t.Errorf("reload twice (%d): %s", code, stdout)
	}

	// Dismissed (in the UI): the first decision wins.
	db2, path2 := open("2.db")
	if err := db2.Configs().NoteConfigChange(ctx, digest, `rule "no-echo" added`); err != nil {
		t.Fatal(err)
	}
	if _, err := db2.Configs().DismissConfig(ctx, digest, "bob"); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = run(t, dir, "policy", "reload", "--config", cfg, "--db", path2, "--by", "erin")
	if code != 1 || !strings.Contains(stderr, "dismissed by bob") || strings.Contains(stdout, "Applied") {
		t.Fatalf("reload of a dismissed change (%d): %s %s", code, stdout, stderr)
	}
	if ok, _ := db2.Configs().ConfigApplied(ctx, digest); ok {
		t.Fatal("a dismissed change was applied")
	}

	// Superseded by an edit since undone: the files on disk are applied.
	db3, path3 := open("3.db")
	if err := db3.Configs().NoteConfigChange(ctx, digest, `rule "no-echo" added`); err != nil {
		t.Fatal(err)
	}
	if err := db3.Configs().NoteConfigChange(ctx, "sha256:other", "an edit since undone"); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = run(t, dir, "policy", "reload", "--config", cfg, "--db", path3, "--by", "erin")
	if code != 0 || !strings.Contains(stdout, `rule "no-echo" added`) || !strings.Contains(stdout, "Applied "+digest) {
		t.Fatalf("reload of a superseded change (%d): %s %s", code, stdout, stderr)
	}
	if ok, _ := db3.Configs().ConfigApplied(ctx, digest); !ok {
		t.Fatal("not applied")
	}
	if c, _ := db3.Configs().PendingConfigChange(ctx); c != nil {
		t.Errorf("still pending: %+v", c)
	}
}

// guard policy check says where tools/list shows more than by default,
// and says nothing of the listing otherwise.
func TestPolicyCheckNamesWiderListings(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ conf, want string }{
		{"policy: {default: allow}\n", ""},
		{"servers:\n  db: {review: {listing: as_served}}\n  files: {}\n",
			"the listing of db as it is (review.listing: as_served), definitions no one accepted"},
		{"review: {listing: as_served}\nservers:\n  files: {review: {listing: accepted}}\n",
			"every server's listing as it is (review.listing: as_served), definitions no one accepted and new tools waiting for review included, but for files (accepted)"},
		{"policy: {hide_denied: false}\n", "every tool, those the rules deny to the caller included (policy.hide_denied: false)"},
	} {
		cfg := filepath.Join(dir, "guard.yaml")
		if err := os.WriteFile(cfg, []byte(tc.conf), 0o600); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := run(t, dir, "policy", "check", "--config", cfg)
		if code != 0 {
			t.Fatalf("%q: %d %s", tc.conf, code, errOut)
		}
		if tc.want == "" && strings.Contains(out, "tools/list through guard") || !strings.Contains(out, tc.want) {
			t.Errorf("%q: want %q in\n%s", tc.conf, tc.want, out)
		}
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("servers:\n  db:\n    review: {listing: latest}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := run(t, dir, "policy", "check", "--config", bad); code != exitUsage ||
		!strings.Contains(errOut, bad+`:3: "latest" is not one of accepted, as_served`) {
		t.Fatalf("a bad review.listing: %d %s", code, errOut)
	}
}
