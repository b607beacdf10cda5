package store

import (
	"cmp"
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"os"
	"slices"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
	"github.com/guard-mcp/guard/store/sqlite"
)

// Right after a guard process is killed, what it acknowledged may still be
// in its journal: a guard running on the database moves it into the log
// within a tick (recoverOrphans), else the next writable open does
// (recoverJournals), but a reader must not wait for that to see it. A
// reader (a read-only open above all) reads the journals whose owner is
// gone without moving or marking anything (sqlite.ScanJournal), and shows the
// records in them that the database does not hold yet beside those it
// holds: Query and QueryRecords through an overlay, a database in memory
// that holds these records and the records already in the log of the
// calls they belong to, with the call index made from them by the
// ingester's own indexer; Export as records not yet in the chain;
// Unchained counts them, and journalFindings tells verify, which cannot
// vouch for the log while they are outside it.

// journals keeps the journals that processes left: those of guard
// processes that stopped, which a reader reads (what follows) and whose
// recovery records what it refused (journalauth.go) or found damaged
// (damage.go), and those of earlier versions, which the upgrade imports
// (legacy.go). DB.journals returns it.
type journals struct{ db *DB }

// journals returns the journals processes left beside the database.
func (db *DB) journals() journals { return journals{db} }

// unchainedJournal is a journal of a process that stopped, as a reader
// finds it.
type unchainedJournal struct {
	path  string
	scan  *sqlite.JournalScan
	fresh []*guard.Record // the records the database does not hold yet
	// refused is how many frames are left out, as recovery will refuse
	// them (journalauth.go): their MAC does not verify, or the journal
	// is of an earlier format and the log's MACs have begun.
	refused int
	// unauth is set when fresh was read without checking MACs: the
	// reader does not hold this log's key.
	unauth bool
}

// readUnchained reads the journals beside the database whose owner is
// gone, in the order recovery moves them in. Holding this log's key, it
// leaves out what recovery will refuse, and counts it as integrity
// alerts; without it, it reads every frame, unauthenticated.
func (jn journals) readUnchained(ctx context.Context) ([]unchainedJournal, error) {
	if jn.db.pg || jn.db.hold != nil {
		return nil, nil // no journals: what is acknowledged is committed, or nothing is
	}
	files, err := sqlite.Segments(sqlite.JournalsDir(jn.db.opts.Path))
	if err != nil {
		return nil, fmt.Errorf("journals: %w", err)
	}
	var out []unchainedJournal
	var key []byte
	var from int64
	keyRead := false
	for _, p := range files {
		jn.db.ing.jmu.Lock()
		own := jn.db.ing.own[p]
		jn.db.ing.jmu.Unlock()
		if own {
			continue
		}
		b, gone, err := readOrphan(p)
		if err != nil || !gone {
			continue // removed meanwhile, or its owner is alive
		}
		if !keyRead {
			// Once, when there is a journal to read.
			if key, from, err = jn.readersKey(ctx); err != nil {
				return nil, fmt.Errorf("journals: %w", err)
			}
			keyRead = true
		}
		sc, err := sqlite.ScanJournal(b, key)
		if err != nil {
			continue // not a journal: left alone, as recovery leaves it
		}
		recs := sc.Records()
		held, err := heldAlready(ctx, jn.db.r, recs)
		if err != nil {
			return nil, fmt.Errorf("journal %s: %w", p, err)
		}
		j := unchainedJournal{path: p, scan: sc, unauth: key == nil}
		refused := refusal{frames: sc.Forged}
		if key != nil {
			refused = refuse(sc, held, from)
		}
		for i, r := range recs {
			if !held[i] && !refused.whole() {
				j.fresh = append(j.fresh, r)
			}
		}
		j.refused = len(refused.frames)
		if refused.any() && jn.db.auth.alertJournal(p, refused.offsets()...) > 0 {
			jn.db.opts.Logger.Error("a journal of a guard process that stopped holds frames that were not written by guard (their MAC does not verify, or it is of an earlier format left after the log's MACs began): they are left out of what is read, and the next writable guard keeps the journal aside and records it",
				"journal", p, "frames", j.refused, "format", sc.Format.String())
		}
		out = append(out, j)
	}
	return out, nil
}

// readersKey is the key a reader checks the frames of journals with, and
// where the log's MACs start, as a writable open would find it
// (initMACs): nil and 0 without this log's key's secret (none at hand, or
// another log's key, used for nothing).
func (jn journals) readersKey(ctx context.Context) ([]byte, int64, error) {
	key, err := jn.journalKey(ctx)
	if errors.Is(err, errForeignKey) || key == nil {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	if jn.db.schema.noMAC {
		return key, 0, nil // a schema from before MACs: they have not begun
	}
	if err := jn.db.ckpt.initMACs(ctx); err != nil {
		return nil, 0, err
	}
	return key, jn.db.auth.from.Load(), nil
}

// readOrphan reads the journal at path when its owner is gone.
func readOrphan(path string) (b []byte, gone bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	if sqlite.OwnerAlive(f) {
		return nil, false, nil
	}
	st, err := f.Stat()
	if err != nil {
		return nil, false, err
	}
	b = make([]byte, st.Size())
	n, err := f.ReadAt(b, 0)
	if err != nil && n < len(b) {
		return nil, false, err
	}
	return b, true, nil
}

// unchainedRecords are the records of journals whose owner is gone that
// the database does not hold yet.
func (jn journals) unchainedRecords(ctx context.Context) ([]*guard.Record, error) {
	js, err := jn.readUnchained(ctx)
	if err != nil {
		return nil, err
	}
	var recs []*guard.Record
	for _, j := range js {
		recs = append(recs, j.fresh...)
	}
	return recs, nil
}

// Unchained is what the journals of guard processes that stopped hold
// that the log does not yet: acknowledged records the next writable open
// moves into the chain.
type Unchained struct {
	Records  int // acknowledged records not yet in the chain
	Journals int // the journals that hold them
	// DamagedBytes is how much of those journals cannot be read: the
	// next writable open records it (damage.go).
	DamagedBytes int64
	// Refused is how many of their frames were left out: their MAC does
	// not verify, or they are of an earlier format left after the log's
	// MACs began. The next writable open refuses them (journalauth.go).
	Refused int
	// Unauthenticated is how many of Records were read without checking
	// their MACs: the reader does not hold this log's key.
	Unauthenticated int
}

// Outside reports whether acknowledged records may be outside the chain:
// records in those journals, or bytes of them that cannot be read.
func (u Unchained) Outside() bool { return u.Records > 0 || u.DamagedBytes > 0 }

// Unchained reads the journals of guard processes that stopped (without
// moving or marking anything) and says what in them is not yet in the
// chain: a verification cannot vouch for the log while it is not.
func (vr Verifier) Unchained(ctx context.Context) (Unchained, error) {
	vr.db.ing.caughtUp(ctx)
	js, err := vr.db.journals().readUnchained(ctx)
	if err != nil {
		return Unchained{}, fmt.Errorf("unchained: %w", err)
	}
	var u Unchained
	for _, j := range js {
		if len(j.fresh) > 0 || len(j.scan.Damage) > 0 {
			u.Journals++
		}
		u.Records += len(j.fresh)
		u.DamagedBytes += j.scan.DamagedBytes()
		u.Refused += j.refused
		if j.unauth {
			u.Unauthenticated += len(j.fresh)
		}
	}
	return u, nil
}

// overlay is the log as a reader shows it while journals of processes that
// stopped hold records it does not.
type overlay struct {
	db    *DB             // in memory: those records and the log's records of their calls
	tail  int64           // the log's last seq: the overlay's records after it are not in the chain
	calls map[string]bool // the calls the overlay shows in place of the log
}

// close closes the overlay's database; a nil overlay has none.
func (o *overlay) close() {
	if o != nil {
		o.db.Close()
	}
}

// overlayBatch is how many calls' records are read from the log at once.
const overlayBatch = 500

// unchainedOverlay makes the overlay, or returns nil when every record
// acknowledged is in the log.
func (jn journals) unchainedOverlay(ctx context.Context) (*overlay, error) {
	recs, err := jn.unchainedRecords(ctx)
	if err != nil || len(recs) == 0 {
		return nil, err
	}
	ov, err := openEmpty(ctx, jn.db.opts)
	if err != nil {
		return nil, err
	}
	o := &overlay{db: ov, calls: map[string]bool{}}
	if err := jn.fillOverlay(ctx, o, recs); err != nil {
		o.close()
		return nil, fmt.Errorf("journals of processes that stopped: %w", err)
	}
	return o, nil
}

// fillOverlay puts recs into the overlay's database after the log's
// records of their calls, and makes its call index.
func (jn journals) fillOverlay(ctx context.Context, o *overlay, recs []*guard.Record) error {
	if err := jn.db.r.QueryRowContext(ctx, `SELECT coalesce(max(seq), 0) FROM records`).Scan(&o.tail); err != nil {
		return err
	}
	var ids []string
	for _, r := range recs {
		if !o.calls[r.CallID] && (r.Kind == guard.KindRequest || r.Kind == guard.KindOutcome || r.Kind == guard.KindDecision) {
			o.calls[r.CallID] = true
			ids = append(ids, r.CallID)
		}
	}
	var all []*guard.Record
	pruned := ""
	if !jn.db.schema.noPruned {
		pruned = " AND pruned = 0"
	}
	for chunk := range slices.Chunk(ids, overlayBatch) {
		rows, err := jn.db.r.QueryContext(ctx, jn.db.schema.selectRecords()+` WHERE call_id IN (`+paramMarks(len(chunk))+`)`+pruned, appendArgs(nil, chunk)...)
		if err != nil {
			return err
		}
		for rows.Next() {
			r, err := scanRecord(rows)
			if err != nil {
				rows.Close()
				return err
			}
			all = append(all, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	for i, r := range recs {
		c := *r
		c.Seq, c.PrevHash, c.Hash = o.tail+int64(i)+1, "", ""
		all = append(all, &c)
	}
	slices.SortFunc(all, func(a, b *guard.Record) int { return cmp.Compare(a.Seq, b.Seq) })
	conn, err := o.db.w.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		pc, ok := dc.(driver.ConnPrepareContext)
		if !ok {
			return errors.New("the driver cannot prepare statements")
		}
		insert, err := sqlite.Prepare(ctx, pc, insertRecord)
		if err != nil {
			return err
		}
		defer insert.Close()
		args := make([]driver.NamedValue, insertArgs)
		for _, r := range all {
			for i, v := range [insertArgs]any{r.Seq, r.ID, r.CallID, r.Kind, fmtTime(r.Time), r.Session, r.Client,
				r.Protocol, r.Server, r.Direction, r.Method, r.Tool, r.Arguments, r.Pin, r.Decision,
				r.DecidedBy, r.Reason, r.Outcome, r.Result, r.RequestSize, r.ResponseSize, r.DurationMS,
				r.Detail, r.Approval, r.PrevHash, r.Hash, r.User, r.UserEmail, audit.GroupsText(r.UserGroups)} {
				args[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
			}
			if _, err := insert.ExecContext(ctx, args); err != nil {
				return fmt.Errorf("record %s: %w", r.ID, err)
			}
		}
		ix, err := newCallIndexer(ctx, pc, false)
		if err != nil {
			return err
		}
		defer ix.close()
		return ix.index(ctx, all)
	})
}

// pendingCall reports whether the overlay shows the call in place of the
// log.
func (o *overlay) pendingCall(id string) bool { return o.calls[id] }

// mergeCalls hands fn the calls of the log that match f (read by
// queryLog, which the overlay's calls replace) and the overlay's, newest
// first, at most f.Limit of them.
func (o *overlay) mergeCalls(ctx context.Context, f Filter, queryLog func(Filter, func(*Call) error) error, fn func(*Call) error) error {
	var extra []*Call
	if err := o.db.Reader().queryCalls(ctx, f, func(c *Call) error { extra = append(extra, c); return nil }); err != nil {
		return err
	}
	lf := f
	if f.Limit > 0 {
		lf.Limit = f.Limit + len(o.calls) // those the overlay replaces are left out
	}
	if ascending(f) {
		// The Limit calls just after f.After: the oldest of both.
		all := extra
		if err := queryLog(lf, func(c *Call) error {
			if !o.pendingCall(c.ID) {
				all = append(all, c)
			}
			return nil
		}); err != nil {
			return err
		}
		slices.SortStableFunc(all, func(a, b *Call) int { return cmp.Compare(b.Key, a.Key) })
		if f.Limit > 0 && len(all) > f.Limit {
			all = all[len(all)-f.Limit:]
		}
		for _, c := range all {
			if err := fn(c); err != nil {
				return err
			}
		}
		return nil
	}
	return mergeNewest(extra, f.Limit, func(each func(*Call) error) error {
		return queryLog(lf, func(c *Call) error {
			if o.pendingCall(c.ID) {
				return nil
			}
			return each(c)
		})
	}, func(a, b *Call) bool { return a.Key > b.Key }, fn)
}

// mergeNewest hands fn, newest first, at most limit (0: all) of what
// queryLog hands on, newest first, and of extra, also newest first;
// newer reports whether its first item comes before its second.
func mergeNewest[T any](extra []T, limit int, queryLog func(func(T) error) error, newer func(a, b T) bool, fn func(T) error) error {
	n := 0
	emit := func(v T) error {
		if limit > 0 && n >= limit {
			return errEnough
		}
		n++
		return fn(v)
	}
	err := queryLog(func(v T) error {
		for len(extra) > 0 && newer(extra[0], v) {
			if err := emit(extra[0]); err != nil {
				return err
			}
			extra = extra[1:]
		}
		return emit(v)
	})
	for ; err == nil && len(extra) > 0; extra = extra[1:] {
		err = emit(extra[0])
	}
	if errors.Is(err, errEnough) {
		return nil
	}
	return err
}

// errEnough ends a merge once it has handed on as many calls as asked.
var errEnough = errors.New("enough")

// mergeRecords hands fn the records of kind that match f from the log
// (read by queryLog) and those of the overlay not yet in the chain (seq
// 0, no hash), newest first, at most f.Limit of them.
func (o *overlay) mergeRecords(ctx context.Context, kind string, f Filter, queryLog func(Filter, func(*guard.Record) error) error, fn func(*guard.Record) error) error {
	var extra []*guard.Record
	of := f
	of.Limit = 0
	if err := o.db.Reader().queryRecords(ctx, kind, of, func(r *guard.Record) error {
		if r.Seq > o.tail {
			r.Seq = 0
			extra = append(extra, r)
		}
		return nil
	}); err != nil {
		return err
	}
	// Of the same time, a record not yet in the chain comes after those
	// in it.
	return mergeNewest(extra, f.Limit, func(each func(*guard.Record) error) error { return queryLog(f, each) },
		func(a, b *guard.Record) bool { return !a.Time.Before(b.Time) }, fn)
}

// journalFindings adds to a verification's findings what the journals of
// guard processes that stopped hold outside the chain (the log cannot be
// verified here until a writable guard has moved them in), and the losses
// no one has acknowledged (a note: the log that records them holds).
func (vr Verifier) journalFindings(ctx context.Context, f *audit.Findings) error {
	u, err := vr.Unchained(ctx)
	if err != nil {
		return err
	}
	if u.Outside() {
		s := fmt.Sprintf("%d acknowledged records not yet in the chain (journals of stopped processes); any writable guard command moves them in", u.Records)
		if u.DamagedBytes > 0 {
			s += fmt.Sprintf("; %d bytes of those journals cannot be read, which that command records as a possible loss", u.DamagedBytes)
		}
		f.Cannot("%s", s)
	}
	if u.Refused > 0 {
		f.Note("%d frames of journals of stopped processes were left out: their MAC does not verify (guard, which holds the checkpoint key, did not write them), or they are of an earlier format left after the log's MACs began; any writable guard command keeps those journals aside and records them", u.Refused)
	}
	if u.Unauthenticated > 0 {
		f.Note("the %d records of journals of stopped processes are unauthenticated: their MACs can be checked only with this log's checkpoint key's secret (the key file, or the configuration that names it), and anyone who can write the database's directory may have written them", u.Unauthenticated)
	}
	alerts, err := vr.db.Integrity().Alerts(ctx)
	if err != nil {
		return err
	}
	for _, a := range alerts {
		what := "loss"
		if a.Kind == AlertJournalRefused {
			what = "refused journal"
		}
		f.Note("unacknowledged %s %s (%s): %s; once seen to, record it: guard audit acknowledge-loss %s --reason TEXT", what, a.ID, fmtTime(a.Time), a.Text, a.ID)
	}
	return nil
}
