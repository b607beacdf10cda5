package store

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/guard-mcp/guard/store/sqlite"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
	"github.com/guard-mcp/guard/store/postgres"
)

// dropMACColumns is the SQL that takes an SQLite database opened with
// this release back to the schema of the release before MACs.
const dropMACColumns = `DROP TRIGGER records_mac_kept; DROP INDEX records_macs;
		ALTER TABLE records DROP COLUMN mac; ALTER TABLE replicas DROP COLUMN macs;
		DELETE FROM schema_migrations WHERE version = 21;
		`

// attacker is write access to a test's database, SQLite or PostgreSQL,
// without guard: what someone holding the file, or the database's
// credentials, has. It runs statements written with ? placeholders.
type attacker struct {
	db *sql.DB
	pg bool
}

func attack(t *testing.T, path string) *attacker {
	t.Helper()
	if !IsPostgres(path) {
		return &attacker{db: rawConn(t, path)}
	}
	db, err := sql.Open("pgx", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &attacker{db: db, pg: true}
}

// sql is q with PostgreSQL's placeholders when it needs them.
func (a *attacker) sql(q string) string {
	if !a.pg {
		return q
	}
	var b strings.Builder
	n := 0
	for _, c := range q {
		if c == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

func (a *attacker) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	if _, err := a.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func (a *attacker) Exec(q string, args ...any) (sql.Result, error) {
	return a.db.Exec(a.sql(q), args...)
}

func (a *attacker) QueryRow(q string, args ...any) *sql.Row {
	return a.db.QueryRow(a.sql(q), args...)
}

func (a *attacker) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return a.db.QueryContext(ctx, a.sql(q), args...)
}

func (a *attacker) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	return a.db.QueryRowContext(ctx, a.sql(q), args...)
}

// dropTriggers drops every trigger on the audit log's tables.
func (a *attacker) dropTriggers(t *testing.T) {
	t.Helper()
	q := `SELECT name, tbl_name FROM sqlite_master WHERE type = 'trigger'`
	if a.pg {
		q = `SELECT t.tgname, c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE NOT t.tgisinternal`
	}
	rows, err := a.db.Query(q)
	if err != nil {
		t.Fatal(err)
	}
	var drop []string
	for rows.Next() {
		var name, table string
		if err := rows.Scan(&name, &table); err != nil {
			t.Fatal(err)
		}
		if a.pg {
			drop = append(drop, `DROP TRIGGER "`+name+`" ON "`+table+`"`)
		} else {
			drop = append(drop, `DROP TRIGGER "`+name+`"`)
		}
	}
	rows.Close()
	for _, d := range drop {
		a.exec(t, d)
	}
}

// forge does what was found to work on the release before: with write
// access to the database and guard's public code, but not the key, it
// appends after the log's last record a decision approving the held call
// callID "by alice@example.com", its chain hash computed with HashRecord,
// and points the call index at it; with tree, it also adds the record's
// leaf to the tree, as guard's writer would.
func forge(t *testing.T, path, callID string, tree bool) *guard.Record {
	t.Helper()
	a := attack(t, path)
	a.dropTriggers(t)
	r := &guard.Record{ID: guard.NewID(), CallID: callID, Kind: guard.KindDecision,
		Time: time.Now().UTC().Truncate(time.Millisecond), Server: "files", Tool: "write_file",
		Decision: guard.ApprovalApproved, DecidedBy: "alice@example.com", Reason: "looks fine", Approval: callID}
	forgeRecord(t, a, r)
	if tree {
		forgeLeaf(t, a, r)
	}
	a.exec(t, `UPDATE call_index SET dec_seq = ?, decision = ?, decided_by = ?, approval = ? WHERE call_id = ?`,
		r.Seq, r.Decision, r.DecidedBy, r.Approval, callID)
	return r
}

// protected are the options of a database whose checkpoint key is out of
// the database writer's reach: in a directory of its own.
func protected(t *testing.T, path string) Options {
	return Options{Path: path, KeyPath: filepath.Join(t.TempDir(), "keys", "audit.key"), Durability: "normal"}
}

// heldCall appends a call held for a person's approval: its request.
func heldCall(t *testing.T, db *DB, callID string) {
	t.Helper()
	r := rec(0, guard.KindRequest)
	r.CallID, r.Decision, r.DecidedBy = callID, guard.DecisionHeld, "default"
	if err := db.Append(r); err != nil {
		t.Fatal(err)
	}
}

// forgedLog makes a log, in the layout where the key is out of the
// database writer's reach (protected), that holds a held call and, after
// the last checkpoint, a decision forged to approve it (forge); it
// returns its options, the forged record and the verifier key.
func forgedLog(t *testing.T, tree bool) (Options, *guard.Record, string) {
	t.Helper()
	path := testPath(t)
	o := protected(t, path)
	db, err := Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	heldCall(t, db, "held-1")
	vkey, _ := db.Verifier().VerifierKey()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return o, forge(t, path, "held-1", tree), vkey
}

// variants runs test once on a log forged with the record alone, and once
// on one forged with its leaf in the tree too.
func variants(t *testing.T, test func(t *testing.T, tree bool)) {
	for _, tree := range []bool{false, true} {
		name := "record"
		if tree {
			name = "record and its tree hashes"
		}
		t.Run(name, func(t *testing.T) { test(t, tree) })
	}
}

// A record that someone without the key adds after the last checkpoint
// (a decision "approved by alice@example.com", its chain hash right, the
// call index pointed at it) is told from guard's own by its missing MAC:
// guard builds no tree over it, signs no checkpoint over it and leaves it
// out of the call index it makes, and counts it once; it goes on
// recording.
func TestAForgedRecordAfterTheCheckpointIsNotTakenIn(t *testing.T) {
	variants(t, func(t *testing.T, tree bool) {
		ctx := context.Background()
		o, forged, _ := forgedLog(t, tree)
		db, err := Open(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.Append(rec(1, guard.KindRequest), rec(1, guard.KindOutcome)); err != nil {
			t.Fatal(err)
		}
		db.ing.caughtUp(ctx)
		err = db.ckpt.writeCheckpoint()
		if tree && !errors.Is(err, errUnauthenticated) {
			t.Fatalf("a checkpoint over the forged record and its leaf: %v, want it refused", err)
		}
		if !tree && err != nil {
			t.Fatal(err)
		}
		if n, err := treeSize(ctx, db.r); err != nil || !tree && n != forged.Seq-1 {
			t.Fatalf("the tree has %d leaves (%v): want it to stop before record %d", n, err, forged.Seq)
		}
		if c, err := db.LatestCheckpoint(ctx); err != nil || c.Size >= forged.Seq {
			t.Fatalf("latest checkpoint %+v (%v): it covers the forged record %d", c, err, forged.Seq)
		}
		if n := db.Integrity().IntegrityAlerts(); n != 1 {
			t.Fatalf("integrity alerts %d, want 1", n)
		}
		if ids := queryIDs(t, db, Filter{DecidedBy: "alice@example.com"}); len(ids) != 1 {
			t.Fatalf("calls alice approved, as the forged index says: %v", ids)
		}
		if err := db.CallIndex().RebuildCallIndex(ctx); err != nil {
			t.Fatal(err)
		}
		if ids := queryIDs(t, db, Filter{DecidedBy: "alice@example.com"}); len(ids) != 0 {
			t.Fatalf("calls alice approved, once guard made the index: %v, want none", ids)
		}
		if n := db.Integrity().IntegrityAlerts(); n != 1 {
			t.Fatalf("integrity alerts %d after the index was made again, want the record counted once", n)
		}
	})
}

// A new log's records carry a MAC from the first, under the key derived
// from the checkpoint key, in their column: of the record's seq and hash,
// nothing else. Its checkpoints say from where.
func TestRecordsCarryTheirMACs(t *testing.T) {
	ctx := context.Background()
	path := testPath(t)
	db, err := Open(ctx, protected(t, path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Append(rec(1, guard.KindRequest), rec(1, guard.KindOutcome)); err != nil {
		t.Fatal(err)
	}
	db.ing.caughtUp(ctx)
	from, err := db.auth.macsFrom(ctx, db.r)
	if err != nil || from != 1 {
		t.Fatalf("MACs from %d (%v), want 1: a new log has them from its first record", from, err)
	}
	m := audit.NewMACer(db.signer.Derive("guard: the audit records' MACs"))
	rows, err := db.r.QueryContext(ctx, `SELECT seq, hash, mac FROM records ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var seq int64
		var h string
		var mac []byte
		if err := rows.Scan(&seq, &h, &mac); err != nil {
			t.Fatal(err)
		}
		if !m.Valid(seq, h, mac) {
			t.Errorf("record %d: MAC %x does not verify", seq, mac)
		}
		n++
	}
	if n != 2 {
		t.Fatalf("%d records, want a call's two", n)
	}
	if seq, _ := macsStart(t, db); seq != 0 {
		t.Fatalf("a new log has a record MACs start at (%d): they start at its first record, as its checkpoints say", seq)
	}
	if err := db.ckpt.writeCheckpoint(); err != nil {
		t.Fatal(err)
	}
	c, err := db.LatestCheckpoint(ctx)
	if err != nil || c.MACsFrom != 1 || !strings.Contains(string(c.Note), "\nguard macs from 1\n") {
		t.Fatalf("checkpoint %+v (%v), want it to say that MACs start at record 1", c, err)
	}
}

// macsStart is the seq and the reason of the log's LifecycleMACs record
// (0 and "": none).
func macsStart(t *testing.T, db *DB) (int64, string) {
	t.Helper()
	var seq int64
	var reason string
	err := db.r.QueryRow(`SELECT seq, reason FROM records WHERE kind = 'lifecycle' AND decision = 'macs' ORDER BY seq LIMIT 1`).Scan(&seq, &reason)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		t.Fatal(err)
	}
	return seq, reason
}

// A log the release before wrote has no MACs: it verifies as it is, and
// its first writable open starts them at a lifecycle record "MACs from
// seq N" after its records, which need none; from that record on a record
// without a MAC is caught as in a new log.
func TestALogFromBeforeMACsStartsThemOnItsFirstOpen(t *testing.T) {
	sqliteOnly(t)
	ctx := context.Background()
	path := logBeforeUsers(t)
	db := openDB(t, path)
	seq, reason := macsStart(t, db)
	if seq != 15 || !strings.HasPrefix(reason, "MACs from seq 15:") {
		t.Fatalf("MACs start at record %d (%q), want a record after the release before's 14 saying so", seq, reason)
	}
	heldCall(t, db, "held-2")
	db.ing.caughtUp(ctx)
	if err := db.ckpt.writeCheckpoint(); err != nil {
		t.Fatal(err)
	}
	if c, err := db.LatestCheckpoint(ctx); err != nil || c.MACsFrom != 15 {
		t.Fatalf("checkpoint %+v (%v), want it to say that MACs start at record 15", c, err)
	}
	rep, err := db.Verifier().Verify(ctx)
	if err != nil || !rep.OK || rep.Records != 16 {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	db.Close()

	forge(t, path, "held-2", true)
	db = openDB(t, path)
	defer db.Close()
	if seq, _ := macsStart(t, db); seq != 15 {
		t.Fatalf("MACs start at %d after another open, want 15 still", seq)
	}
	if n := db.Integrity().IntegrityAlerts(); n != 1 {
		t.Fatalf("integrity alerts %d, want the forged record counted", n)
	}
}

// While a process of an earlier release writes to the database (its beats
// do not say macs), MACs wait: its records have none. Once it is gone the
// process holding the checkpoint lease starts them.
func TestMACsWaitForAProcessOfAnEarlierRelease(t *testing.T) {
	ctx := context.Background()
	path := testPath(t)
	if IsPostgres(path) {
		cfg, err := postgres.Config(path)
		if err == nil {
			err = postgres.Migrate(ctx, cfg)
		}
		if err != nil {
			t.Fatal(err)
		}
	} else if err := sqlite.Migrate(ctx, rawConn(t, path), 0); err != nil {
		t.Fatal(err)
	}
	// The release before beats without saying macs.
	old := attack(t, path)
	now := fmtTime(time.Now())
	old.exec(t, `INSERT INTO replicas (id, host, pid, process, version, config_digest, policy_version, started, seen, awake_since, lapse_ms)
		VALUES ('old', 'laptop', 4242, 'guard run', '0.9.0', '', '', ?, ?, ?, 600000)`, now, now, now)
	db, err := Open(ctx, protected(t, path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Append(rec(1, guard.KindRequest)); err != nil {
		t.Fatal(err)
	}
	db.ckpt.startMACs(ctx)
	if seq, _ := macsStart(t, db); seq != 0 {
		t.Fatalf("MACs start at record %d while a process of the release before writes", seq)
	}
	old.exec(t, `DELETE FROM replicas WHERE id = 'old'`)
	db.ing.caughtUp(ctx)
	db.ckpt.startMACs(ctx)
	if seq, reason := macsStart(t, db); seq != 2 || !strings.HasPrefix(reason, "MACs from seq 2:") {
		t.Fatalf("MACs start at record %d (%q) once it is gone, want 2", seq, reason)
	}
	if err := db.ckpt.writeCheckpoint(); err != nil {
		t.Fatal(err)
	}
	if rep, err := db.Verifier().Verify(ctx); err != nil || !rep.OK {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}
