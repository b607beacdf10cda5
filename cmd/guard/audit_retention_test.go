package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/config"
	"github.com/guard-mcp/guard/store"
)

// An operator's round with retention: guard audit prune --dry-run says
// what would go and changes nothing; guard audit prune archives the
// records past audit.retention and removes their bodies; guard audit
// verify still passes, against a checkpoint kept before too; the archive,
// a proof made before and a whole export made after all check offline.
func TestAuditPrune(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "db", "guard.db")
	db, err := store.Open(context.Background(), store.Options{Path: path, Durability: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i := range 6 {
		at := now.Add(-500 * 24 * time.Hour)
		if i >= 4 {
			at = now.Add(-time.Hour)
		}
		id := fmt.Sprintf("call-%d", i)
		req := &guard.Record{CallID: id, Kind: guard.KindRequest, Time: at, Server: "files", Method: "tools/call",
			Tool: "write_file", Arguments: fmt.Sprintf(`{"path":"/tmp/secret-%d"}`, i), Decision: guard.DecisionAllowed}
		out := &guard.Record{CallID: id, Kind: guard.KindOutcome, Time: at, Outcome: guard.OutcomeOK, Result: `{"ok":true}`}
		if err := db.Append(req, out); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, filepath.Join(dir, "guard.yaml"), "audit:\n  retention: 400d\n")
	proof := writeFile(t, filepath.Join(dir, "call-1.proof"), guardIn(t, dir, path, 0, "audit", "prove", "call-1"))
	kept := writeFile(t, filepath.Join(dir, "kept.checkpoint"), guardIn(t, dir, path, 0, "audit", "checkpoint"))

	out := guardIn(t, dir, path, 0, "audit", "prune", "--config", cfg, "--dry-run")
	wantOutput(t, "dry run", out, "would archive 8 records (1 to 8, in the checkpoint of 12 records)")
	if _, err := os.Stat(filepath.Join(dir, "db", "archive")); err == nil {
		t.Fatal("a dry run made the archive directory")
	}
	out = guardIn(t, dir, path, 0, "audit", "prune", "--config", cfg)
	wantOutput(t, "prune", out, "archived 8 records (1 to 8) in "+filepath.Join(dir, "db", "archive", "audit-000000000001-000000000008-"))
	wantOutput(t, "prune", out, "removed the bodies of 8 records")
	archives, _ := filepath.Glob(filepath.Join(dir, "db", "archive", "*.jsonl"))
	if len(archives) != 1 {
		t.Fatalf("archives: %v", archives)
	}
	wantOutput(t, "the retention record", guardIn(t, dir, path, 0, "audit", "query", "--kind", "retention", "--format", "jsonl"),
		filepath.Base(archives[0]))
	wantOutput(t, "second prune", guardIn(t, dir, path, 0, "audit", "prune", "--config", cfg), "nothing to prune")

	wantOutput(t, "verify", guardIn(t, dir, path, 0, "audit", "verify", "--checkpoint", kept), "ok: 13 records (8 pruned by retention), extends checkpoint 12")
	check := guardIn(t, dir, path, 0, "audit", "check", archives[0], proof, kept)
	wantOutput(t, "check", check, "ok: 8 records (records 1 to 8), each proved in the checkpoint of 12 records")
	wantOutput(t, "check", check, "and its contents are those in "+archives[0])
	whole := writeFile(t, filepath.Join(dir, "whole.jsonl"), guardIn(t, dir, path, 0, "audit", "export"))
	wantOutput(t, "check of the whole export", guardIn(t, dir, path, 0, "audit", "check", whole), "ok: all 13 records")
	b, _ := os.ReadFile(whole)
	if strings.Contains(string(b), "secret-1") || !strings.Contains(string(b), "secret-5") || strings.Count(string(b), `"pruned":true`) != 8 {
		t.Fatalf("whole export after pruning:\n%s", b)
	}
	if a, _ := os.ReadFile(archives[0]); !strings.Contains(string(a), "secret-1") {
		t.Fatal("the archive does not hold the bodies")
	}

	// A serving process's metrics count what the job did, whoever ran it.
	mdb, err := store.Open(context.Background(), store.Options{Path: path, Durability: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	m := scrapeMetrics(t, mdb)
	mdb.Close()
	wantOutput(t, "metrics", m, "guard_audit_pruned_records_total 8\n")
	wantOutput(t, "metrics", m, "guard_audit_retention_failures_total 0\n")

	// Off unless configured.
	if r := config.Default().Audit.Retention; r != 0 {
		t.Fatalf("retention is %s by default", r)
	}
	_, stderr, code := run(t, dir, "audit", "prune", "--db", path)
	if code != exitUsage || !strings.Contains(stderr, "audit.retention is off") {
		t.Fatalf("prune without retention: exit %d, %s", code, stderr)
	}
}
