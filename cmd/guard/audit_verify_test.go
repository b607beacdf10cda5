package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
	"github.com/guard-mcp/guard/internal/pgtest"
	"github.com/guard-mcp/guard/store"
	_ "github.com/jackc/pgx/v5/stdlib" // the database/sql driver "pgx", to tamper with PostgreSQL
)

// auditLog is a log of 20 records on the tests' engine, signed with the
// key the configuration cfg names (audit.key_file: keys/audit.key, as
// replicas share one), with the checkpoint of all of it kept in kept.
type auditLog struct {
	dir, db, cfg, key, kept string
	// origin is the log's name, as its checkpoints give it.
	origin string
}

// newAuditLog makes an auditLog: in dir/db/guard.db on SQLite, in a new
// database of the tests' cluster on PostgreSQL.
func newAuditLog(t *testing.T) *auditLog {
	t.Helper()
	l := &auditLog{dir: t.TempDir()}
	l.db = filepath.Join(l.dir, "db", "guard.db")
	if pgtest.Postgres() {
		l.db = pgtest.Database(t)
	}
	l.cfg = writeFile(t, filepath.Join(l.dir, "guard.yaml"), "audit:\n  key_file: keys/audit.key\n")
	l.key = filepath.Join(l.dir, "keys", "audit.key")
	db, err := store.Open(context.Background(), store.Options{Path: l.db, KeyPath: l.key, Durability: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		id := fmt.Sprintf("call-%d", i)
		if err := db.Append(&guard.Record{CallID: id, ID: id + "-req", Kind: guard.KindRequest, Server: "files", Method: "tools/call", Tool: "write_file"},
			&guard.Record{CallID: id, ID: id + "-out", Kind: guard.KindOutcome, Outcome: guard.OutcomeOK}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	l.origin = originOf(strings.TrimSpace(l.guard(t, 0, "audit", "key", "--config", l.cfg)))
	l.kept = writeFile(t, filepath.Join(l.dir, "kept.checkpoint"), l.guard(t, 0, "audit", "checkpoint", "--config", l.cfg))
	return l
}

// guard runs guard on the log, failing the test unless it exits with
// code.
func (l *auditLog) guard(t *testing.T, code int, args ...string) string {
	t.Helper()
	return guardIn(t, l.dir, l.db, code, args...)
}

// defaultKey is where guard looks for the checkpoint key without a
// configuration: beside the database on SQLite, in guard's data
// directory on PostgreSQL.
func (l *auditLog) defaultKey() string {
	if pgtest.Postgres() {
		return filepath.Join(l.dir, "data", "guard", "audit.key")
	}
	return filepath.Join(filepath.Dir(l.db), "audit.key")
}

// tamper runs statements on the log's database as someone with access to
// it would, its append-only triggers out of the way.
func (l *auditLog) tamper(t *testing.T, statements ...string) {
	t.Helper()
	if !pgtest.Postgres() {
		tamper(t, l.db, strings.Join(statements, "; "))
		return
	}
	raw, err := sql.Open("pgx", l.db)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	conn, err := raw.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, s := range append([]string{"SET session_replication_role = replica"}, statements...) {
		if _, err := conn.ExecContext(context.Background(), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// strayKey puts another log's checkpoint key where guard looks for one
// without a configuration, as a guard command run without the replicas'
// configuration leaves one, and returns that log's name.
func strayKey(t *testing.T, path string) string {
	t.Helper()
	other := filepath.Join(t.TempDir(), "other", "guard.db")
	appendCalls(t, other, 0, 1)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(other), "audit.key"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, string(b))
	k, err := audit.VerifierKeyOf(path)
	if err != nil {
		t.Fatal(err)
	}
	return originOf(k)
}

// guard audit verify exits 0 verified, 1 failed, 3 cannot verify here,
// and says which: without a key of this log (none, or another log's,
// which is used for nothing) it checks all else, and fails on what fails.
func TestAuditVerifyExitCodes(t *testing.T) {
	l := newAuditLog(t)
	wantOutput(t, "verify", l.guard(t, exitOK, "audit", "verify", "--config", l.cfg), "ok, unwitnessed: 20 records")
	wantOutput(t, "verify --checkpoint", l.guard(t, exitOK, "audit", "verify", "--config", l.cfg, "--checkpoint", l.kept),
		"ok: 20 records, extends checkpoint 20")

	// No key: the configuration that names it is not given.
	out := l.guard(t, exitUnverifiable, "audit", "verify")
	wantOutput(t, "verify without a key", out, "CANNOT VERIFY: there is no key for this log (none at "+l.defaultKey()+", and none given)")
	wantOutput(t, "verify without a key", out, "pass this log's verifier key (--key, as guard audit key prints it where the log's key is), or the configuration that names its key file (--config, audit.key_file)")
	wantOutput(t, "verify without a key", out, "all else holds: 20 records")

	// A stray key of another log where guard looks without the
	// configuration: never used, and named with this log's.
	stray := strayKey(t, l.defaultKey())
	out = l.guard(t, exitUnverifiable, "audit", "verify")
	wantOutput(t, "verify with a stray key", out, "CANNOT VERIFY: the checkpoint key at "+l.defaultKey()+" is another log's key: it signs as "+stray+
		", and this log's checkpoints as "+l.origin+" (its first checkpoint, kept in the database). Nothing was checked with it: pass this log's verifier key")
	if strings.Contains(out, "FAILED") || strings.Contains(out, "not signed by") {
		t.Errorf("verify with a stray key reads as a failure:\n%s", out)
	}
	// The same key pinned.
	otherKey, err := audit.VerifierKeyOf(l.defaultKey())
	if err != nil {
		t.Fatal(err)
	}
	out = l.guard(t, exitUnverifiable, "audit", "verify", "--config", l.cfg, "--key", otherKey)
	wantOutput(t, "verify --key of another log", out, "CANNOT VERIFY: the key given is another log's key: it signs as "+stray+", and this log's checkpoints as "+l.origin)
	// The kept checkpoint is still held against the log, unsigned.
	wantOutput(t, "verify --key of another log --checkpoint", l.guard(t, exitUnverifiable, "audit", "verify", "--checkpoint", l.kept),
		"all else holds: 20 records")

	// Truncated: the checkpoints' sizes are checked without a key, and
	// the failure is what verify says and exits with. Records 17 to 20
	// go, with their tree hashes (tlog's index of leaf 16 is 31).
	l.tamper(t, `DELETE FROM records WHERE seq > 16`, `DELETE FROM tree_hashes WHERE idx >= 31`)
	for _, args := range [][]string{{}, {"--checkpoint", l.kept}, {"--key", otherKey}, {"--config", l.cfg}} {
		out = l.guard(t, exitFailure, append([]string{"audit", "verify"}, args...)...)
		wantOutput(t, fmt.Sprintf("verify %q of a truncated log", args), out, "FAILED after 16 records: the log was truncated: the checkpoint of 20 records")
	}
}

// A log that is not there cannot be verified: verify says where it
// looked, rather than "ok" for an empty log.
func TestAuditVerifyOfNoDatabase(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "nonexistent", "guard.db")
	out := guardIn(t, dir, path, exitUnverifiable, "audit", "verify")
	wantOutput(t, "verify of no database", out, "CANNOT VERIFY: there is no database at "+path)
	if strings.Contains(out, "ok") {
		t.Errorf("verify of no database says ok:\n%s", out)
	}
	if _, err := os.Stat(filepath.Dir(path)); !os.IsNotExist(err) {
		t.Errorf("verify made the database's directory: %v", err)
	}
	if pgtest.Postgres() {
		// A database guard never opened.
		out := guardIn(t, dir, pgtest.Database(t), exitUnverifiable, "audit", "verify")
		wantOutput(t, "verify of an empty PostgreSQL database", out, "CANNOT VERIFY: ")
		wantOutput(t, "verify of an empty PostgreSQL database", out, store.ErrNotGuardDatabase.Error())
	}
}

// guard audit check exits as verify does: an export checked with another
// log's key, or with none, is checked but for its signature (3), and an
// altered one fails (1) whatever the key.
func TestAuditCheckExitCodes(t *testing.T) {
	l := newAuditLog(t)
	key := strings.TrimSpace(l.guard(t, exitOK, "audit", "key", "--config", l.cfg))
	export := l.guard(t, exitOK, "audit", "export", "--config", l.cfg)
	file := writeFile(t, filepath.Join(l.dir, "audit.jsonl"), export)
	wantOutput(t, "check", l.guard(t, exitOK, "audit", "check", "--key", key, file), file+": ok: all 20 records of "+l.origin)
	wantOutput(t, "check with the configuration's key", l.guard(t, exitOK, "audit", "check", "--config", l.cfg, file), file+": ok: all 20 records")

	out := l.guard(t, exitUnverifiable, "audit", "check", file)
	wantOutput(t, "check without a key", out, file+": holds, its checkpoint's signature not checked: all 20 records of "+l.origin)
	wantOutput(t, "check without a key", out, "CANNOT VERIFY: there is no key to check the signatures with")

	stray := strayKey(t, l.defaultKey())
	out = l.guard(t, exitUnverifiable, "audit", "check", file)
	wantOutput(t, "check with a stray key", out, "CANNOT VERIFY: the key is another log's: it signs as "+stray+", and the checkpoint of "+file+" is of "+l.origin)
	wantOutput(t, "check with a stray key", out, "note: the key was this machine's checkpoint key, at "+l.defaultKey()+": no --key was given")
	otherKey, err := audit.VerifierKeyOf(l.defaultKey())
	if err != nil {
		t.Fatal(err)
	}
	l.guard(t, exitUnverifiable, "audit", "check", "--key", otherKey, file)

	altered := writeFile(t, filepath.Join(l.dir, "altered.jsonl"), strings.Replace(export, `"tool":"write_file"`, `"tool":"read_file"`, 1))
	for _, k := range []string{key, otherKey} {
		out = l.guard(t, exitFailure, "audit", "check", "--key", k, altered)
		wantOutput(t, "check of an altered export", out, "FAILED: "+altered+": record 1 (id call-0-req) does not match its hash")
	}
}
