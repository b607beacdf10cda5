package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// retentionStart is when the old records of the retention tests were made.
var retentionStart = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

// retentionLog opens a log at path whose clock reads *now, with calls
// 0..old-1 made at retentionStart and calls old..old+young-1 made 500 days
// later (the odd ones by a caller the front authenticated), and a
// checkpoint over them.
func retentionLog(t *testing.T, path string, now *time.Time, old, young int) *DB {
	t.Helper()
	*now = retentionStart
	db, err := testOpen(context.Background(), Options{Path: path, Durability: "normal", Now: func() time.Time { return *now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for i := range old + young {
		at := retentionStart.Add(time.Duration(i) * time.Minute)
		if i >= old {
			at = at.Add(500 * 24 * time.Hour)
		}
		req, out := rec(i, guard.KindRequest), rec(i, guard.KindOutcome)
		req.Time, out.Time = at, at.Add(time.Second)
		if i%2 == 1 { // a caller the front authenticated
			for _, r := range []*guard.Record{req, out} {
				r.User, r.UserEmail, r.UserGroups = caller.Subject, caller.Email, caller.Groups
			}
		}
		out.Outcome, out.Result = guard.OutcomeOK, fmt.Sprintf(`{"content":[{"type":"text","text":"secret %d"}]}`, i)
		if err := db.Append(req, out); err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 { // a series of checkpoints, each of which must still verify
			db.ing.caughtUp(context.Background())
			if err := db.ckpt.writeCheckpoint(); err != nil {
				t.Fatal(err)
			}
		}
	}
	db.ing.caughtUp(context.Background())
	if err := db.ckpt.writeCheckpoint(); err != nil {
		t.Fatal(err)
	}
	*now = retentionStart.Add(501 * 24 * time.Hour)
	return db
}

// rawConn opens the file without guard, its triggers in place.
func rawConn(t *testing.T, path string) *sql.DB {
	t.Helper()
	r, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func verifyPruned(t *testing.T, db *DB) audit.Report {
	t.Helper()
	rep, err := db.Verifier().Verify(context.Background())
	if err != nil || !rep.OK {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	return rep
}

// Records past the retention are archived, the archive checks offline
// against its checkpoint, and only then do their bodies leave the
// database; the log, every checkpoint signed before and a proof made
// before still verify, and the retention record names the archive.
func TestPruneArchivesThenBlanks(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "guard.db")
	var now time.Time
	db := retentionLog(t, path, &now, 6, 3)
	before, err := db.Verifier().Prove(ctx, "call-2")
	if err != nil {
		t.Fatal(err)
	}
	var kept []audit.KeptCheckpoint
	rows, err := db.r.QueryContext(ctx, `SELECT size, note FROM checkpoints ORDER BY size`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var size int64
		var text string
		if err := rows.Scan(&size, &text); err != nil {
			t.Fatal(err)
		}
		kept = append(kept, audit.KeptCheckpoint{Name: fmt.Sprintf("of %d records", size), Note: []byte(text)})
	}
	rows.Close()
	if len(kept) != 5 {
		t.Fatalf("%d checkpoints before pruning, want 5", len(kept))
	}

	got, err := db.Pruning().Prune(ctx, RetentionOptions{Retention: 400 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].First != 1 || got[0].Last != 12 || got[0].Count != 12 || got[0].Checkpoint != 18 {
		t.Fatalf("pruned: %+v", got)
	}
	p := got[0]
	if filepath.Dir(p.Archive) != filepath.Join(dir, "archive") || !strings.HasPrefix(filepath.Base(p.Archive), "audit-000000000001-000000000012-") {
		t.Fatalf("archive %s", p.Archive)
	}
	b, err := os.ReadFile(p.Archive)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != p.SHA256 {
		t.Fatalf("archive sha256 %s, reported %s", hex.EncodeToString(sum[:]), p.SHA256)
	}
	lines, err := checkFiles(db.signer.Verifier(), []audit.File{{Name: "archive", Data: b}, {Name: "proof", Data: before}})
	if err != nil {
		t.Fatalf("offline check of the archive: %v (%q)", err, lines)
	}
	if !strings.Contains(lines[0], "ok: 12 records (records 1 to 12), each proved in the checkpoint of 18 records") ||
		!strings.Contains(lines[1], "and its contents are those in archive") {
		t.Fatalf("offline check: %q", lines)
	}
	if !strings.Contains(string(b), `secret 0`) {
		t.Fatal("the archive does not hold the bodies")
	}

	// The bodies are gone, the rows and leaves stay.
	var recs []*guard.Record
	if err := db.Reader().Records(ctx, func(r *guard.Record) error { recs = append(recs, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(recs) != 19 {
		t.Fatalf("%d records, want 19 (18 and the retention record)", len(recs))
	}
	for _, r := range recs[:12] {
		if !r.Pruned || audit.HasBody(r) || r.ID == "" || r.CallID == "" || r.Kind == "" || r.Time.IsZero() || r.Hash == "" {
			t.Fatalf("record %d after pruning: %+v", r.Seq, r)
		}
	}
	for _, r := range recs[12:18] {
		if r.Pruned || !audit.HasBody(r) {
			t.Fatalf("a young record was pruned: %+v", r)
		}
	}
	ret := recs[18]
	var d map[string]any
	if err := json.Unmarshal([]byte(ret.Detail), &d); err != nil {
		t.Fatal(err)
	}
	if ret.Kind != guard.KindRetention || ret.Pruned || d["archive"] != filepath.Base(p.Archive) || d["sha256"] != p.SHA256 ||
		d["first"] != 1.0 || d["last"] != 12.0 || d["count"] != 12.0 || ret.ID != p.Record {
		t.Fatalf("retention record: %+v", ret)
	}
	if ret.PrevHash != recs[17].Hash {
		t.Fatal("the retention record is not in the chain")
	}
	if rep := verifyPruned(t, db); rep.Records != 19 {
		t.Fatalf("verify: %+v", rep)
	}
	// A checkpoint signed after the pruning extends the old one, and a
	// whole export with the pruned records still checks.
	if err := db.ckpt.writeCheckpoint(); err != nil {
		t.Fatal(err)
	}
	rep, err := db.Verifier().VerifyWith(ctx, audit.VerifyOptions{Key: db.signer.Verifier(), Kept: kept})
	if err != nil || !rep.OK || rep.Extends != 18 {
		t.Fatalf("verify against the checkpoints kept before pruning: %+v %v", rep, err)
	}
	for _, k := range kept {
		if lines, err := checkFiles(db.signer.Verifier(), []audit.File{{Name: k.Name, Data: k.Note}}); err != nil {
			t.Fatalf("checkpoint %s: %v %q", k.Name, err, lines)
		}
	}
	var whole strings.Builder
	if err := db.Reader().Export(ctx, &whole, ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(whole.String(), `"pruned":true`) || strings.Contains(whole.String(), "secret 0") {
		t.Fatal("the export does not mark pruned records, or holds their bodies")
	}
	if lines, err := checkFiles(db.signer.Verifier(), []audit.File{{Name: "whole", Data: []byte(whole.String())}, {Name: "proof", Data: before}}); err != nil {
		t.Fatalf("whole export after pruning: %v %q", err, lines)
	}
	if pruned, failures, err := db.Pruning().RetentionTotals(ctx); err != nil || pruned != 12 || failures != 0 {
		t.Fatalf("totals: %d pruned, %d failures, %v", pruned, failures, err)
	}
	// Nothing is left to prune: the next round archives nothing.
	if again, err := db.Pruning().Prune(ctx, RetentionOptions{Retention: 400 * 24 * time.Hour}); err != nil || len(again) != 0 {
		t.Fatalf("second round: %+v %v", again, err)
	}
}

// A call is pruned whole: one whose outcome is younger than the cutoff,
// or that a person has still to decide, keeps every record; retention
// records are never pruned; archives are cut at Batch records.
func TestPruneByWholeCalls(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "guard.db")
	var now time.Time
	db := retentionLog(t, path, &now, 5, 0)
	// call-1's outcome comes only now, call-3 waits for a person.
	late := rec(1, guard.KindOutcome)
	late.Time = now.Add(-time.Hour)
	if err := db.Append(late); err != nil {
		t.Fatal(err)
	}
	if _, err := db.w.Exec(`INSERT INTO approvals (id, server, tool, arguments, digest, state, created_at, expires_at, call_id)
		VALUES ('ap-3', 'files', 'write_file', '{}', 'd', 'pending', ?, ?, 'call-3')`, fmtTime(retentionStart), fmtTime(now)); err != nil {
		t.Fatal(err)
	}
	db.ing.caughtUp(ctx)
	if err := db.ckpt.writeCheckpoint(); err != nil {
		t.Fatal(err)
	}
	got, err := db.Pruning().Prune(ctx, RetentionOptions{Retention: 400 * 24 * time.Hour, Batch: 3})
	if err != nil {
		t.Fatal(err)
	}
	// Calls 0, 2 and 4 (records 1-2, 5-6, 9-10), three records an archive.
	if len(got) != 2 || got[0].First != 1 || got[0].Last != 5 || got[0].Count != 3 || got[1].First != 6 || got[1].Last != 10 || got[1].Count != 3 {
		t.Fatalf("pruned: %+v", got)
	}
	pruned := map[string]int{}
	_ = db.Reader().Records(ctx, func(r *guard.Record) error {
		if r.Pruned {
			pruned[r.CallID]++
		}
		return nil
	})
	if len(pruned) != 3 || pruned["call-0"] != 2 || pruned["call-2"] != 2 || pruned["call-4"] != 2 {
		t.Fatalf("pruned calls: %v", pruned)
	}
	verifyPruned(t, db)

	// Once decided and done, and past the retention, they go too, and
	// the retention records stay.
	if _, err := db.w.Exec(`UPDATE approvals SET state = 'denied' WHERE id = 'ap-3'`); err != nil {
		t.Fatal(err)
	}
	if err := db.ckpt.writeCheckpoint(); err != nil {
		t.Fatal(err)
	}
	now = now.Add(500 * 24 * time.Hour)
	got, err = db.Pruning().Prune(ctx, RetentionOptions{Retention: 400 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Count != 5 || got[0].First != 3 || got[0].Last != 11 {
		t.Fatalf("second round: %+v", got)
	}
	var left []string
	_ = db.Reader().Records(ctx, func(r *guard.Record) error {
		if !r.Pruned {
			left = append(left, r.Kind)
		}
		return nil
	})
	if strings.Join(left, " ") != "retention retention retention" {
		t.Fatalf("records left with bodies: %v", left)
	}
	verifyPruned(t, db)
}

// Without the grant, nobody updates a record, not even to blank it; the
// grant covers only checkpointed records and only a blanking; nothing
// deletes a record.
func TestRetentionTriggers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "guard.db")
	var now time.Time
	db := retentionLog(t, path, &now, 3, 0)
	raw := rawConn(t, path)
	blank := strings.Replace(blankBody, "WHERE seq = ?", "WHERE seq = 2", 1)
	for _, tc := range []struct{ name, sql string }{
		{"blank without the grant", blank},
		{"a body changed without the grant", `UPDATE records SET arguments = '{}' WHERE seq = 2`},
		{"a body changed under the grant", `INSERT INTO retention_grant VALUES (1, 1, 6); UPDATE records SET arguments = '{}' WHERE seq = 2`},
		{"an id changed under the grant", `INSERT INTO retention_grant VALUES (1, 1, 6); ` + strings.Replace(blank, "pruned = 1", "pruned = 1, id = 'x'", 1)},
		{"a record outside the grant", `INSERT INTO retention_grant VALUES (1, 1, 1); ` + blank},
		{"a grant beyond the checkpoint", `INSERT INTO retention_grant VALUES (1, 1, 7)`},
		{"a delete", `DELETE FROM records WHERE seq = 2`},
		{"a delete under the grant", `INSERT INTO retention_grant VALUES (1, 1, 6); DELETE FROM records WHERE seq = 2`},
	} {
		tx, err := raw.Begin()
		if err != nil {
			t.Fatal(err)
		}
		_, err = tx.Exec(tc.sql)
		tx.Rollback()
		if err == nil || !strings.Contains(err.Error(), "append-only") && !strings.Contains(err.Error(), "checkpoint covers") {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}
	// The job's own statement, under its grant, is allowed.
	tx, err := raw.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`INSERT INTO retention_grant VALUES (1, 1, 6); ` + blank + `; DELETE FROM retention_grant`); err != nil {
		t.Fatalf("the blanking under the grant: %v", err)
	}
	tx.Rollback()
	verifyPruned(t, db)
}

// With the triggers dropped, as an attacker holding the file would, a
// change to a pruned record or to a record's body, or a body removed
// outside retention, is caught.
func TestVerifyCatchesTamperingAfterPrune(t *testing.T) {
	for _, tc := range []struct{ name, sql, want string }{
		{"a pruned record's hash", `UPDATE records SET hash = (CASE WHEN hash LIKE 'ab%' THEN 'cd' ELSE 'ab' END) || substr(hash, 3) WHERE seq = 3`, "does not follow record 3"},
		{"a pruned record's body put back", `UPDATE records SET arguments = '{"path":"/tmp/x"}' WHERE seq = 3`, "marked as pruned but its row holds a body"},
		{"a pruned record's leaf", `UPDATE tree_hashes SET hash = zeroblob(32) WHERE idx = 3`, "record"},
		{"a kept record's body", `UPDATE records SET arguments = '{"path":"/etc/passwd"}' WHERE seq = 8`, "record 8 (id"},
		{"a body removed outside retention", strings.Replace(blankBody, "WHERE seq = ?", "WHERE seq = 8", 1), "lost its body, but no retention record names it"},
		{"a pruned record's id", `UPDATE records SET id = 'forged' WHERE seq = 2`, "names, 1 to 6, were changed since it archived them"},
		{"a pruned record's time", `UPDATE records SET time = '2024-01-01T00:00:00.000Z' WHERE seq = 5`, "names, 1 to 6, were changed since"},
		{"a retention record's detail", `UPDATE records SET detail = '{}' WHERE kind = 'retention'`, "record 1 (id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "guard.db")
			var now time.Time
			db := retentionLog(t, path, &now, 3, 3)
			if _, err := db.Pruning().Prune(context.Background(), RetentionOptions{Retention: 400 * 24 * time.Hour}); err != nil {
				t.Fatal(err)
			}
			verifyPruned(t, db)
			raw := rawDB(t, path)
			if _, err := raw.Exec(`DROP TRIGGER IF EXISTS tree_hashes_no_update; ` + tc.sql); err != nil {
				t.Fatal(err)
			}
			rep, err := db.Verifier().Verify(context.Background())
			if err != nil || rep.OK || !strings.Contains(rep.Problem, tc.want) {
				t.Fatalf("verify: %+v %v, want it to name %q", rep, err, tc.want)
			}
		})
	}
}

// An archive that cannot be written leaves every body where it was, and
// appends no retention record.
func TestPruneArchiveFailureBlanksNothing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "guard.db")
	var now time.Time
	db := retentionLog(t, path, &now, 3, 0)
	notDir := filepath.Join(dir, "not-a-dir")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ro := filepath.Join(dir, "ro")
	if err := os.Mkdir(ro, 0o500); err != nil {
		t.Fatal(err)
	}
	for _, archive := range []string{notDir, filepath.Join(notDir, "archive"), ro} {
		if (os.Geteuid() == 0 || runtime.GOOS == "windows") && archive == ro {
			continue // root writes into a read-only directory, as anyone does on Windows
		}
		got, err := db.Pruning().Prune(ctx, RetentionOptions{Retention: 400 * 24 * time.Hour, ArchiveDir: archive})
		if err == nil || len(got) != 0 {
			t.Fatalf("archive in %s: %+v %v", archive, got, err)
		}
		last, lerr := db.Pruning().LastRetention(ctx)
		if lerr != nil || last == nil || !strings.Contains(last.Problem, "archive") {
			t.Fatalf("last run: %+v %v", last, lerr)
		}
	}
	n := 0
	_ = db.Reader().Records(ctx, func(r *guard.Record) error {
		if r.Pruned || r.Kind == guard.KindRetention || !audit.HasBody(r) {
			t.Fatalf("record %d after a failed round: %+v", r.Seq, r)
		}
		n++
		return nil
	})
	if n != 6 {
		t.Fatalf("%d records", n)
	}
	if pruned, failures, err := db.Pruning().RetentionTotals(ctx); err != nil || pruned != 0 || failures < 2 {
		t.Fatalf("totals: %d pruned, %d failures, %v", pruned, failures, err)
	}
	verifyPruned(t, db)
}

// Retention is off unless set; processes take turns, once a period; an
// empty log has nothing to prune.
func TestRetentionOffByDefaultAndOncePerPeriod(t *testing.T) {
	ctx := context.Background()
	empty := openDB(t, filepath.Join(t.TempDir(), "empty.db"))
	defer empty.Close()
	if got, err := empty.Pruning().Prune(ctx, RetentionOptions{Retention: time.Hour}); err != nil || got != nil {
		t.Fatalf("an empty log: %+v %v", got, err)
	}
	path := filepath.Join(t.TempDir(), "guard.db")
	var now time.Time
	db := retentionLog(t, path, &now, 3, 0)
	if got, err := db.Pruning().Prune(ctx, RetentionOptions{}); err != nil || got != nil {
		t.Fatalf("retention 0: %+v %v", got, err)
	}
	if got, err := db.Pruning().PruneIfDue(ctx, RetentionOptions{}, time.Hour); err != nil || got != nil {
		t.Fatalf("retention 0, if due: %+v %v", got, err)
	}
	if last, err := db.Pruning().LastRetention(ctx); err != nil || last != nil {
		t.Fatalf("a run with retention off: %+v %v", last, err)
	}
	o := RetentionOptions{Retention: 400 * 24 * time.Hour}
	if got, err := db.Pruning().Prune(ctx, RetentionOptions{Retention: o.Retention, DryRun: true}); err != nil || len(got) != 1 || got[0].Count != 6 || got[0].Archive != "" {
		t.Fatalf("dry run: %+v %v", got, err)
	}
	if last, err := db.Pruning().LastRetention(ctx); err != nil || last != nil {
		t.Fatalf("a dry run was kept: %+v %v", last, err)
	}
	// The long-running processes' job runs a round at once.
	rounds := make(chan []Pruned, 1)
	run, stop := context.WithCancel(ctx)
	go db.Pruning().RunRetention(run, o, time.Hour, func(got []Pruned, err error) {
		if err != nil {
			t.Error(err)
		}
		rounds <- got
	})
	got := <-rounds
	stop()
	if len(got) != 1 || got[0].Count != 6 {
		t.Fatalf("first round: %+v", got)
	}
	// Another old call: another process, or this one again, within the
	// hour runs nothing; after it, a round archives it.
	late := rec(9, guard.KindRequest)
	late.Time = retentionStart.Add(time.Hour)
	if err := db.Append(late); err != nil {
		t.Fatal(err)
	}
	db.ing.caughtUp(ctx)
	if err := db.ckpt.writeCheckpoint(); err != nil {
		t.Fatal(err)
	}
	now = now.Add(30 * time.Minute)
	if got, err := db.Pruning().PruneIfDue(ctx, o, time.Hour); err != nil || got != nil {
		t.Fatalf("again within the period: %+v %v", got, err)
	}
	unlock, ok, err := db.tryLock(ctx, retentionLock) // as another process would
	if err != nil || !ok {
		t.Fatalf("lock: %v %v", ok, err)
	}
	if _, err := db.Pruning().PruneIfDue(ctx, o, 0); !errors.Is(err, ErrRetentionRunning) {
		t.Fatalf("while another process runs the job: %v", err)
	}
	unlock()
	now = now.Add(31 * time.Minute)
	if got, err := db.Pruning().PruneIfDue(ctx, o, time.Hour); err != nil || len(got) != 1 || got[0].Count != 1 || got[0].First != 8 {
		t.Fatalf("a period later: %+v %v", got, err)
	}
	last, err := db.Pruning().LastRetention(ctx)
	if err != nil || last == nil || last.Problem != "" || !last.Time.Equal(now) {
		t.Fatalf("last run: %+v %v", last, err)
	}
}

// A round's archive goes, by default, beside the database, or on
// PostgreSQL, whose database is no file, beside the checkpoint key.
func TestPruneArchivesBesideTheDatabaseOrTheKey(t *testing.T) {
	p := testPath(t)
	var now time.Time
	db := retentionLog(t, p, &now, 3, 1)
	got, err := db.Pruning().Prune(context.Background(), RetentionOptions{Retention: 400 * 24 * time.Hour})
	if err != nil || len(got) != 1 {
		t.Fatalf("prune: %+v %v", got, err)
	}
	want := ArchiveDir(p)
	if db.pg {
		want = filepath.Join(filepath.Dir(db.opts.KeyPath), "archive")
	}
	if filepath.Dir(got[0].Archive) != want {
		t.Fatalf("archive %s, want it in %s", got[0].Archive, want)
	}
	if _, err := os.Stat(got[0].Archive); err != nil {
		t.Fatal(err)
	}
}

// Retention clears what the call index and its text index hold of the
// calls it prunes, in its own transaction: queries no longer find them,
// by their words either, and the index is the one RebuildCallIndex makes
// from the records.
func TestPruneClearsTheCallIndex(t *testing.T) {
	ctx := context.Background()
	var now time.Time
	db := retentionLog(t, testPath(t), &now, 6, 3)
	if ids := queryIDs(t, db, Filter{Text: "secret"}); len(ids) != 9 {
		t.Fatalf("before: the text index finds %v", ids)
	}
	if _, err := db.Pruning().Prune(ctx, RetentionOptions{Retention: 400 * 24 * time.Hour, ArchiveDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	snapshot := func() string {
		t.Helper()
		rows, err := db.r.QueryContext(ctx, `SELECT k, call_id, req_seq, out_seq, dec_seq, server, tool,
			client, session, decision, decided_by, outcome, approval FROM call_index ORDER BY k`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var index strings.Builder
		for rows.Next() {
			var k, req, out, dec int64
			var s [9]string
			if err := rows.Scan(&k, &s[0], &req, &out, &dec, &s[1], &s[2], &s[3], &s[4], &s[5], &s[6], &s[7], &s[8]); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(&index, k, req, out, dec, s)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(index.String(), queryIDs(t, db, Filter{}), queryIDs(t, db, Filter{Text: "secret"}),
			queryIDs(t, db, Filter{Text: "secret 2"}), queryIDs(t, db, Filter{Text: "secret 7"}))
	}
	want := "[call-8 call-7 call-6]"
	if ids := fmt.Sprint(queryIDs(t, db, Filter{})); ids != want {
		t.Fatalf("calls after pruning: %s, want %s", ids, want)
	}
	if ids := fmt.Sprint(queryIDs(t, db, Filter{Text: "secret"})); ids != want {
		t.Fatalf("the text index after pruning finds %s, want %s", ids, want)
	}
	if ids := queryIDs(t, db, Filter{Text: "secret 2"}); len(ids) != 0 {
		t.Fatalf("a pruned call's words are found: %v", ids)
	}
	// The text index itself holds no word of theirs (a query reads it
	// through the call index, which would hide them).
	match := `SELECT count(*) FROM call_text WHERE call_text MATCH ?`
	if db.pg {
		match = `SELECT count(*) FROM call_text WHERE words @@ to_tsquery('simple', ?)`
	}
	for _, w := range []string{"secret", "path", "content"} { // from results and arguments
		var n int
		if err := db.r.QueryRowContext(ctx, match, w).Scan(&n); err != nil || n != 3 {
			t.Fatalf("the text index holds %q for %d calls, want 3 (%v)", w, n, err)
		}
	}
	if !db.pg {
		if _, err := db.w.ExecContext(ctx, `INSERT INTO call_text (call_text, rank) VALUES ('integrity-check', 0)`); err != nil {
			t.Fatalf("the text index after pruning: %v", err)
		}
	}
	kept := snapshot()
	if err := db.CallIndex().RebuildCallIndex(ctx); err != nil {
		t.Fatal(err)
	}
	if rebuilt := snapshot(); rebuilt != kept {
		t.Fatalf("the index made again from the records:\n%s\nwant\n%s", rebuilt, kept)
	}
}

// A database of the version before retention (no pruned column) is read
// by the read-only commands as it is, and a writable open upgrades it.
func TestReadOnlyBeforeRetention(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "guard.db")
	db := openDB(t, path)
	for i := range 3 {
		if err := db.Append(rec(i, guard.KindRequest), rec(i, guard.KindOutcome)); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	if _, err := rawDB(t, path).Exec(dropUserColumns(t) + `DROP INDEX records_retention; DROP TABLE retention_grant; DROP TABLE retention_runs;
		ALTER TABLE records DROP COLUMN pruned; DROP TABLE learned_rules; DROP TABLE replicas; DROP TABLE rounds;
		DROP TABLE approval_reviews; ALTER TABLE approvals DROP COLUMN user_subject; ALTER TABLE approvals DROP COLUMN user_email;
		ALTER TABLE approvals DROP COLUMN user_groups; ALTER TABLE approvals DROP COLUMN approvers; ALTER TABLE approvals DROP COLUMN reviews;
		DROP TABLE passkeys; DROP TABLE passkey_enrolments;
		ALTER TABLE approvals DROP COLUMN scope; ALTER TABLE approvals DROP COLUMN session_ended;
		DELETE FROM schema_migrations WHERE version >= 12`); err != nil {
		t.Fatal(err)
	}
	ro, err := OpenReadOnly(ctx, Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := ro.Verifier().Verify(ctx); err != nil || !rep.OK || rep.Records != 6 {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	var export strings.Builder
	if err := ro.Reader().Export(ctx, &export, ExportOptions{}); err != nil || strings.Count(export.String(), "\n") != 7 {
		t.Fatalf("export: %v\n%s", err, export.String())
	}
	if err := ro.Reader().QueryRecords(ctx, guard.KindDecision, Filter{}, func(*guard.Record) error { return nil }); err != nil {
		t.Fatalf("records of a kind: %v", err)
	}
	ro.Close()
	db = openDB(t, path)
	defer db.Close()
	verifyPruned(t, db)
	raw := rawConn(t, path)
	if _, err := raw.Exec(`UPDATE records SET tool = 'x' WHERE seq = 1`); err == nil || !strings.Contains(err.Error(), "append-only") {
		t.Fatalf("an update after the upgrade: %v", err)
	}
}

// A report over a period retention pruned counts its calls as archived,
// not as calls of an unnamed server.
func TestReportCountsPrunedCallsAsArchived(t *testing.T) {
	ctx := context.Background()
	var now time.Time
	db := retentionLog(t, filepath.Join(t.TempDir(), "guard.db"), &now, 6, 3)
	if _, err := db.Pruning().Prune(ctx, RetentionOptions{Retention: 400 * 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	a, err := db.Reader().Activity(ctx, retentionStart.Add(-time.Hour), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Archived != 6 || a.Calls != 3 {
		t.Fatalf("archived %d, calls %d; want 6 and 3", a.Archived, a.Calls)
	}
	for _, tl := range a.Tools {
		if tl.Server == "" {
			t.Fatalf("a pruned call is counted under an empty server: %+v", a.Tools)
		}
	}
}

// forgeAppend appends r to the log as someone without the checkpoint key
// would: its seq, link and hash, and its leaf and the tree hashes it
// completes, all computed from the database.
func forgeAppend(t *testing.T, raw rawLog, r *guard.Record) {
	t.Helper()
	forgeRecord(t, raw, r)
	forgeLeaf(t, raw, r)
}

// rawLog is write access to a database without guard: an SQLite file's
// *sql.DB, or an attacker on either engine.
type rawLog interface {
	sqlQueryer
	Exec(q string, args ...any) (sql.Result, error)
	QueryRow(q string, args ...any) *sql.Row
}

// forgeRecord appends r to the chain: its seq, link and hash computed
// from the database, and no MAC (its key is the checkpoint key's).
func forgeRecord(t *testing.T, raw rawLog, r *guard.Record) {
	t.Helper()
	if err := raw.QueryRow(`SELECT seq, hash FROM records ORDER BY seq DESC LIMIT 1`).Scan(&r.Seq, &r.PrevHash); err != nil {
		t.Fatal(err)
	}
	r.Seq++
	if r.ID == "" {
		r.ID = guard.NewID()
	}
	r.Hash = HashRecord(r)
	if _, err := raw.Exec(insertRecord, r.Seq, r.ID, r.CallID, r.Kind, fmtTime(r.Time), r.Session, r.Client, r.Protocol, r.Server,
		r.Direction, r.Method, r.Tool, r.Arguments, r.Pin, r.Decision, r.DecidedBy, r.Reason, r.Outcome, r.Result,
		r.RequestSize, r.ResponseSize, r.DurationMS, r.Detail, r.Approval, r.PrevHash, r.Hash, r.User, r.UserEmail,
		audit.GroupsText(r.UserGroups), nil); err != nil {
		t.Fatal(err)
	}
}

// forgeLeaf adds the record forgeRecord appended to the tree: its leaf
// and the tree hashes it completes.
func forgeLeaf(t *testing.T, raw rawLog, r *guard.Record) {
	t.Helper()
	hs, err := tlog.StoredHashes(r.Seq-1, audit.AppendCanonical(nil, r), sqlHashReader(context.Background(), raw))
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range hs {
		if _, err := raw.Exec(insertTreeHash, tlog.StoredHashIndex(0, r.Seq-1)+int64(i), h[:]); err != nil {
			t.Fatal(err)
		}
	}
}

// Retention records are signed by the checkpoint key: a retention record
// appended by someone holding only the file, naming a record whose body
// they then remove, does not account for it, against the pinned key and
// a checkpoint kept before; nor does a real one whose signature is
// stripped. The report counts the records pruned.
func TestVerifyRefusesAForgedRetentionRecord(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "guard.db")
	var now time.Time
	db := retentionLog(t, path, &now, 3, 3)
	if _, err := db.Pruning().Prune(ctx, RetentionOptions{Retention: 400 * 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	kept, err := db.LatestCheckpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	o := audit.VerifyOptions{Key: db.signer.Verifier(), Kept: []audit.KeptCheckpoint{{Name: "kept", Note: kept.Note}}}
	rep, err := db.Verifier().VerifyWith(ctx, o)
	if err != nil || !rep.OK || rep.Pruned != 6 || rep.Records != 13 {
		t.Fatalf("verify after pruning: %+v %v", rep, err)
	}
	var ret guard.Record
	if err := db.r.QueryRowContext(ctx, `SELECT detail FROM records WHERE kind = 'retention'`).Scan(&ret.Detail); err != nil {
		t.Fatal(err)
	}
	var d audit.RetentionDetail
	if err := json.Unmarshal([]byte(ret.Detail), &d); err != nil || !d.SignedBy(db.signer.Verifier()) {
		t.Fatalf("the retention record is not signed: %v %s", err, ret.Detail)
	}

	for _, tc := range []struct {
		name      string
		signature func(db *DB, d *audit.RetentionDetail)
		want      string
	}{
		{"unsigned", func(_ *DB, d *audit.RetentionDetail) { d.Signature = "" }, "no retention record signed by the checkpoint key"},
		{"a real record's signature", func(*DB, *audit.RetentionDetail) {}, "no retention record signed by the checkpoint key"},
		// Signed, as by a job whose clock was wrong: its record was not
		// past the cutoff the record states.
		{"signed, a record younger than its cutoff", func(db *DB, d *audit.RetentionDetail) {
			d.Before = fmtTime(retentionStart)
			sig, err := note.Sign(&note.Note{Text: d.Statement(db.signer.Verifier().Name())}, db.signer.NoteSigner())
			if err != nil {
				t.Fatal(err)
			}
			d.Signature = string(sig)
		}, "it was not past the retention of the retention record that names it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "guard.db")
			var now time.Time
			db := retentionLog(t, p, &now, 3, 3)
			if _, err := db.Pruning().Prune(ctx, RetentionOptions{Retention: 400 * 24 * time.Hour}); err != nil {
				t.Fatal(err)
			}
			kept, err := db.LatestCheckpoint(ctx)
			if err != nil {
				t.Fatal(err)
			}
			raw := rawDB(t, p)
			// A record of the young call 4, whose body is to go.
			const victim = 9
			sum, err := db.Pruning().keptSum(ctx, []int64{victim})
			if err != nil {
				t.Fatal(err)
			}
			var real audit.RetentionDetail
			var text string
			if err := raw.QueryRow(`SELECT detail FROM records WHERE kind = 'retention'`).Scan(&text); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(text), &real); err != nil {
				t.Fatal(err)
			}
			f := audit.RetentionDetail{First: victim, Last: victim, Count: 1, Records: [][2]int64{{victim, victim}}, KeptSHA256: sum,
				Archive: "audit-forged.jsonl", SHA256: strings.Repeat("0", 64), Checkpoint: kept.Size, Before: fmtTime(now), Retention: "1d",
				Signature: real.Signature}
			tc.signature(db, &f)
			b, err := json.Marshal(f)
			if err != nil {
				t.Fatal(err)
			}
			forgeAppend(t, raw, &guard.Record{Kind: guard.KindRetention, Decision: "pruned", Detail: string(b), Time: now})
			if _, err := raw.Exec(strings.Replace(blankBody, "WHERE seq = ?", fmt.Sprintf("WHERE seq = %d", victim), 1)); err != nil {
				t.Fatal(err)
			}
			rep, err := db.Verifier().VerifyWith(ctx, audit.VerifyOptions{Key: db.signer.Verifier(), Kept: []audit.KeptCheckpoint{{Name: "kept", Note: kept.Note}}})
			if err != nil || rep.OK || !strings.Contains(rep.Problem, "record 9 (id") || !strings.Contains(rep.Problem, tc.want) {
				t.Fatalf("verify: %+v %v", rep, err)
			}
		})
	}
}
