package main

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
)

// forgeDecision does, on the SQLite file at path, what was found to work
// on the release before with write access to the database and guard's
// public code but not the key: it appends a decision approving the held
// call callID "by alice@example.com" after the last record, its chain
// hash computed with store.HashRecord, and points the call index at it.
func forgeDecision(t *testing.T, path, callID string) *guard.Record {
	t.Helper()
	raw, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	r := &guard.Record{ID: guard.NewID(), CallID: callID, Kind: guard.KindDecision, Time: time.Now().UTC().Truncate(time.Millisecond),
		Server: "files", Tool: "write_file", Decision: guard.ApprovalApproved, DecidedBy: "alice@example.com", Approval: callID}
	if err := raw.QueryRow(`SELECT seq, hash FROM records ORDER BY seq DESC LIMIT 1`).Scan(&r.Seq, &r.PrevHash); err != nil {
		t.Fatal(err)
	}
	r.Seq++
	r.Hash = store.HashRecord(r)
	if _, err := raw.Exec(`INSERT INTO records (seq, id, call_id, kind, time, server, tool, decision, decided_by, approval, prev_hash, hash)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, r.Seq, r.ID, r.CallID, r.Kind, r.Time.Format("2006-01-02T15:04:05.000Z07:00"),
		r.Server, r.Tool, r.Decision, r.DecidedBy, r.Approval, r.PrevHash, r.Hash); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`UPDATE call_index SET dec_seq = ?, decision = ?, decided_by = ?, approval = ? WHERE call_id = ?`,
		r.Seq, r.Decision, r.DecidedBy, r.Approval, callID); err != nil {
		t.Fatal(err)
	}
	return r
}

// The forgery found on the release before, at the command line, with the
// checkpoint key where the database's writer cannot reach it
// (audit.key_file elsewhere): guard's next open builds no tree over the
// forged record and signs no checkpoint over it, and counts it
// (guard_audit_integrity_alerts); verify names it and exits 1; an auditor
// holding the verifier key alone is told that the tail after the last
// checkpoint is unauthenticated, by verify and by the check of an export,
// which exit 0.
func TestAForgedRecordAfterTheCheckpointAtTheCommandLine(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "db", "guard.db")
	cfg := writeFile(t, filepath.Join(dir, "guard.yaml"), "audit:\n  key_file: keys/audit.key\n")
	o := store.Options{Path: path, KeyPath: filepath.Join(dir, "keys", "audit.key"), Durability: "normal"}
	db, err := store.Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Append(&guard.Record{CallID: "held-1", Kind: guard.KindRequest, Server: "files", Method: "tools/call",
		Tool: "write_file", Arguments: `{"path":"/etc/passwd"}`, Decision: guard.DecisionHeld, DecidedBy: "default"}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	key := strings.TrimSpace(guardIn(t, dir, path, 0, "audit", "key", "--config", cfg))
	forged := forgeDecision(t, path, "held-1")

	// guard goes on: its next open and its records.
	if db, err = store.Open(ctx, o); err != nil {
		t.Fatal(err)
	}
	if err := db.Append(&guard.Record{Kind: guard.KindEvent, Server: "files", Reason: "after"}); err != nil {
		t.Fatal(err)
	}
	var m strings.Builder
	newMetrics(db).Write(&m)
	db.Close()
	wantOutput(t, "metrics", m.String(), "guard_audit_integrity_alerts 1\n")
	cp := guardIn(t, dir, path, 0, "audit", "checkpoint", "--config", cfg)
	if lines := strings.Split(cp, "\n"); len(lines) < 2 || lines[1] != fmt.Sprint(forged.Seq-1) {
		t.Fatalf("the latest checkpoint %q: want it of the %d records before the forged one", cp, forged.Seq-1)
	}

	out := guardIn(t, dir, path, 1, "audit", "verify", "--config", cfg)
	wantOutput(t, "verify", out, fmt.Sprintf("FAILED after %d records: record %d (id %s) carries no MAC", forged.Seq+1, forged.Seq, forged.ID))

	tail := fmt.Sprintf("tail of 2 records after checkpoint %d unauthenticated", forged.Seq-1)
	out = guardIn(t, dir, path, 0, "audit", "verify", "--key", key)
	wantOutput(t, "verify --key", out, fmt.Sprintf("ok, unwitnessed: %d records\nnote: %s", forged.Seq+1, tail))

	export := writeFile(t, filepath.Join(dir, "audit.jsonl"), guardIn(t, dir, path, 0, "audit", "export", "--config", cfg))
	out = guardIn(t, dir, path, 0, "audit", "check", "--key", key, export)
	wantOutput(t, "check", out, fmt.Sprintf("ok: all %d records of %s, the checkpoint's whole tree\nnote: %s: %s", forged.Seq-1, strings.Split(key, "+")[0], export, tail))
}
