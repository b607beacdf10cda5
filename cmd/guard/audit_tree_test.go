package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
	"golang.org/x/mod/sumdb/note"
)

// appendCalls appends n calls (a request and an outcome each) to the log
// at path through the store, and closes it (which writes a checkpoint).
func appendCalls(t *testing.T, path string, from, n int) {
	t.Helper()
	db, err := store.Open(context.Background(), store.Options{Path: path, Durability: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	for i := from; i < from+n; i++ {
		id := fmt.Sprintf("call-%d", i)
		req := &guard.Record{CallID: id, ID: id + "-req", Kind: guard.KindRequest, Server: "files", Method: "tools/call",
			Tool: "write_file", Arguments: fmt.Sprintf(`{"path": "/tmp/%d",  "n":[1, 2]}`, i), Decision: guard.DecisionAllowed}
		out := &guard.Record{CallID: id, ID: id + "-out", Kind: guard.KindOutcome, Outcome: guard.OutcomeOK,
			Result: "plain text, not JSON\n", Detail: "\xff\xfe not UTF-8"}
		if err := db.Append(req, out); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// guardIn runs guard on the database at path, failing the test unless it
// exits with code.
func guardIn(t *testing.T, dir, path string, code int, args ...string) string {
	t.Helper()
	full := append(append(append([]string{}, args[:2]...), "--db", path), args[2:]...)
	stdout, stderr, got := run(t, dir, full...)
	if got != code {
		t.Fatalf("guard %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), got, code, stdout, stderr)
	}
	return stdout
}

func writeFile(t *testing.T, path, text string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// originOf is the log a verifier key names, as guard audit key printed
// it.
func originOf(key string) string { return strings.Split(key, "+")[0] }

func wantOutput(t *testing.T, what, got, want string) {
	t.Helper()
	if !strings.Contains(got, want) {
		t.Fatalf("%s: %q, want it to say %q", what, got, want)
	}
}

// The auditor's round: pin the key, keep a checkpoint, verify against
// both, prove a call, export the log (whole and in part, JSONL and CSV)
// and check all of it offline; an altered export line fails the check.
func TestAuditKeyCheckpointProveExportCheck(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "db", "guard.db")
	appendCalls(t, path, 0, 10)

	key := strings.TrimSpace(guardIn(t, dir, path, 0, "audit", "key"))
	if v, err := note.NewVerifier(key); err != nil || !strings.HasPrefix(v.Name(), "guard-audit/") {
		t.Fatalf("verifier key %q: %v", key, err)
	}
	cp := guardIn(t, dir, path, 0, "audit", "checkpoint")
	if lines := strings.Split(cp, "\n"); len(lines) < 6 || lines[1] != "20" || lines[3] != "guard macs from 1" || !strings.HasPrefix(lines[5], "— guard-audit/") {
		t.Fatalf("checkpoint %q", cp)
	}
	kept := writeFile(t, filepath.Join(dir, "kept.checkpoint"), cp)
	keyFile := writeFile(t, filepath.Join(dir, "pinned.key"), key+"\n")

	wantOutput(t, "verify", guardIn(t, dir, path, 0, "audit", "verify"), "ok, unwitnessed: 20 records")
	wantOutput(t, "verify --key", guardIn(t, dir, path, 0, "audit", "verify", "--key", key), "ok, unwitnessed: 20 records")
	wantOutput(t, "verify --key FILE", guardIn(t, dir, path, 0, "audit", "verify", "--key", keyFile), "ok, unwitnessed: 20 records")
	wantOutput(t, "verify --checkpoint", guardIn(t, dir, path, 0, "audit", "verify", "--checkpoint", kept), "ok: 20 records, extends checkpoint 20")

	proof := guardIn(t, dir, path, 0, "audit", "prove", "call-3")
	if !strings.HasPrefix(proof, "guard audit proof v1\nrecord 7 call-3-req ") || !strings.Contains(proof, "\nrecord 8 call-3-out ") {
		t.Fatalf("proof of a call: %q", proof)
	}
	proofFile := writeFile(t, filepath.Join(dir, "call-3.proof"), proof)
	export := guardIn(t, dir, path, 0, "audit", "export")
	exportFile := writeFile(t, filepath.Join(dir, "all.jsonl"), export)
	if n := strings.Count(export, "\n"); n != 21 {
		t.Fatalf("export has %d lines, want a checkpoint and 20 records", n)
	}
	// The stored JSON is in the export verbatim, spaces and all.
	wantOutput(t, "export", export, `"arguments":{"path": "/tmp/3",  "n":[1, 2]}`)
	wantOutput(t, "export", export, `"text":["arguments","result"],"base64":["detail"]`)

	out := guardIn(t, dir, path, 0, "audit", "check", "--key", key, exportFile, proofFile, kept)
	wantOutput(t, "check", out, "all.jsonl: ok: all 20 records")
	wantOutput(t, "check", out, "record 8 (id call-3-out) is in the checkpoint of 20 records")
	wantOutput(t, "check", out, "its contents are those in "+exportFile)
	wantOutput(t, "check", out, "kept.checkpoint: ok: a checkpoint of 20 records")

	since := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	for _, format := range []string{"jsonl", "csv"} {
		part := guardIn(t, dir, path, 0, "audit", "export", "--format", format, "--since", since)
		f := writeFile(t, filepath.Join(dir, "part."+format), part)
		wantOutput(t, "check "+format, guardIn(t, dir, path, 0, "audit", "check", "--key", key, f), "ok: 20 records (records 1 to 20), each proved in the checkpoint of 20 records")
		whole := writeFile(t, filepath.Join(dir, "whole."+format), guardIn(t, dir, path, 0, "audit", "export", "--format", format))
		wantOutput(t, "check whole "+format, guardIn(t, dir, path, 0, "audit", "check", "--key", key, whole), "ok: all 20 records")
	}

	// A line taken out of a part: the check names what is missing.
	part := guardIn(t, dir, path, 0, "audit", "export", "--since", since)
	lines := strings.SplitAfter(part, "\n")
	cut := writeFile(t, filepath.Join(dir, "cut.jsonl"), strings.Join(append(lines[:6:6], lines[7:]...), ""))
	wantOutput(t, "check cut", guardIn(t, dir, path, 0, "audit", "check", "--key", key, cut),
		"ok: 19 records (records 1 to 20; 1 between them not in the file, the first 6)")

	// An export altered after the fact.
	altered := writeFile(t, filepath.Join(dir, "altered.jsonl"), strings.Replace(export, `"/tmp/3"`, `"/tmp/4"`, 1))
	out = guardIn(t, dir, path, 1, "audit", "check", "--key", key, altered)
	wantOutput(t, "check altered", out, "FAILED: "+altered+": record 7 (id call-3-req) does not match its hash")
	// A proof against another log's key: checked but for its signature,
	// which cannot be checked here.
	other := filepath.Join(t.TempDir(), "other.db")
	appendCalls(t, other, 0, 1)
	otherKey := strings.TrimSpace(guardIn(t, dir, other, 0, "audit", "key"))
	out = guardIn(t, dir, path, exitUnverifiable, "audit", "check", "--key", otherKey, proofFile)
	wantOutput(t, "check with another key", out, "CANNOT VERIFY: the key is another log's: it signs as "+originOf(otherKey)+
		", and the checkpoint of "+proofFile+" is of "+originOf(key)+". Nothing was checked with it")

	guardIn(t, dir, path, 2, "audit", "export", "--format", "xml")
	guardIn(t, dir, path, 2, "audit", "verify", "--key", "not-a-key")
	guardIn(t, dir, path, 1, "audit", "prove", "no-such-id")
	guardIn(t, dir, path, 2, "audit", "prove")
	guardIn(t, dir, path, 2, "audit", "check", "--key", key)
}

// tamper opens the database as an attacker with the file would: the
// triggers dropped first.
func tamper(t *testing.T, path, statements string) {
	t.Helper()
	raw, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec(`DROP TRIGGER records_no_update; DROP TRIGGER records_no_delete;
		DROP TRIGGER tree_hashes_no_update; DROP TRIGGER tree_hashes_no_delete;
		DROP TRIGGER checkpoints_no_update; DROP TRIGGER checkpoints_no_delete;` + statements); err != nil {
		t.Fatal(err)
	}
}

// Truncating the log and letting guard go on is caught, and so is it when
// an older checkpoint file is put back.
func TestAuditVerifyCatchesTruncateAndContinue(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "db", "guard.db")
	appendCalls(t, path, 0, 3)
	older, err := os.ReadFile(path + ".checkpoint") // 6 records
	if err != nil {
		t.Fatal(err)
	}
	appendCalls(t, path, 3, 7) // 20 records
	// Records 17 to 20 go, with their tree hashes (tlog's index of leaf
	// 16 is 16*2 - popcount(16) = 31).
	tamper(t, path, `DELETE FROM records WHERE seq > 16; DELETE FROM tree_hashes WHERE idx >= 31;`)
	appendCalls(t, path, 100, 2) // guard goes on: 20 records again
	out := guardIn(t, dir, path, 1, "audit", "verify")
	wantOutput(t, "verify", out, "FAILED after 20 records: the checkpoint of 20 records kept in the database does not match the log")

	// The older checkpoint file back, the ones kept in the database left.
	writeFile(t, path+".checkpoint", string(older))
	out = guardIn(t, dir, path, 1, "audit", "verify")
	wantOutput(t, "verify with an older checkpoint file", out, "the checkpoint of 20 records kept in the database does not match the log")
}

// A log rewritten together with its checkpoints and its key verifies on
// its own terms, and fails against the pinned key or a kept checkpoint.
func TestAuditVerifyCatchesARewriteOnlyAgainstWhatWasKept(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "db", "guard.db")
	appendCalls(t, path, 0, 5)
	key := strings.TrimSpace(guardIn(t, dir, path, 0, "audit", "key"))
	kept := writeFile(t, filepath.Join(dir, "kept.checkpoint"), guardIn(t, dir, path, 0, "audit", "checkpoint"))

	// Everything goes, key included, and a log of the attacker's making
	// takes its place.
	tamper(t, path, `DELETE FROM records; DELETE FROM tree_hashes; DELETE FROM checkpoints; DELETE FROM call_index; INSERT INTO call_text (call_text) VALUES ('delete-all');`)
	for _, f := range []string{path + ".checkpoint", filepath.Join(filepath.Dir(path), "audit.key")} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	appendCalls(t, path, 50, 6)
	wantOutput(t, "verify", guardIn(t, dir, path, 0, "audit", "verify"), "ok, unwitnessed: 12 records")
	// The pinned key is another log's than the one there now: nothing is
	// checked with it, and verify says so, and what it means.
	out := guardIn(t, dir, path, exitUnverifiable, "audit", "verify", "--key", key)
	wantOutput(t, "verify --key", out, "CANNOT VERIFY: the key given is another log's key: it signs as "+originOf(key))
	wantOutput(t, "verify --key", out, "if it is the key you pinned for this log, the log was signed with another key since")
	wantOutput(t, "verify --checkpoint", guardIn(t, dir, path, 1, "audit", "verify", "--checkpoint", kept), "the checkpoint in "+kept+": it is not signed by")
	// With the kept checkpoint as well, the rewrite fails.
	wantOutput(t, "verify --key --checkpoint", guardIn(t, dir, path, 1, "audit", "verify", "--key", key, "--checkpoint", kept),
		"FAILED after 12 records: the checkpoint in "+kept+": it is of "+originOf(key)+", and this log's checkpoints of ")

	// The same with the key kept: only the checkpoint catches it.
	path2 := filepath.Join(dir, "db2", "guard.db")
	appendCalls(t, path2, 0, 5)
	kept2 := writeFile(t, filepath.Join(dir, "kept2.checkpoint"), guardIn(t, dir, path2, 0, "audit", "checkpoint"))
	tamper(t, path2, `DELETE FROM records; DELETE FROM tree_hashes; DELETE FROM checkpoints; DELETE FROM call_index; INSERT INTO call_text (call_text) VALUES ('delete-all');`)
	if err := os.Remove(path2 + ".checkpoint"); err != nil {
		t.Fatal(err)
	}
	appendCalls(t, path2, 50, 6)
	wantOutput(t, "verify", guardIn(t, dir, path2, 0, "audit", "verify"), "ok, unwitnessed: 12 records")
	wantOutput(t, "verify --checkpoint", guardIn(t, dir, path2, 1, "audit", "verify", "--checkpoint", kept2),
		"the checkpoint of 10 records in "+kept2+" does not match the log")
}

// The configuration's key file and witnesses reach the store: the key is
// where audit.key_file says (relative to the configuration), each
// checkpoint is also written to the witness directory, and verify checks
// the log against the latest witnessed checkpoint, which a rewrite with a
// new key does not get past.
func TestAuditVerifyChecksTheWitnessedCheckpoint(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "db", "guard.db")
	witness := filepath.Join(dir, "witness")
	if err := os.Mkdir(witness, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, filepath.Join(dir, "guard.yaml"), "audit:\n  key_file: keys/audit.key\n  checkpoints:\n    every: 1h\n    witness: [\"file://"+witness+"\"]\n")
	appendWith := func(n int) {
		t.Helper()
		var out, errb lockedBuffer
		a := newApp(strings.NewReader(""), &out, &errb, func(string) string { return "" })
		st, err := a.settings(&commonFlags{config: cfg, db: path})
		if err != nil {
			t.Fatal(err)
		}
		db, err := a.wiring().OpenStore(ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if err := db.Append(&guard.Record{CallID: fmt.Sprintf("c%d", i), Kind: guard.KindRequest, Server: "s"}); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	appendWith(4)
	if _, err := os.Stat(filepath.Join(dir, "keys", "audit.key")); err != nil {
		t.Fatalf("the configured key file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(witness, "00000000000000000004.checkpoint")); err != nil {
		t.Fatalf("the witnessed checkpoint: %v", err)
	}
	wantOutput(t, "verify", guardIn(t, dir, path, 0, "audit", "verify", "--config", cfg), "ok: 4 records, extends checkpoint 4")

	tamper(t, path, `DELETE FROM records; DELETE FROM tree_hashes; DELETE FROM checkpoints; DELETE FROM call_index; INSERT INTO call_text (call_text) VALUES ('delete-all');`)
	for _, f := range []string{path + ".checkpoint", filepath.Join(dir, "keys", "audit.key")} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	appendWith(3) // its checkpoint, of 3 records, is witnessed too: the latest file is still the one of 4
	wantOutput(t, "verify after a rewrite", guardIn(t, dir, path, 1, "audit", "verify", "--config", cfg),
		"the checkpoint witnessed in "+filepath.Join(witness, "00000000000000000004.checkpoint")+": it is not signed by")
}

// A log truncated with every checkpoint on the machine, its new history
// signed and witnessed since, fails verify against a file witness that
// still holds a checkpoint of the old one, whether it is a directory or
// an appended file, even when a later witnessed checkpoint is of the new
// history; a pinned key alone does not say the log extends a checkpoint.
func TestAuditVerifyChecksEveryWitnessedCheckpoint(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "db", "guard.db")
	witness := filepath.Join(dir, "witness")
	if err := os.Mkdir(witness, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, filepath.Join(dir, "guard.yaml"), "audit:\n  checkpoints:\n    every: 1h\n    witness: [\"file://"+witness+"\"]\n")
	appendWith := func(from, n int) {
		t.Helper()
		var out, errb lockedBuffer
		a := newApp(strings.NewReader(""), &out, &errb, func(string) string { return "" })
		st, err := a.settings(&commonFlags{config: cfg, db: path})
		if err != nil {
			t.Fatal(err)
		}
		db, err := a.wiring().OpenStore(ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if err := db.Append(&guard.Record{CallID: fmt.Sprintf("c%d", from+i), Kind: guard.KindRequest, Server: "s"}); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	appendWith(0, 4)
	old := filepath.Join(witness, "00000000000000000004.checkpoint")
	oldNote, err := os.ReadFile(old)
	if err != nil {
		t.Fatalf("the witnessed checkpoint: %v", err)
	}
	key := strings.TrimSpace(guardIn(t, dir, path, 0, "audit", "key"))
	wantOutput(t, "verify --key", guardIn(t, dir, path, 0, "audit", "verify", "--key", key), "ok, unwitnessed: 4 records")

	tamper(t, path, `DELETE FROM records; DELETE FROM tree_hashes; DELETE FROM checkpoints; DELETE FROM call_index; INSERT INTO call_text (call_text) VALUES ('delete-all');`)
	if err := os.Remove(path + ".checkpoint"); err != nil {
		t.Fatal(err)
	}
	// The witness's old checkpoint out of guard's sight while it signs
	// the new history, and back.
	if err := os.Rename(old, old+".away"); err != nil {
		t.Fatal(err)
	}
	appendWith(100, 6)
	if err := os.Rename(old+".away", old); err != nil {
		t.Fatal(err)
	}
	newNote, err := os.ReadFile(filepath.Join(witness, "00000000000000000006.checkpoint"))
	if err != nil {
		t.Fatalf("the new history's checkpoint was not witnessed: %v", err)
	}
	wantOutput(t, "verify --key of the new history", guardIn(t, dir, path, 0, "audit", "verify", "--key", key), "ok, unwitnessed: 6 records")
	wantOutput(t, "verify against the witness directory", guardIn(t, dir, path, 1, "audit", "verify", "--config", cfg),
		"the checkpoint of 4 records witnessed in "+old+" does not match the log")

	appended := filepath.Join(dir, "witness.log")
	writeFile(t, appended, string(oldNote)+"\n"+string(newNote)+"\n")
	cfg2 := writeFile(t, filepath.Join(dir, "guard2.yaml"), "audit:\n  checkpoints:\n    every: 1h\n    witness: [\"file://"+appended+"\"]\n")
	wantOutput(t, "verify against the appended witness", guardIn(t, dir, path, 1, "audit", "verify", "--config", cfg2),
		"the checkpoint of 4 records witnessed in "+appended+" (note 1) does not match the log")
}
