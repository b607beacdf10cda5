package store

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
	"github.com/guard-mcp/guard/store/sqlite"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// A signed checkpoint protects the records it covers; the records after
// it (the tail) carry a MAC each: HMAC-SHA256, under a key derived from
// the checkpoint key (macPurpose), of the record's seq in decimal, a
// space and its chain hash. The MAC is kept beside the record (the
// records' mac column), not in its hashed form: retention blanks a body
// and keeps seq and hash, so the MAC still checks. Whoever can write the
// database but cannot read the key file cannot make one, so a record
// they add after the last checkpoint is told from guard's own: guard
// builds no tree over it (completeTree), indexes it not (fillFrom) and
// signs no checkpoint over it (checkTail), and verify names it. Replicas
// share the key file, so they share the MAC key.
//
// Where MACs start is never taken from what the database alone says:
// whoever can write it could make a log look as if written before MACs.
// A log this release makes has them from its first record, and every
// checkpoint signed says so ("guard macs from 1", an extension line of
// the signed note). A log written before MACs has records without them,
// which stay valid: MACs start at a lifecycle record "MACs from seq N"
// (audit.LifecycleMACs), which the process holding the checkpoint lease
// appends once no process of an earlier release (which writes records
// without MACs) writes to the database (macsWait), and the checkpoints
// say so from then on. From that record on every record must carry a
// valid MAC. The record is in the chain and the tree, so whoever cannot
// sign cannot take it out, and retention keeps its body.

// macPurpose is the label the MAC key is derived from the checkpoint key
// with (signer.derive).
const macPurpose = "guard: the audit records' MACs"

// selectMACsFrom finds the first LifecycleMACs record (index
// records_macs).
const selectMACsFrom = `SELECT seq FROM records WHERE kind = 'lifecycle' AND decision = 'macs' ORDER BY seq LIMIT 1`

// macMigration is the migration that adds the records' mac column.
const macMigration = 21

// tailAuth is what a DB knows of its log's MACs, shared by its writer, its
// checkpoints and its call index.
type tailAuth struct {
	key    []byte       // the MAC key; nil without the checkpoint key's secret
	jkey   []byte       // the journal frames' MAC key (journalauth.go); nil likewise
	from   atomic.Int64 // the seq of the first audit.LifecycleMACs record, once known (0: none yet)
	alerts atomic.Int64 // records found without a valid MAC, and journal frames refused, each counted once
	logger *slog.Logger

	mu            sync.Mutex
	alerted       map[int64]string      // the records counted in alerts, and what was wrong with each
	framesAlerted map[journalFrame]bool // the journal frames counted in alerts
	waitSaid      string                // why MACs wait, as last logged
}

// newTailAuth is the MAC state of a database whose checkpoint key is s
// (nil: none, or only its public key).
func newTailAuth(s *audit.Signer, logger *slog.Logger) *tailAuth {
	a := &tailAuth{logger: logger, alerted: map[int64]string{}, framesAlerted: map[journalFrame]bool{}}
	if s != nil {
		a.key = s.Derive(macPurpose)
		a.jkey = s.Derive(sqlite.JournalPurpose)
	}
	return a
}

// alert logs a record found without a valid MAC and counts it, once per
// record.
func (a *tailAuth) alert(seq int64, id, why string) {
	a.mu.Lock()
	_, seen := a.alerted[seq]
	if !seen {
		a.alerted[seq] = why
	}
	a.mu.Unlock()
	if seen {
		return
	}
	a.alerts.Add(1)
	a.logger.Error("audit integrity alert: a record does not carry a valid MAC: it was written to the database by someone who does not hold the checkpoint key; guard does not build the tree over it, index it or sign a checkpoint over it",
		"seq", seq, "id", id, "problem", why)
}

// Unauthenticated lists, in words and by seq, the records this process
// found without a valid MAC (alert): an alert that lasts as long as the
// process, since the records stay in the database and guard signs no
// checkpoint over them.
func (a *tailAuth) unauthenticated() []string {
	a.mu.Lock()
	seqs := slices.Sorted(maps.Keys(a.alerted))
	out := make([]string, len(seqs))
	for i, seq := range seqs {
		out[i] = fmt.Sprintf("the record at seq %d %s: no checkpoint is signed over it", seq, a.alerted[seq])
	}
	a.mu.Unlock()
	return out
}

// macsFrom is where the log's MACs start, once known; until then, the
// seq of its first LifecycleMACs record, read with q (0: MACs have not
// started).
func (a *tailAuth) macsFrom(ctx context.Context, q sqlQueryer) (int64, error) {
	if s := a.from.Load(); s > 0 {
		return s, nil
	}
	var s int64
	err := q.QueryRowContext(ctx, selectMACsFrom).Scan(&s)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("where MACs start: %w", err)
	}
	a.start(s)
	return a.from.Load(), nil
}

// start notes that MACs start at seq s, unless they start earlier.
func (a *tailAuth) start(s int64) {
	for {
		f := a.from.Load()
		if s <= 0 || f > 0 && f <= s || a.from.CompareAndSwap(f, s) {
			return
		}
	}
}

// learn notes where a checkpoint signed by the log's key says MACs start.
func (a *tailAuth) learn(c *audit.Checkpoint) {
	if c != nil {
		a.start(c.MACsFrom)
	}
}

// initMACs finds, as a writable open begins (or a reader holding the key
// reads journals), where the log's MACs start (learnMACs). A log that
// says nothing of them is new when it has no record (unless a process of
// an earlier release writes to the database too): it has them from its
// first record. Otherwise it was written by an earlier release: its MACs
// start once startMACs appends their record. It only reads.
func (cp *checkpointState) initMACs(ctx context.Context) error {
	empty, err := cp.learnMACs(ctx)
	if err != nil || cp.db.auth.from.Load() > 0 || !empty {
		return err
	}
	why, err := cp.macsWait(ctx)
	if err != nil || why != "" {
		return err // startMACs says what they wait for
	}
	cp.db.auth.start(1)
	return nil
}

// learnMACs finds where the log's MACs start from what the checkpoint key
// vouches for: its first LifecycleMACs record, or where its latest
// checkpoint (kept in the database, in the file, or by a file witness)
// says, or its first record when that carries a valid MAC (another
// process of this release wrote it, and has not yet signed a
// checkpoint): then it has them from its first record. It reports whether
// the log has no record. The caller holds the key (db.signer).
func (cp *checkpointState) learnMACs(ctx context.Context) (empty bool, err error) {
	a := cp.db.auth
	if _, err := a.macsFrom(ctx, cp.db.r); err != nil {
		return false, err
	}
	c, err := latestSigned(ctx, cp.db.r, cp.db.signer.Verifier())
	if err != nil {
		return false, err
	}
	a.learn(c)
	if c, err := audit.ReadCheckpointFile(cp.db.opts.CheckpointPath, cp.db.signer.Verifier()); err == nil {
		a.learn(c)
	}
	if cp.witness != nil {
		for _, c := range cp.witness.LatestHeld(cp.db.signer.Verifier()) {
			a.learn(c)
		}
	}
	if a.from.Load() > 0 {
		return false, nil
	}
	var seq int64
	var h string
	var mac []byte
	err = cp.db.r.QueryRowContext(ctx, `SELECT seq, hash, mac FROM records ORDER BY seq LIMIT 1`).Scan(&seq, &h, &mac)
	switch {
	case err == nil && audit.NewMACer(a.key).Valid(seq, h, mac):
		a.start(1)
		return false, nil
	case err == nil:
		return false, nil
	case errors.Is(err, sql.ErrNoRows):
		return true, nil
	}
	return false, fmt.Errorf("records: %w", err)
}

// startMACs appends the LifecycleMACs record when the log has none yet
// and nothing written by an earlier release is still to come; the caller
// holds the checkpoint lease, so that replicas do not each append one.
func (cp *checkpointState) startMACs(ctx context.Context) {
	a := cp.db.auth
	if a.key == nil || a.from.Load() > 0 {
		return
	}
	if s, err := a.macsFrom(ctx, cp.db.r); err != nil || s > 0 {
		if err != nil {
			cp.db.opts.Logger.Warn("audit MACs", "err", err)
		}
		return
	}
	why, err := cp.macsWait(ctx)
	if err != nil {
		cp.db.opts.Logger.Warn("audit MACs", "err", err)
		return
	}
	a.mu.Lock()
	said := a.waitSaid
	a.waitSaid = why
	a.mu.Unlock()
	if why != "" {
		if why != said {
			cp.db.opts.Logger.Warn("audit records carry MACs, but they are required only once every process writing to the database runs this release", "waiting_for", why)
		}
		return
	}
	r := &guard.Record{ID: guard.NewID(), Kind: guard.KindLifecycle, Decision: audit.LifecycleMACs,
		Time: cp.db.opts.Now().UTC().Truncate(time.Millisecond)}
	r.CallID = r.ID
	cp.db.ing.commitMu.Lock()
	err = cp.db.ing.commitRetrying([]*appendReq{{recs: []*guard.Record{r}, macStart: true}})
	cp.db.ing.commitMu.Unlock()
	if err != nil {
		cp.db.opts.Logger.Error("audit MACs: the record they start at could not be written; the next checkpoint tries again", "err", err)
		return
	}
	a.from.CompareAndSwap(0, r.Seq)
	cp.dirty.Store(true)
	cp.db.opts.Logger.Info("audit records carry MACs: every record from this one on must carry a valid MAC", "seq", r.Seq)
}

// macsWait says what MACs wait for before they start, or "": processes
// of an earlier release still beating on the database (their rows in
// replicas do not say macs), which write records without MACs.
func (cp *checkpointState) macsWait(ctx context.Context) (string, error) {
	rows, err := cp.db.r.QueryContext(ctx, `SELECT host, pid, process, seen, lapse_ms FROM replicas WHERE macs = 0`)
	if err != nil {
		return "", fmt.Errorf("replicas: %w", err)
	}
	defer rows.Close()
	now := cp.db.opts.Now()
	for rows.Next() {
		var r Replica
		var seen string
		var lapse int64
		if err := rows.Scan(&r.Host, &r.PID, &r.Process, &seen, &lapse); err != nil {
			return "", fmt.Errorf("replicas: %w", err)
		}
		r.Seen, r.Lapse = parseTime(seen), time.Duration(lapse)*time.Millisecond
		if r.Seen.Add(r.lapse()).After(now) {
			return r.Process + " (pid " + strconv.Itoa(r.PID) + " on " + r.Host + ") of an earlier release", nil
		}
	}
	return "", rows.Err()
}

// latestSigned is the largest checkpoint kept in the database that v
// signed, or nil: the table's rows are only what they say once their
// signature is checked.
func latestSigned(ctx context.Context, q sqlQueryer, v note.Verifier) (*audit.Checkpoint, error) {
	rows, err := q.QueryContext(ctx, `SELECT note FROM checkpoints ORDER BY size DESC`)
	if err != nil {
		return nil, fmt.Errorf("checkpoints: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var text string
		if err := rows.Scan(&text); err != nil {
			return nil, fmt.Errorf("checkpoints: %w", err)
		}
		if c, err := audit.OpenCheckpoint([]byte(text), v); err == nil {
			return c, nil
		}
	}
	return nil, rows.Err()
}

// errUnauthenticated is why a checkpoint is not signed: a record it would
// cover does not carry a valid MAC.
var errUnauthenticated = errors.New("a record after the last checkpoint does not carry a valid MAC")

// tailChunk is how many records checkTail reads at a time.
const tailChunk = 4096

// checkTail checks, inside the checkpoint's transaction on conn, every
// record from MACs' start on that a checkpoint of size records would
// cover beyond the last one (after) signed: its hash is that of its
// contents, its MAC is valid, and its leaf in the stored tree is that of
// its contents. The records this process's writer committed meanwhile
// (ownRun) are not read again: their leaves in the tree must be those it
// made. The first that fails is alerted and refuses the checkpoint:
// whoever wrote a record and its tree hashes without the key gets no
// signature over them.
//
// It returns where MACs start, for the checkpoint to say (0: not yet).
func (cp *checkpointState) checkTail(ctx context.Context, conn *sql.Conn, after, size int64) (int64, error) {
	a := cp.db.auth
	from, err := a.macsFrom(ctx, conn)
	if err != nil || from == 0 || a.key == nil {
		return from, err
	}
	t := &tailCheck{db: cp.db, conn: conn, m: audit.NewMACer(a.key)}
	if cp.db.ing.wc != nil {
		t.own = cp.db.ing.wc.own
	}
	for lo := max(after, from-1); lo < size; lo += tailChunk {
		hi := min(lo+tailChunk, size)
		leaves, err := storedLeaves(ctx, conn, lo+1, hi)
		if err != nil {
			return 0, fmt.Errorf("checkpoint: %w", err)
		}
		first := lo + 1 // the first record not known to be this process's
		for seq := lo + 1; seq <= hi; seq++ {
			leaf, mine := t.ownLeaf(seq)
			if !mine {
				continue
			}
			if err := t.others(ctx, first, seq-1, leaves); err != nil {
				return 0, err
			}
			first = seq + 1
			if l, ok := leaves[seq]; !ok || l != leaf {
				a.alert(seq, "", "has another leaf in the tree than the one guard made")
				return 0, fmt.Errorf("%w: the leaf of record %d in the tree was changed", errUnauthenticated, seq)
			}
		}
		if err := t.others(ctx, first, hi, leaves); err != nil {
			return 0, err
		}
	}
	return from, nil
}

// tailCheck is checkTail's state.
type tailCheck struct {
	db   *DB
	conn *sql.Conn
	m    *audit.MACer
	own  []ownRun
	buf  []byte
}

// ownLeaf is the leaf this process's writer made for record seq, if it
// wrote it.
func (t *tailCheck) ownLeaf(seq int64) (tlog.Hash, bool) {
	i, _ := slices.BinarySearchFunc(t.own, seq, func(r ownRun, seq int64) int { return cmp.Compare(r.first+int64(len(r.leaves))-1, seq) })
	if i == len(t.own) || seq < t.own[i].first {
		return tlog.Hash{}, false
	}
	return t.own[i].leaves[seq-t.own[i].first], true
}

// others reads records first to last, which other processes wrote (or
// someone else), and checks each.
func (t *tailCheck) others(ctx context.Context, first, last int64, leaves map[int64]tlog.Hash) error {
	if first > last {
		return nil
	}
	rows, err := t.conn.QueryContext(ctx, t.db.schema.selectRecordsMAC()+` WHERE seq >= ? AND seq <= ? ORDER BY seq`, first, last)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer rows.Close()
	want := first
	for rows.Next() {
		var mac []byte
		r, err := scanRecord(rows, &mac)
		if err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		t.buf = audit.AppendCanonical(t.buf[:0], r)
		why := t.m.Check(r, t.buf, mac)
		if l, ok := leaves[r.Seq]; why == "" && (!ok || l != audit.LeafHash(t.buf)) {
			why = "is not the record its leaf in the tree stands for"
		}
		if why == "" && r.Seq != want {
			why = fmt.Sprintf("follows record %d: the records between them are missing", want-1)
		}
		if why != "" {
			t.db.auth.alert(r.Seq, r.ID, why)
			return fmt.Errorf("%w: record %d (id %s) %s", errUnauthenticated, r.Seq, r.ID, why)
		}
		want++
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if want != last+1 {
		return fmt.Errorf("%w: record %d is missing", errUnauthenticated, want)
	}
	return nil
}

// ownRun is a run of records this process's writer committed since the
// last checkpoint, with the leaves it made for them: the checkpoint need
// not read them again, only find those leaves in the tree (checkTail).
type ownRun struct {
	first  int64
	leaves []tlog.Hash
}

// maxOwn bounds the leaves the writer keeps between two checkpoints
// (signing may be refused for long): past it, the oldest runs go, and
// their records are read again like others'.
const maxOwn = 1 << 16

// noteOwn keeps a run the writer committed (under commitMu).
func (wc *writerConn) noteOwn(r ownRun) {
	if len(r.leaves) == 0 {
		return
	}
	wc.own = append(wc.own, r)
	wc.ownLeaves += len(r.leaves)
	for wc.ownLeaves > maxOwn {
		wc.ownLeaves -= len(wc.own[0].leaves)
		wc.own = slices.Delete(wc.own, 0, 1)
	}
}

// dropOwn forgets the runs a checkpoint of size records covers.
func (wc *writerConn) dropOwn(size int64) {
	i := 0
	for ; i < len(wc.own) && wc.own[i].first+int64(len(wc.own[i].leaves))-1 <= size; i++ {
		wc.ownLeaves -= len(wc.own[i].leaves)
	}
	wc.own = slices.Delete(wc.own, 0, i)
}

// storedLeaves reads the stored leaf hashes of records first to last, by
// seq.
func storedLeaves(ctx context.Context, q sqlQueryer, first, last int64) (map[int64]tlog.Hash, error) {
	rows, err := q.QueryContext(ctx, `SELECT idx, hash FROM tree_hashes WHERE idx >= ? AND idx <= ?`, audit.LeafIndex(first), audit.LeafIndex(last))
	if err != nil {
		return nil, fmt.Errorf("tree: %w", err)
	}
	defer rows.Close()
	out := make(map[int64]tlog.Hash, last-first+1)
	for rows.Next() {
		var idx int64
		var h []byte
		if err := rows.Scan(&idx, &h); err != nil {
			return nil, fmt.Errorf("tree: %w", err)
		}
		if level, n := tlog.SplitStoredHashIndex(idx); level == 0 && len(h) == tlog.HashSize {
			out[n+1] = tlog.Hash(h)
		}
	}
	return out, rows.Err()
}

// selectRecordMAC is selectRecord with each record's MAC after its other
// columns.
var selectRecordMAC = strings.Replace(selectRecord, " FROM records", ", mac FROM records", 1)

// selectRecordsMAC is selectRecordMAC for this database (selectRecords):
// one a read-only open found without the MAC migration has no mac
// column, and no record of it carries a MAC.
func (g *schemaGaps) selectRecordsMAC() string {
	mac := ", mac FROM records"
	if g.noMAC {
		mac = ", NULL AS mac FROM records"
	}
	return strings.Replace(g.selectRecords(), " FROM records", mac, 1)
}
