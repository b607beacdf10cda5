package benchmark

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An upstream that is not an http URL is refused with an error that names it.
func TestReverseProxyRefusesABadUpstream(t *testing.T) {
	for _, up := range []string{"", "127.0.0.1:80", "://x"} {
		err := ReverseProxy(context.Background(), "127.0.0.1:0", up)
		if err == nil || !strings.Contains(err.Error(), "want an http:// URL") {
			t.Errorf("upstream %q: %v", up, err)
		}
	}
}

// A run removes what an earlier one left of its database, and nothing else.
func TestRemoveDBLeavesOtherFiles(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "bench-normal.db")
	for _, p := range []string{db, db + "-wal", db + ".checkpoint", filepath.Join(dir, "bench-normal-stream.db"), filepath.Join(dir, "audit.key")} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(db+".journal", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := removeDB(db); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*"))
	for i := range left {
		left[i] = filepath.Base(left[i])
	}
	if strings.Join(left, " ") != "audit.key bench-normal-stream.db" {
		t.Fatalf("left %v", left)
	}
}
