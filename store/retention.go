package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
	"github.com/guard-mcp/guard/store/postgres"
	"github.com/guard-mcp/guard/store/sqlite"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// Retention (audit.retention) is the one removal the audit log allows: the
// body of a record past it leaves the database once an archive holds it,
// and its row (seq, id, call_id, kind, time, prev_hash, hash) and its leaf
// in the tree stay, so that the chain, the tree, every checkpoint and
// every proof still verify. A round, by one process at a time:
//
//  1. choose the records: older than the retention, covered by the latest
//     checkpoint (their proofs stay checkable against it), by whole calls
//     (a call's records go together, once all of them qualify), never a
//     call a person has still to decide (a pending approval), never a
//     retention record (they name what was removed, for Verify);
//  2. write the archive, an export of those records with that checkpoint
//     and each record's proof, fsync'd with its directory, and check it
//     again as guard audit check would, from the file;
//  3. append the retention record, naming the records, the archive and
//     its SHA-256, and wait until it is in the database: a body never
//     leaves without a record that says where it went;
//  4. remove the bodies in one transaction that holds the grant the
//     update trigger asks for (migration 0012).
//
// A failure before step 4 removes nothing; one in step 4 leaves the
// bodies, which a later round archives again.

// retentionLock is the suffix of the file lock a process holds while it
// runs the retention job: the others skip that round.
const retentionLock = ".retention.lock"

// ArchiveDir is where the retention job writes archives by default:
// archive/ beside the database.
func ArchiveDir(dbPath string) string { return filepath.Join(filepath.Dir(dbPath), "archive") }

// RetentionOptions configure Prune.
type RetentionOptions struct {
	// Retention is how long a record keeps its body (0: nothing is
	// removed).
	Retention time.Duration
	// ArchiveDir is where archives are written ("": ArchiveDir).
	ArchiveDir string
	// Batch is the most records one archive holds, and one transaction
	// blanks (default 20000): a round makes as many as it needs.
	Batch int
	// DryRun chooses the records and writes nothing.
	DryRun bool
}

// Pruned is what one archive of a retention round holds.
type Pruned struct {
	First, Last int64  // the first and last record archived
	Count       int64  // how many records lost their bodies
	Archive     string // the archive file's path ("" in a dry run)
	SHA256      string // of the archive file, hex
	Record      string // the id of the retention record
	Checkpoint  int64  // the size of the checkpoint the archive verifies against
}

// Prune runs one retention round: it archives and blanks every record
// past the retention (see above), an archive per o.Batch records, and
// returns what each archive holds. It stops at the first failure, with
// what it did until then.
func (rn Pruning) Prune(ctx context.Context, o RetentionOptions) ([]Pruned, error) {
	if o.Retention <= 0 {
		return nil, nil
	}
	if !rn.db.writable && !o.DryRun {
		return nil, fmt.Errorf("retention: %w", errReadOnly)
	}
	if o.ArchiveDir == "" {
		o.ArchiveDir = rn.archiveDirDefault()
	}
	if o.Batch <= 0 {
		o.Batch = 20000
	}
	rn.db.ing.caughtUp(ctx)
	if err := rn.db.completeIndex(ctx, 0); err != nil {
		return nil, fmt.Errorf("retention: %w", err)
	}
	var kept int
	if err := rn.db.r.QueryRowContext(ctx, `SELECT count(*) FROM checkpoints`).Scan(&kept); err != nil {
		return nil, fmt.Errorf("retention: %w", err)
	}
	if kept == 0 {
		return nil, nil // no record is in a checkpoint yet
	}
	c, err := rn.db.LatestCheckpoint(ctx)
	if err != nil {
		return nil, fmt.Errorf("retention: %w", err)
	}
	cutoff := rn.db.opts.Now().Add(-o.Retention)
	from, err := rn.retentionResume(ctx)
	if err != nil {
		return nil, err
	}
	var out []Pruned
	held := int64(0) // the first record held back this round
	resume := func(next int64) int64 {
		if held > 0 {
			return min(held, next)
		}
		return next
	}
	for {
		sel, err := rn.choosePrunable(ctx, from, c.Size, cutoff, o.Batch)
		if err != nil {
			return out, err
		}
		if held == 0 {
			held = sel.held
		}
		if len(sel.seqs) == 0 {
			if !o.DryRun {
				err = rn.keepRun(ctx, nil, resume(sel.next), "")
			}
			return out, err
		}
		p := Pruned{First: sel.seqs[0], Last: sel.seqs[len(sel.seqs)-1], Count: int64(len(sel.seqs)), Checkpoint: c.Size}
		if o.DryRun {
			out = append(out, p)
			from = sel.next
			continue
		}
		if err := rn.pruneBatch(ctx, o, c, cutoff, sel.seqs, &p); err != nil {
			_ = rn.keepRun(ctx, nil, resume(from), err.Error())
			return out, err
		}
		out = append(out, p)
		if err := rn.keepRun(ctx, &p, resume(sel.next), ""); err != nil {
			return out, err
		}
		from = sel.next
	}
}

// pruneBatch archives, records and blanks the records seqs (steps 2 to 4).
func (rn Pruning) pruneBatch(ctx context.Context, o RetentionOptions, c *audit.Checkpoint, cutoff time.Time, seqs []int64, p *Pruned) error {
	path, sum, err := rn.writeArchive(ctx, o.ArchiveDir, c, seqs)
	if err != nil {
		return fmt.Errorf("retention: archive of records %d to %d: %w", p.First, p.Last, err)
	}
	p.Archive, p.SHA256 = path, sum
	kept, err := rn.keptSum(ctx, seqs)
	if err != nil {
		return fmt.Errorf("retention: records %d to %d: %w", p.First, p.Last, err)
	}
	d := audit.RetentionDetail{First: p.First, Last: p.Last, Count: p.Count, Records: audit.Spans(seqs), KeptSHA256: kept,
		Archive: filepath.Base(path), SHA256: sum, Checkpoint: c.Size, Before: fmtTime(cutoff), Retention: days(o.Retention)}
	// The checkpoint key signs what the record says: whoever can append
	// to the log without the key cannot name records retention did not
	// prune.
	if err := d.Sign(rn.db.signer); err != nil {
		return fmt.Errorf("retention: sign the record of records %d to %d: %w", p.First, p.Last, err)
	}
	text, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("retention: %w", err)
	}
	rec := &guard.Record{Kind: guard.KindRetention, Decision: "pruned", Detail: string(text),
		Reason: fmt.Sprintf("the bodies of %d records from %d to %d, past retention (%s), were archived in %s and removed from the database",
			p.Count, p.First, p.Last, days(o.Retention), filepath.Base(path))}
	if err := rn.db.Append(rec); err != nil {
		return fmt.Errorf("retention: the record of records %d to %d: %w", p.First, p.Last, err)
	}
	p.Record = rec.ID
	// The record is in the database before any body leaves it: Verify
	// never sees a pruned record that no retention record names.
	bg := context.WithoutCancel(ctx)
	rn.db.ing.caughtUp(bg)
	if err := rn.db.completeIndex(bg, p.Last); err != nil {
		return fmt.Errorf("retention: records %d to %d keep their bodies: %w", p.First, p.Last, err)
	}
	var n int
	if err := rn.db.r.QueryRowContext(bg, `SELECT count(*) FROM records`+indexedBy(rn.db.pg, "records_retention")+`
		WHERE kind = 'retention' AND id = ?`, rec.ID).Scan(&n); err != nil || n == 0 {
		return fmt.Errorf("retention: records %d to %d keep their bodies: their record %s is not in the database yet (%v)", p.First, p.Last, rec.ID, err)
	}
	if err := rn.blank(bg, seqs); err != nil {
		return fmt.Errorf("retention: records %d to %d keep their bodies (recorded in %s): %w", p.First, p.Last, rec.ID, err)
	}
	rn.db.opts.Logger.Info("audit records past retention archived and removed from the database",
		"first", p.First, "last", p.Last, "records", p.Count, "archive", path, "sha256", sum)
	return nil
}

// days writes a retention as the configuration does: 400d, or 36h.
func days(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	return d.String()
}

// keptSum is the kept_sha256 of the records seqs (audit.KeptLine).
func (rn Pruning) keptSum(ctx context.Context, seqs []int64) (string, error) {
	rows, err := rn.db.r.QueryContext(ctx, `SELECT seq, id, call_id, kind, time, hash FROM records
		WHERE seq >= ? AND seq <= ? ORDER BY seq`, seqs[0], seqs[len(seqs)-1])
	if err != nil {
		return "", err
	}
	defer rows.Close()
	h := sha256.New()
	var b []byte
	i := 0
	for rows.Next() {
		var r guard.Record
		var at string
		if err := rows.Scan(&r.Seq, &r.ID, &r.CallID, &r.Kind, &at, &r.Hash); err != nil {
			return "", err
		}
		if i == len(seqs) || seqs[i] != r.Seq {
			continue
		}
		i++
		r.Time = parseTime(at)
		b = audit.KeptLine(b[:0], &r)
		h.Write(b)
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	if i != len(seqs) {
		return "", fmt.Errorf("%d of %d records found", i, len(seqs))
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// selection is what choosePrunable found.
type selection struct {
	seqs []int64 // the records to prune, in order
	next int64   // the first record not looked at
	held int64   // the first record held back (its call is not done, or not past the cutoff), or 0
}

// choosePrunable chooses up to batch records from seq from on (step 1).
func (rn Pruning) choosePrunable(ctx context.Context, from, size int64, cutoff time.Time, batch int) (selection, error) {
	sel := selection{next: from}
	before := fmtTime(cutoff)
	// The newest record before the cutoff, by the time index: nothing
	// after it is read. Times follow seq but for the clocks of several
	// processes; a record behind that one in time but after it in seq
	// waits for a round when a later one is past the cutoff.
	var upto int64
	err := rn.db.r.QueryRowContext(ctx, `SELECT seq FROM records WHERE time < ? ORDER BY time DESC LIMIT 1`, before).Scan(&upto)
	if errors.Is(err, sql.ErrNoRows) {
		return sel, nil
	}
	if err != nil {
		return sel, fmt.Errorf("retention: %w", err)
	}
	last := min(upto, size)
	if last < from {
		return sel, nil
	}
	sel.next = last + 1
	// Retention records stay, and so does the record MACs start at
	// (mac.go): verify reads both to know what the rest must be.
	rows, err := rn.db.r.QueryContext(ctx, `SELECT seq, call_id, time FROM records
		WHERE seq >= ? AND seq <= ? AND pruned = 0 AND kind != ? AND NOT (kind = ? AND decision = ?) ORDER BY seq`,
		from, last, guard.KindRetention, guard.KindLifecycle, audit.LifecycleMACs)
	if err != nil {
		return sel, fmt.Errorf("retention: %w", err)
	}
	defer rows.Close()
	whole := map[string]bool{} // call id → all of its records may go
	for rows.Next() {
		var seq int64
		var call, at string
		if err := rows.Scan(&seq, &call, &at); err != nil {
			return sel, fmt.Errorf("retention: %w", err)
		}
		ok := at < before
		if ok {
			w, seen := whole[call]
			if !seen {
				if w, err = rn.callPrunable(ctx, call, size, before); err != nil {
					return sel, err
				}
				whole[call] = w
			}
			ok = w
		}
		if !ok {
			if sel.held == 0 {
				sel.held = seq
			}
			continue
		}
		if len(sel.seqs) == batch {
			sel.next = seq
			break
		}
		sel.seqs = append(sel.seqs, seq)
	}
	if err := rows.Err(); err != nil {
		return sel, fmt.Errorf("retention: %w", err)
	}
	return sel, nil
}

// callPrunable reports whether every record of a call is past the cutoff
// and in the checkpoint of size records, and no approval of it is pending.
func (rn Pruning) callPrunable(ctx context.Context, callID string, size int64, before string) (bool, error) {
	var n int64
	if err := rn.db.r.QueryRowContext(ctx, `SELECT count(*) FROM records WHERE call_id = ? AND (time >= ? OR seq > ?)`,
		callID, before, size).Scan(&n); err != nil {
		return false, fmt.Errorf("retention: %w", err)
	}
	if n > 0 {
		return false, nil
	}
	if err := rn.db.r.QueryRowContext(ctx, `SELECT count(*) FROM approvals WHERE state = ? AND (call_id = ? OR id = ?)`,
		guard.ApprovalPending, callID, callID).Scan(&n); err != nil {
		return false, fmt.Errorf("retention: %w", err)
	}
	return n == 0, nil
}

// writeArchive writes the records seqs, with the checkpoint c and their
// proofs, to a new file in dir, synced with the directory, checks the
// file as guard audit check would, and returns its path and SHA-256.
func (rn Pruning) writeArchive(ctx context.Context, dir string, c *audit.Checkpoint, seqs []int64) (string, string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	first, last := seqs[0], seqs[len(seqs)-1]
	name := fmt.Sprintf("audit-%012d-%012d-%s.jsonl", first, last, rn.db.opts.Now().UTC().Format("20060102T150405Z"))
	path := filepath.Join(dir, name)
	tmp, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return "", "", err
	}
	defer os.Remove(tmp.Name())
	want := make(map[int64]bool, len(seqs))
	for _, s := range seqs {
		want[s] = true
	}
	h := sha256.New()
	err = rn.db.Reader().exportRecords(ctx, io.MultiWriter(tmp, h), "jsonl", c, false,
		selectRecord+` WHERE seq >= ? AND seq <= ? ORDER BY seq`, []any{first, last}, func(seq int64) bool { return want[seq] })
	serr := tmp.Sync()
	cerr := tmp.Close()
	if err := errors.Join(err, serr, cerr); err != nil {
		return "", "", err
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		return "", "", err
	}
	if err := sqlite.SyncDir(dir); err != nil {
		return "", "", err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if err := rn.checkArchive(path, sum, c, seqs); err != nil {
		return "", "", fmt.Errorf("the archive %s does not verify: %w", path, err)
	}
	return path, sum, nil
}

// checkArchive reads an archive back and checks it offline against the
// log's key: every record's hashes, its proof in the checkpoint c, and
// that it holds exactly the records seqs.
func (rn Pruning) checkArchive(path, sum string, c *audit.Checkpoint, seqs []int64) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if s := sha256.Sum256(b); hex.EncodeToString(s[:]) != sum {
		return errors.New("it is not the file written")
	}
	if !bytes.Contains(b[:bytes.IndexByte(b, '\n')+1], []byte(fmt.Sprintf(`"size":%d,`, c.Size))) {
		return fmt.Errorf("it is not against the checkpoint of %d records", c.Size)
	}
	n := 0
	var fs audit.Findings
	if _, err := audit.CheckExport(rn.db.signer.Verifier(), &fs, path, b, func(int64, string, tlog.Hash) { n++ }); err != nil {
		return err
	}
	if len(fs.Unverifiable) > 0 {
		return errors.New(fs.Why())
	}
	if n != len(seqs) {
		return fmt.Errorf("it holds %d records, not %d", n, len(seqs))
	}
	return nil
}

// blankBody is the statement that removes a record's body (the update
// trigger allows it only under the grant).
const blankBody = `UPDATE records SET session = '', client = '', protocol = '', server = '', direction = '',
 method = '', tool = '', arguments = '', pin = '', decision = '', decided_by = '', reason = '', outcome = '',
 result = '', detail = '', approval = '', request_size = 0, response_size = 0, duration_ms = 0,
 user_subject = '', user_email = '', user_groups = '', pruned = 1 WHERE seq = ?`

// blank removes the bodies of the records seqs, and what the database
// derived from them, in one transaction that holds the grant (step 4).
func (rn Pruning) blank(ctx context.Context, seqs []int64) error {
	tx, err := rn.db.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	// A grant is never committed; one left by someone else goes.
	if _, err := tx.ExecContext(ctx, `DELETE FROM retention_grant`); err != nil {
		return fmt.Errorf("grant: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO retention_grant (id, first_seq, last_seq) VALUES (1, ?, ?)`,
		seqs[0], seqs[len(seqs)-1]); err != nil {
		return fmt.Errorf("grant: %w", err)
	}
	if err := clearDerived(ctx, tx, seqs, rn.db.pg); err != nil {
		return err
	}
	st, err := tx.PrepareContext(ctx, blankBody)
	if err != nil {
		return err
	}
	defer st.Close()
	for _, s := range seqs {
		if _, err := st.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("record %d: %w", s, err)
		}
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM retention_grant`); err != nil {
		return fmt.Errorf("grant: %w", err)
	}
	return tx.Commit()
}

// clearDerived removes, inside the retention job's transaction and
// before the bodies are blanked, what the database derived from the
// bodies of the records seqs: the call index's rows of their calls
// (server, tool, client, session, decision: body fields) and the words
// of their arguments and results in the text index (migration 0009). The
// text index is contentless: a row is removed with the text it was made
// of, its request's arguments and its latest outcome's result, still in
// the records until the transaction blanks them. A call goes whole (see
// choosePrunable): its first request is among seqs exactly when the call
// is. On PostgreSQL (pg) a call's words are a row of their own, removed
// by its key.
func clearDerived(ctx context.Context, tx *sql.Tx, seqs []int64, pg bool) error {
	want := make(map[int64]bool, len(seqs))
	for _, s := range seqs {
		want[s] = true
	}
	rows, err := tx.QueryContext(ctx, `SELECT c.k, c.req_seq, c.out_seq, q.arguments, coalesce(o.result, '')
		FROM call_index c JOIN records q ON q.seq = c.req_seq LEFT JOIN records o ON o.seq = c.out_seq
		WHERE c.call_id IN (SELECT call_id FROM records WHERE seq >= ? AND seq <= ? AND kind = 'request')`,
		seqs[0], seqs[len(seqs)-1])
	if err != nil {
		return fmt.Errorf("call index: %w", err)
	}
	type row struct {
		k            int64
		args, result string
	}
	var gone []row
	for rows.Next() {
		var r row
		var req, out int64
		if err := rows.Scan(&r.k, &req, &out, &r.args, &r.result); err != nil {
			rows.Close()
			return fmt.Errorf("call index: %w", err)
		}
		if want[req] {
			gone = append(gone, r)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("call index: %w", err)
	}
	delText := deleteText
	if pg {
		delText = pgDeleteText
		// A writer of these calls' rows (pgindex.go) that began
		// before finishes first; one that begins after reads their
		// records pruned, and writes no row.
		ks := make([]int64, len(gone))
		for i, r := range gone {
			ks[i] = r.k
		}
		q, args := postgres.LockCalls(ks)
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("call index: %w", err)
		}
	}
	for _, r := range gone {
		if r.args != "" || r.result != "" {
			if _, err := tx.ExecContext(ctx, delText, r.k, r.args, r.result); err != nil {
				return fmt.Errorf("text index: call %d: %w", r.k, err)
			}
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM call_index WHERE k = ?`, r.k); err != nil {
			return fmt.Errorf("call index: call %d: %w", r.k, err)
		}
	}
	return nil
}

// Retention is one run of the retention job, as LastRetention reports it.
type Retention struct {
	Time    time.Time
	Pruned  Pruned // the last archive it wrote, if any
	Problem string // why it stopped, or ""
}

// LastRetention returns the latest run of the retention job by any
// process on the database, or nil when there was none.
func (rn Pruning) LastRetention(ctx context.Context) (*Retention, error) {
	var r Retention
	var at string
	err := rn.db.r.QueryRowContext(ctx, `SELECT time, first, last, pruned, archive, sha256, record, problem
		FROM retention_runs ORDER BY id DESC LIMIT 1`).Scan(&at, &r.Pruned.First, &r.Pruned.Last, &r.Pruned.Count,
		&r.Pruned.Archive, &r.Pruned.SHA256, &r.Pruned.Record, &r.Problem)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("last retention: %w", err)
	}
	r.Time = parseTime(at)
	return &r, nil
}

// RetentionTotals are, over every run of the retention job by any process
// on the database, how many records lost their bodies and how many runs
// failed: counters an alert can watch.
func (rn Pruning) RetentionTotals(ctx context.Context) (pruned, failures int64, err error) {
	if err := rn.db.r.QueryRowContext(ctx, `SELECT coalesce(sum(pruned), 0), count(*) FILTER (WHERE problem != '')
		FROM retention_runs`).Scan(&pruned, &failures); err != nil {
		return 0, 0, fmt.Errorf("retention totals: %w", err)
	}
	return pruned, failures, nil
}

// retentionResume is where the next round starts.
func (rn Pruning) retentionResume(ctx context.Context) (int64, error) {
	var from int64 = 1
	err := rn.db.r.QueryRowContext(ctx, `SELECT resume FROM retention_runs ORDER BY id DESC LIMIT 1`).Scan(&from)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("retention: %w", err)
	}
	return max(from, 1), nil
}

// keepRun keeps a run (an archive it wrote, or nil) for LastRetention and
// the next round.
func (rn Pruning) keepRun(ctx context.Context, p *Pruned, resume int64, problem string) error {
	if p == nil {
		p = &Pruned{}
	}
	if _, err := rn.db.w.ExecContext(context.WithoutCancel(ctx), `INSERT INTO retention_runs
		(time, first, last, pruned, archive, sha256, record, resume, problem) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		fmtTime(rn.db.opts.Now()), p.First, p.Last, p.Count, p.Archive, p.SHA256, p.Record, resume, problem); err != nil {
		return fmt.Errorf("retention: keep the run: %w", err)
	}
	return nil
}

// ErrRetentionRunning is PruneIfDue's error when another process runs
// the retention job on the database.
var ErrRetentionRunning = errors.New("retention: another guard process is running the retention job on this database")

// PruneIfDue runs a retention round (Prune) unless a process on the
// database did within every (0: it is always due); processes sharing the
// database take turns: one that finds another running the job skips
// (ErrRetentionRunning). It returns what the round archived.
func (rn Pruning) PruneIfDue(ctx context.Context, o RetentionOptions, every time.Duration) ([]Pruned, error) {
	if o.Retention <= 0 {
		return nil, nil
	}
	unlock, ok, err := rn.db.tryLock(ctx, retentionLock)
	if err != nil {
		return nil, fmt.Errorf("retention: %w", err)
	}
	if !ok {
		return nil, ErrRetentionRunning
	}
	defer unlock()
	last, err := rn.LastRetention(ctx)
	if err != nil {
		return nil, err
	}
	if last != nil && every > 0 && rn.db.opts.Now().Sub(last.Time) < every {
		return nil, nil
	}
	return rn.Prune(ctx, o)
}

// RetentionEvery is how often the long-running processes run the
// retention job.
const RetentionEvery = time.Hour

// RunRetention runs the retention job at start and then every period
// until ctx ends, in turn with the other processes on the database (see
// PruneIfDue). Nothing runs when o.Retention is 0. done, when set, is
// given what each round of this process archived, and its error.
func (rn Pruning) RunRetention(ctx context.Context, o RetentionOptions, every time.Duration, done func([]Pruned, error)) {
	if o.Retention <= 0 || every <= 0 {
		return
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		got, err := rn.PruneIfDue(ctx, o, every)
		if err != nil && ctx.Err() == nil && !errors.Is(err, ErrRetentionRunning) {
			rn.db.opts.Logger.Error("audit retention", "err", err)
		}
		if done != nil {
			done(got, err)
		}
		t.Reset(every)
	}
}

// Pruning prunes the audit log's old records, archiving them first, and
// tells how the last run went; DB.Pruning returns it.
type Pruning struct{ db *DB }

// Pruning returns the audit log's retention.
func (db *DB) Pruning() Pruning { return Pruning{db} }

// archiveDirDefault is where retention archives go by default: beside an
// SQLite database; on PostgreSQL, beside the checkpoint key.
func (rn Pruning) archiveDirDefault() string {
	if rn.db.pg {
		return filepath.Join(filepath.Dir(rn.db.opts.KeyPath), "archive")
	}
	return ArchiveDir(rn.db.opts.Path)
}

// newRetentionCheck is the check of the retention records a verification
// walks the log with, reading them from the database.
func (rn Pruning) newRetentionCheck(ctx context.Context, v note.Verifier) (*audit.RetentionCheck, error) {
	if rn.db.schema.noPruned {
		return audit.NewRetentionCheck(ctx, v, nil)
	}
	return audit.NewRetentionCheck(ctx, v, rn.retentionRecords)
}

// retentionRecords reads the retention records after seq after, in order.
func (rn Pruning) retentionRecords(ctx context.Context, after int64) ([]audit.RetentionRecord, error) {
	rows, err := rn.db.r.QueryContext(ctx, `SELECT seq, detail FROM records`+indexedBy(rn.db.pg, "records_retention")+`
		WHERE kind = 'retention' AND seq > ? ORDER BY seq`, after)
	if err != nil {
		return nil, fmt.Errorf("retention records: %w", err)
	}
	defer rows.Close()
	var out []audit.RetentionRecord
	for rows.Next() {
		var r audit.RetentionRecord
		if err := rows.Scan(&r.Seq, &r.Detail); err != nil {
			return out, fmt.Errorf("retention records: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
