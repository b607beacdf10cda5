package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	guardapp "github.com/guard-mcp/guard/cmd/guard/app"
	"github.com/guard-mcp/guard/store"
)

// protectedLog makes a log in dir whose checkpoint key is where the
// database's writer cannot reach it (the configuration cfg's
// audit.key_file, keys/audit.key), holding a call held for approval,
// held-1; it returns the database's path, cfg and the options of a
// writable open.
func protectedLog(t *testing.T, dir string) (path, cfg string, o store.Options) {
	t.Helper()
	path = filepath.Join(dir, "db", "guard.db")
	cfg = writeFile(t, filepath.Join(dir, "guard.yaml"), "audit:\n  key_file: keys/audit.key\n")
	o = store.Options{Path: path, KeyPath: filepath.Join(dir, "keys", "audit.key"), Durability: "normal"}
	db, err := store.Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Append(&guard.Record{CallID: "held-1", Kind: guard.KindRequest, Server: "files", Method: "tools/call",
		Tool: "write_file", Arguments: `{"path":"/etc/passwd"}`, Decision: guard.DecisionHeld, DecidedBy: "default"}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return path, cfg, o
}

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
	path, cfg, o := protectedLog(t, dir)
	key := strings.TrimSpace(guardIn(t, dir, path, 0, "audit", "key", "--config", cfg))
	forged := forgeDecision(t, path, "held-1")

	// guard goes on: its next open and its records.
	db, err := store.Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Append(&guard.Record{Kind: guard.KindEvent, Server: "files", Reason: "after"}); err != nil {
		t.Fatal(err)
	}
	m := scrapeMetrics(t, db)
	// /readyz's body counts it, and stays 200: one forged row must not
	// take a replica out of the balancer.
	status, body := guardapp.NewHealth(db, "test", "", slog.New(slog.DiscardHandler)).Readiness(ctx)
	db.Close()
	wantOutput(t, "metrics", m, "guard_audit_integrity_alerts 1\n")
	if status != 200 || !strings.Contains(body, "integrity alerts: 1 not acknowledged") {
		t.Errorf("/readyz with a forged record: %d %q", status, body)
	}
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

// journalMark begins each frame of a journal (the store's format, read
// from its source as anyone can).
const journalMark = "\xf8GJ\x9d"

// journalFrames are where the frames of a journal's bytes begin, and,
// last, where they end: each is the mark, a length, that many bytes and a
// CRC-32 of them.
func journalFrames(t *testing.T, b []byte) []int {
	t.Helper()
	offs := []int{64}
	for at := 64; at+len(journalMark) < len(b) && string(b[at:at+len(journalMark)]) == journalMark; {
		n, k := binary.Uvarint(b[at+len(journalMark):])
		at += len(journalMark) + k + int(n) + 4
		offs = append(offs, at)
	}
	return offs
}

// withCRC makes the checksum of the frame f right again, as whoever
// changed it can.
func withCRC(f []byte) []byte {
	n, k := binary.Uvarint(f[len(journalMark):])
	body := f[len(journalMark)+k : len(journalMark)+k+int(n)]
	binary.BigEndian.PutUint32(f[len(journalMark)+k+int(n):], crc32.ChecksumIEEE(body))
	return f
}

// markedFrame is r's frame as journals were written before frames carried
// a MAC (guard-journal-2), made as the store's source says.
func markedFrame(r *guard.Record) []byte {
	var body []byte
	for _, s := range []string{r.ID, r.CallID, r.Kind, r.Session, r.Client, r.Protocol, r.Server, r.Direction,
		r.Method, r.Tool, r.Arguments, r.Pin, r.Decision, r.DecidedBy, r.Reason, r.Outcome, r.Result, r.Detail} {
		body = binary.AppendUvarint(body, uint64(len(s)))
		body = append(body, s...)
	}
	for _, v := range []int64{r.Time.UnixMilli(), 0, 0, 0} {
		body = binary.AppendVarint(body, v)
	}
	f := binary.AppendUvarint([]byte(journalMark), uint64(len(body)))
	f = append(f, body...)
	return binary.BigEndian.AppendUint32(f, crc32.ChecksumIEEE(body))
}

// Someone who can write the database's directory, but not the key file,
// appends frames to the journal of a guard process that was killed (a
// copy of one of its frames, and one changed with its checksum made right
// again) and plants a journal in the format of before MACs, approving a
// call "by alice@example.com". guard audit query leaves them out, and
// verify says so (and, without the key, that the journal's records are
// unauthenticated); the next writable open moves the process's own
// records in and none of theirs, counts each in the metrics and records
// each journal, which verify names, and /readyz counts, until a person
// acknowledges it.
func TestAForgedJournalAtTheCommandLine(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path, cfg, o := protectedLog(t, dir)
	journal, b := stoppedGuard(t, path, o.KeyPath)
	offs := journalFrames(t, b)
	if len(offs) != 21 {
		t.Fatalf("%d frames in the journal, want 20", len(offs)-1)
	}
	end := offs[20]
	changed := withCRC(bytes.Replace(slices.Clone(b[offs[2]:offs[3]]), []byte("/srv/1"), []byte("/etc/1"), 1))
	b = append(append(b[:end], b[offs[0]:offs[1]]...), changed...)
	if err := os.WriteFile(journal, b, 0o600); err != nil {
		t.Fatal(err)
	}
	decision := &guard.Record{ID: guard.NewID(), CallID: "stopped-3", Kind: guard.KindDecision, Time: time.Now(),
		Server: "files", Tool: "read_file", Decision: guard.ApprovalApproved, DecidedBy: "alice@example.com", Approval: "stopped-3"}
	planted := make([]byte, 64)
	copy(planted, "guard-journal-2\n")
	binary.LittleEndian.PutUint64(planted[16:], 64)
	planted = append(planted, markedFrame(decision)...)
	writeFile(t, filepath.Join(path+".journal", guard.NewID()+".log"), string(planted))

	if rows := strings.Count(guardIn(t, dir, path, 0, "audit", "query", "--config", cfg, "--format", "jsonl"), "\n"); rows != 11 {
		t.Errorf("guard audit query shows %d calls, want the stopped process's 10 and the one before", rows)
	}
	if out := guardIn(t, dir, path, 0, "audit", "query", "--config", cfg, "--decided-by", "alice@example.com", "--format", "jsonl"); out != "" {
		t.Errorf("calls alice approved: %s", out)
	}
	out := guardIn(t, dir, path, 3, "audit", "verify", "--config", cfg)
	wantOutput(t, "verify", out, "CANNOT VERIFY: 20 acknowledged records not yet in the chain")
	wantOutput(t, "verify", out, "note: 3 frames of journals of stopped processes were left out: their MAC does not verify")
	out = guardIn(t, dir, path, 3, "audit", "verify")
	wantOutput(t, "verify without the key", out, "note: the 23 records of journals of stopped processes are unauthenticated")

	db, err := store.Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	metrics := scrapeMetrics(t, db)
	status, body := guardapp.NewHealth(db, "test", "", slog.New(slog.DiscardHandler)).Readiness(ctx)
	db.Close()
	if status != 200 || !strings.Contains(body, "integrity alerts: 2 not acknowledged") {
		t.Errorf("/readyz with journals refused: %d %q", status, body)
	}
	wantOutput(t, "the metrics of the process that refused them", metrics, "\nguard_audit_integrity_alerts 3\n")
	out = guardIn(t, dir, path, 0, "audit", "verify", "--config", cfg)
	wantOutput(t, "verify after the recovery", out, "ok, unwitnessed: 23 records")
	ids := regexp.MustCompile(`note: unacknowledged refused journal (\S+) `).FindAllStringSubmatch(out, -1)
	if len(ids) != 2 {
		t.Fatalf("verify does not name both journals: %s", out)
	}
	wantOutput(t, "the journal of the killed process", out, "holds 2 frames whose MAC does not verify: ")
	wantOutput(t, "the journal of an earlier format", out, "is of an earlier format (guard-journal-2), whose frames carry no MAC")
	if out := guardIn(t, dir, path, 0, "audit", "query", "--config", cfg, "--decided-by", "alice@example.com", "--format", "jsonl"); out != "" {
		t.Errorf("calls alice approved after the recovery: %s", out)
	}
	for _, id := range ids {
		if _, stderr, code := run(t, dir, "audit", "acknowledge-loss", id[1], "--db", path, "--config", cfg, "--reason", "the directory is the guard user's alone now"); code != 0 {
			t.Fatalf("acknowledge-loss: exit %d, %s", code, stderr)
		}
	}
	if out := guardIn(t, dir, path, 0, "audit", "verify", "--config", cfg); strings.Contains(out, "note:") {
		t.Errorf("verify after the acknowledgements: %s", out)
	}
}
