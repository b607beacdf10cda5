package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
	"github.com/guard-mcp/guard/internal/filelock"
	"github.com/guard-mcp/guard/metrics"
	"github.com/guard-mcp/guard/store/postgres"
	"github.com/guard-mcp/guard/store/sqlite"
)

// The audit log is written in two steps. An append makes its records
// durable in the process's journal (journal.go): one write, and with
// durability full an fdatasync shared by every append written meanwhile
// (the syncer). The ingester then moves what the journal holds into the
// records table, with the chain, in batches: it waits a little after the
// first record (linger) so that a transaction carries many and its fixed
// cost (locks, the write-ahead log's frames) is shared among them. Readers
// of this process wait for it to catch up (caughtUp), and readers of
// other processes wait for the journals' headers to show that it has.
//
// Appends are bounded by what is waiting for the ingester: past
// maxBacklog records, AppendAsync blocks until it has caught up some
// (backpressure), and nothing is refused for want of room. While the
// ingester cannot commit (disk full, an I/O error, another process
// holding the database longer than Options.BusyWait), new appends are
// refused and it tries again; what was appended before stays in the
// journal and reaches the database once it can, so guard recovers by
// itself when the cause goes away and loses nothing it acknowledged.

// errClosed is returned for appends after Close.
var errClosed = errors.New("the database is closed")

// errReadOnly is returned for appends to a database opened read-only.
var errReadOnly = errors.New("the database is open read-only")

// maxBacklog bounds the records appended and not yet in the database:
// beyond it, AppendAsync blocks until the ingester has taken some.
const maxBacklog = 16384

// maxBatch is the number of records past which the ingester stops adding
// appends to a transaction (one append's records always go together).
const maxBatch = 2048

// linger is how long the ingester waits after the first record before it
// commits, and lingerAppends the number of appends that end the wait
// early.
const (
	linger        = 50 * time.Millisecond
	lingerAppends = 256
)

// retryAfter is the pause before the ingester tries again a batch it
// could not commit.
const retryAfter = 100 * time.Millisecond

// maxFrameBuf is the largest frame buffer kept for the next append.
const maxFrameBuf = 64 << 10

// BatchBuckets are the bounds of the batch-size histogram, in records.
var BatchBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048}

type appendReq struct {
	recs  []*guard.Record
	done  chan error
	start time.Time
	seg   *sqlite.Segment // the journal segment it was written to
	end   int64           // the offset after its frames
	// refused is set by the syncer when the journal could not be synced:
	// its caller was refused and the ingester only counts it.
	refused bool
	// fix marks the store's own correction of a commit that was in doubt
	// (pgdoubt.go): nobody waits for it, and it is never given up.
	fix bool
	// macStart marks the LifecycleMACs record (startMACs): the writer
	// gives it the text that names its own seq.
	macStart bool
}

// auditStats are the writer's figures.
type auditStats struct {
	latency  *metrics.Histogram // until durable
	batches  *metrics.Histogram // records per transaction
	held     *metrics.Histogram // the audit lock, per batch (PostgreSQL)
	backlog  atomic.Int64       // records appended, not yet in the database
	peak     atomic.Int64       // the most backlog has been
	attempts atomic.Int64       // transactions begun (retries included)
	waits    atomic.Int64       // appends that waited for room
	refused  atomic.Int64       // checkpoints not signed: the log did not extend the last one
	witness  atomic.Int64       // checkpoints a witness did not get
	// integrity counts the integrity alerts this process raised
	// (IntegrityAlerts).
	integrity atomic.Int64
}

func newAuditStats() *auditStats {
	return &auditStats{latency: metrics.NewHistogram(metrics.LatencyBuckets), batches: metrics.NewHistogram(BatchBuckets),
		held: metrics.NewHistogram(metrics.LatencyBuckets)}
}

func (s *auditStats) add(n int) {
	b := s.backlog.Add(int64(n))
	for {
		p := s.peak.Load()
		if b <= p || s.peak.CompareAndSwap(p, b) {
			return
		}
	}
}

// signal wakes the goroutine that waits on c, unless it is already due
// to wake.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// AppendAsync makes records durable in the audit log and returns a
// channel that receives one value once they are (nil) or could not be (an
// error wrapping guard.ErrAuditWrite). The records of one append are
// written together, in order, and reach the database in one transaction.
// With durability normal the channel has its value when AppendAsync
// returns; with full, once the journal is synced: by the caller itself
// when no sync is under way (AppendAsync returns after it), else by the
// next sync. When more records wait
// for the database than the ingester's backlog holds, AppendAsync blocks
// until there is room. Writes do not depend on any caller's context: a
// client that goes away cannot cancel the record of what it did.
func (db *DB) AppendAsync(recs ...*guard.Record) <-chan error {
	done := make(chan error, 1)
	if !db.writable {
		done <- fmt.Errorf("%w: %w", guard.ErrAuditWrite, errReadOnly)
		return done
	}
	now := db.opts.Now().UTC().Truncate(time.Millisecond)
	for _, r := range recs {
		if r.ID == "" {
			r.ID = guard.NewID()
		}
		if r.CallID == "" {
			r.CallID = r.ID
		}
		if r.Time.IsZero() {
			r.Time = now
		}
		r.Time = r.Time.UTC().Truncate(time.Millisecond)
	}
	// Close waits for appends under way (one that waits for room goes on
	// once the ingester has made some).
	db.ing.closeMu.RLock()
	defer db.ing.closeMu.RUnlock()
	if db.ing.closing {
		done <- fmt.Errorf("%w: %w", guard.ErrAuditWrite, errClosed)
		return done
	}
	if db.pg || sqliteDirect {
		db.ing.appendCommitted(&appendReq{recs: recs, done: done, start: time.Now()})
		return done
	}
	if err := db.ing.failed(); err != nil {
		db.ing.noteWrite(err)
		done <- fmt.Errorf("%w: %w", guard.ErrAuditWrite, err)
		return done
	}
	fs := db.ing.frames.Get().(*sqlite.AppendFrames)
	fs.Reset()
	for _, r := range recs {
		fs.Add(r)
	}
	req := &appendReq{recs: recs, done: done, start: time.Now()}
	db.ing.jmu.Lock()
	for waited := false; db.stats.backlog.Load() >= maxBacklog && db.ing.failed() == nil; {
		if !waited {
			waited = true
			db.stats.waits.Add(1)
		}
		db.ing.room.Wait()
	}
	seg := db.ing.seg
	err := db.ing.failed()
	switch {
	case err != nil:
	case seg.Bad:
		err = errors.New("the journal could not be synced; a new one is being made")
	default:
		// One write, at the end the journal had: a frame cut short by
		// a failure is written over by the next append. The frames'
		// MACs bind them to that place.
		fs.Seal(db.ing.jmac, seg.ID[:], seg.End)
		_, err = seg.File.WriteAt(fs.Bytes, seg.End)
	}
	if err != nil {
		bad := seg.Bad
		db.ing.jmu.Unlock()
		db.ing.putFrames(fs)
		if bad {
			signal(db.ing.urgent) // the ingester makes a new segment
		}
		db.ing.noteWrite(err)
		done <- fmt.Errorf("%w: journal: %w", guard.ErrAuditWrite, err)
		return done
	}
	seg.End += int64(len(fs.Bytes))
	seg.Appends++
	db.ing.appended++
	req.seg, req.end = seg, seg.End
	db.stats.add(len(recs))
	var n int
	var sync []*appendReq
	if db.ing.fsync {
		db.ing.unsynced = append(db.ing.unsynced, req)
		if !db.ing.syncing {
			db.ing.syncing = true
			sync, db.ing.unsynced = db.ing.unsynced, nil
		}
	} else {
		db.ing.pend = append(db.ing.pend, req)
		n = len(db.ing.pend)
	}
	db.ing.jmu.Unlock()
	db.ing.putFrames(fs)
	if db.ing.fsync {
		db.ing.syncJournal(sync) // nil when a sync is under way
		return done
	}
	db.stats.latency.Observe(time.Since(req.start).Seconds())
	db.ing.noteWrite(nil)
	done <- nil
	switch {
	case n >= lingerAppends:
		signal(db.ing.urgent)
	case n == 1:
		signal(db.ing.work)
	}
	return done
}

// putFrames keeps a frame buffer for the next append, unless it grew
// large.
func (in *ingestion) putFrames(fs *sqlite.AppendFrames) {
	if cap(fs.Bytes) > maxFrameBuf {
		return
	}
	in.frames.Put(fs)
}

// Append is AppendAsync that waits until the records are durable.
func (db *DB) Append(recs ...*guard.Record) error { return <-db.AppendAsync(recs...) }

// AppendLatency is how long appends take until durable (waiting for room
// included).
func (w Writing) AppendLatency() *metrics.Histogram { return w.db.stats.latency }

// BatchSizes is how many records each audit transaction committed.
func (w Writing) BatchSizes() *metrics.Histogram { return w.db.stats.batches }

// LockHeld is how long each batch held the audit log's lock on
// PostgreSQL, from the answer to the statements that took it to that of
// its COMMIT: the section of the writers of every replica that does not
// run in parallel.
func (w Writing) LockHeld() *metrics.Histogram { return w.db.stats.held }

// Backlog is the number of records appended and not yet in the database.
func (w Writing) Backlog() int64 { return w.db.stats.backlog.Load() }

// PeakBacklog is the most Backlog has been since Open.
func (w Writing) PeakBacklog() int64 { return w.db.stats.peak.Load() }

// failed is the ingester's last failure while it lasts: appends are
// refused with it.
func (in *ingestion) failed() error {
	if p := in.failure.Load(); p != nil {
		return *p
	}
	return nil
}

// With durability full, the journal is synced by group commit: an append
// that finds no sync under way syncs the journal itself, for itself and
// for whatever was written meanwhile, so that a lone call's record costs
// one fdatasync and no hand-off between goroutines; appends written while
// a sync is under way wait for the next one, which the syncer makes as
// soon as the one under way ends. No append waits for more than two
// syncs, and the caller that syncs waits for one only.

// syncer fsyncs the journal for the appends written while another sync
// was under way (durability full); it ends once Close has stopped appends
// and every append is answered.
func (in *ingestion) syncer() {
	defer close(in.synced)
	for {
		select {
		case <-in.syncWork:
		case <-in.stop:
			in.syncJournal(in.takeUnsynced())
			return
		}
		in.syncJournal(in.takeUnsynced())
	}
}

// takeUnsynced takes the appends waiting for a sync and marks a sync
// under way, unless one is already (its end wakes the syncer).
func (in *ingestion) takeUnsynced() []*appendReq {
	in.jmu.Lock()
	defer in.jmu.Unlock()
	if in.syncing || len(in.unsynced) == 0 {
		return nil
	}
	in.syncing = true
	batch := in.unsynced
	in.unsynced = nil
	return batch
}

// syncJournal fsyncs the journal for a batch taken by takeUnsynced,
// answers its callers and hands it to the ingester.
func (in *ingestion) syncJournal(batch []*appendReq) {
	if len(batch) == 0 {
		return
	}
	// The appends are in the order they were written: one sync per
	// segment covers every append written to it before the sync began.
	errs := map[*sqlite.Segment]error{}
	for i, r := range batch {
		if i > 0 && r.seg == batch[i-1].seg {
			continue
		}
		if err := sqlite.Datasync(r.seg.FD); err != nil {
			errs[r.seg] = err
			in.db.opts.Logger.Error("audit journal could not be synced; its appends are refused and a new journal is made", "journal", r.seg.Path, "err", err)
		}
	}
	for _, r := range batch {
		r.refused = errs[r.seg] != nil
	}
	in.jmu.Lock()
	for s := range errs {
		s.Bad = true
	}
	in.pend = append(in.pend, batch...)
	in.syncing = false
	more := len(in.unsynced) > 0
	in.jmu.Unlock()
	signal(in.work)
	if more {
		signal(in.syncWork)
	}
	for _, r := range batch {
		in.db.stats.latency.Observe(time.Since(r.start).Seconds())
		if r.refused {
			in.noteWrite(errs[r.seg])
			r.done <- fmt.Errorf("%w: journal: %w", guard.ErrAuditWrite, errs[r.seg])
			continue
		}
		in.noteWrite(nil)
		r.done <- nil
	}
}

// ingester moves the journal's records into the database, writes
// checkpoints and replaces full journal segments; it ends when Close has
// stopped appends and everything appended is in the database (or, if the
// database cannot take it, left in the journal for the next Open).
func (in *ingestion) ingester() {
	defer close(in.closed)
	t := time.NewTicker(in.db.opts.CheckpointEvery)
	defer t.Stop()
	wait := time.NewTimer(time.Hour)
	wait.Stop()
	var batch []*appendReq
	stopping, syncerDone := false, false
	for !stopping {
		var recheck <-chan time.Time
		if len(in.doubts) > 0 {
			recheck = time.After(doubtRecheck)
		}
		select {
		case <-recheck:
		case <-in.work:
			if in.db.pg || sqliteDirect {
				// An append waits for its commit here: no lingering.
				// The appends that come while one commits share the
				// next.
				break
			}
			// More records come while this one waits: they share its
			// transaction.
			wait.Reset(linger)
			select {
			case <-wait.C:
			case <-in.urgent:
				wait.Stop()
			case <-in.stop:
				wait.Stop()
				stopping = true
			}
		case <-in.urgent:
		case <-in.stop:
			stopping = true
		case <-t.C:
			in.rotate() // a segment that could not be made before
			in.recoverOrphans()
			in.db.ckpt.maybeCheckpoint()
			continue
		}
		for {
			in.settleDoubts(false)
			if stopping && !syncerDone {
				// Every append is answered and pending once the
				// syncer has ended (with durability normal it has
				// none).
				<-in.synced
				syncerDone = true
			}
			batch = in.take(batch[:0])
			if len(batch) == 0 {
				break
			}
			err := in.ingest(batch)
			clear(batch)
			if err == nil {
				if stopping {
					continue // everything, before the end
				}
				in.jmu.Lock()
				n := len(in.pend)
				in.jmu.Unlock()
				if n >= lingerAppends {
					signal(in.urgent)
				} else if n > 0 {
					signal(in.work)
				}
				break
			}
			if stopping {
				break
			}
			// Appends are refused until a batch goes in again.
			wait.Reset(retryAfter)
			select {
			case <-wait.C:
			case <-in.stop:
				wait.Stop()
				stopping = true
			}
		}
		in.rotate()
		in.db.ckpt.maybeCheckpoint()
	}
	in.finish()
}

// take moves the oldest pending appends, up to maxBatch records, to batch.
func (in *ingestion) take(batch []*appendReq) []*appendReq {
	in.jmu.Lock()
	defer in.jmu.Unlock()
	n, i := 0, 0
	for ; i < len(in.pend) && (i == 0 || n+len(in.pend[i].recs) <= maxBatch); i++ {
		n += len(in.pend[i].recs)
	}
	batch = append(batch, in.pend[:i]...)
	rest := copy(in.pend, in.pend[i:])
	clear(in.pend[rest:])
	in.pend = in.pend[:rest]
	return batch
}

// ingest commits a batch to the database. On failure the batch goes back
// to the front of what is pending and appends are refused until a batch
// goes in.
func (in *ingestion) ingest(batch []*appendReq) error {
	recs := batch
	if slices.ContainsFunc(batch, func(r *appendReq) bool { return r.refused }) {
		recs = slices.DeleteFunc(slices.Clone(batch), func(r *appendReq) bool { return r.refused })
	}
	var err error
	n := 0
	if len(recs) > 0 {
		in.commitMu.Lock()
		err = in.commitRetrying(recs)
		in.commitMu.Unlock()
		for _, r := range recs {
			n += len(r.recs)
		}
	}
	if in.db.pg || sqliteDirect {
		if e, ok := doubtful(err); ok {
			in.holdInDoubt(batch, e)
			return err
		}
		return in.answer(batch, n, err)
	}
	if err != nil {
		err = fmt.Errorf("audit commit: %w", err)
		in.noteWrite(err)
		if in.failure.Swap(&err) == nil {
			in.db.opts.Logger.Error("audit records cannot be moved into the database; new calls are refused until they can", "records", n, "err", err)
		}
		in.jmu.Lock()
		in.pend = append(slices.Clone(batch), in.pend...)
		in.room.Broadcast() // appends waiting for room are refused
		in.jmu.Unlock()
		return err
	}
	if in.failure.Swap(nil) != nil {
		in.db.opts.Logger.Info("audit records go into the database again")
	}
	if n > 0 {
		in.db.ckpt.dirty.Store(true)
		in.db.stats.batches.Observe(float64(n))
	}
	var last *sqlite.Segment
	for _, r := range batch {
		r.seg.Done++
		r.seg.DoneTill = r.end
		in.db.stats.backlog.Add(-int64(len(r.recs)))
		if last != nil && last != r.seg {
			_ = last.NoteIngested(last.DoneTill)
		}
		last = r.seg
	}
	if err := last.NoteIngested(last.DoneTill); err != nil {
		in.db.opts.Logger.Warn("audit journal header", "journal", last.Path, "err", err)
	}
	in.settled.Add(int64(len(batch)))
	in.progressed()
	return nil
}

// progressed wakes appends waiting for room and readers waiting for the
// ingester (caughtUp).
func (in *ingestion) progressed() {
	in.jmu.Lock()
	in.room.Broadcast()
	in.jmu.Unlock()
	in.progMu.Lock()
	close(in.progress)
	in.progress = make(chan struct{})
	in.progMu.Unlock()
}

// rotate replaces the journal segment appends go to once it is large (or
// could not be synced), and removes the earlier segments whose records
// are all in the database.
func (in *ingestion) rotate() {
	if in.db.pg {
		return // no journal
	}
	in.jmu.Lock()
	cur := in.seg
	full := cur.End >= sqlite.SegmentSize || cur.Bad
	in.jmu.Unlock()
	if full {
		// Made without holding the journal: appends go on meanwhile.
		s, err := sqlite.NewSegment(sqlite.JournalsDir(in.db.opts.Path), in.fsync)
		if err != nil {
			in.db.opts.Logger.Error("audit journal: a new segment could not be made; the current one goes on (or, if it could not be synced, appends are refused) until one can", "err", err)
		} else {
			in.jmu.Lock()
			in.seg = s
			in.own[s.Path] = true
			in.jmu.Unlock()
			in.segs = append(in.segs, s)
		}
	}
	synced := false
	for len(in.segs) > 1 {
		s := in.segs[0]
		in.jmu.Lock()
		all := s.Done == s.Appends // no append goes to it any more
		in.jmu.Unlock()
		if !all {
			return
		}
		if in.fsync && !synced {
			if err := in.syncFiles(); err != nil {
				in.db.opts.Logger.Error("audit: the database's files could not be synced; the journal stays until they are", "err", err)
				return
			}
			synced = true
		}
		if err := s.Close(true); err != nil {
			in.db.opts.Logger.Warn("audit journal", "journal", s.Path, "err", err)
		}
		in.jmu.Lock()
		delete(in.own, s.Path)
		in.jmu.Unlock()
		in.segs = in.segs[1:]
	}
}

// syncFiles makes what the ingester has committed durable: its commits
// are not fsync'd, so with durability full the database's files are
// synced before a journal segment with those records goes.
func (in *ingestion) syncFiles() error {
	var errs []error
	for _, p := range []string{in.db.opts.Path + "-wal", in.db.opts.Path} {
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, f.Sync(), f.Close())
	}
	return errors.Join(errs...)
}

// finish ends the ingester: a last checkpoint, and the journal segments
// closed, removed when every record in them is in the database (else kept
// for the next Open).
func (in *ingestion) finish() {
	if len(in.doubts) > 0 {
		in.settleDoubts(true)
		if batch := in.take(nil); len(batch) > 0 {
			_ = in.ingest(batch) // the corrections settling made
			in.settleDoubts(true)
		}
	}
	if in.db.ckpt.checkpointTurn(context.Background()) {
		if err := in.db.ckpt.writeCheckpoint(); err != nil {
			in.db.ckpt.logCheckpoint(err)
		}
		in.db.ckpt.releaseCheckpointTurn()
	}
	in.jmu.Lock()
	left := 0
	for _, r := range in.pend {
		if !r.refused {
			left += len(r.recs)
		}
	}
	in.jmu.Unlock()
	synced := true
	if in.fsync {
		if err := in.syncFiles(); err != nil {
			in.db.opts.Logger.Error("audit: the database's files could not be synced; the journal stays for the next start", "err", err)
			synced = false
		}
	}
	for _, s := range in.segs {
		keep := s.Done != s.Appends || !synced
		if keep {
			in.db.opts.Logger.Error("audit records stay in the journal: the next start moves them into the database", "journal", s.Path, "records", left)
		}
		if err := s.Close(!keep); err != nil {
			in.db.opts.Logger.Warn("audit journal", "journal", s.Path, "err", err)
		}
	}
	in.segs = nil
}

// caughtUp waits, up to a few seconds, until what this process and the
// others writing to the database have appended is in the database, so
// that a reader sees every record acknowledged before it began, and on
// PostgreSQL in the call index (completeIndex, whose failure the readers
// of the index that call it themselves report). It gives up early when
// the ingester cannot commit, or a journal's owner is gone.
func (in *ingestion) caughtUp(ctx context.Context) {
	if in.db.pg {
		defer func(ctx context.Context) { // once the records are in
			if err := in.db.completeIndex(ctx, 0); err != nil {
				in.db.opts.Logger.Debug("call index", "err", err)
			}
		}(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, caughtUpWait)
	defer cancel()
	if in.db.writable {
		in.jmu.Lock()
		target := in.appended
		in.jmu.Unlock()
		for in.settled.Load() < target && in.failed() == nil {
			in.progMu.Lock()
			ch := in.progress
			in.progMu.Unlock()
			if in.settled.Load() >= target {
				break
			}
			signal(in.urgent)
			select {
			case <-ch:
			case <-in.closed:
				return
			case <-ctx.Done():
				return
			}
		}
	}
	in.awaitJournals(ctx)
}

// caughtUpWait bounds how long a reader waits for the journals.
const caughtUpWait = 5 * time.Second

// journalPoll is how often a reader looks again at another process's
// journal it waits for.
const journalPoll = 2 * time.Millisecond

// awaitJournals waits until every live journal's header shows the
// records it held when the wait began in the database (or ctx ends). A
// journal whose owner is gone is left to the next writable Open.
func (in *ingestion) awaitJournals(ctx context.Context) {
	if in.db.pg || in.db.hold != nil {
		return // no journals: what is acknowledged is committed, or nothing is
	}
	files, _ := sqlite.Segments(sqlite.JournalsDir(in.db.opts.Path))
	for _, p := range files {
		in.jmu.Lock()
		own := in.own[p]
		in.jmu.Unlock()
		if own {
			continue // caughtUp waited for this process's own
		}
		if !awaitJournal(ctx, p) {
			return
		}
	}
}

// awaitJournal waits for one journal; it reports false when ctx ended.
func awaitJournal(ctx context.Context, path string) bool {
	f, err := filelock.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return true
	}
	defer f.Close()
	if !sqlite.OwnerAlive(f) {
		return true // no one writes to it
	}
	off, marked, err := sqlite.SegmentIngested(f)
	if err != nil {
		return true
	}
	end := sqlite.FramesEnd(f, off, marked)
	for off < end {
		select {
		case <-time.After(journalPoll):
		case <-ctx.Done():
			return false
		}
		if off, _, err = sqlite.SegmentIngested(f); err != nil || !sqlite.OwnerAlive(f) {
			// An owner that is gone may have been another process
			// moving in the journal of one that stopped: done.
			return true
		}
	}
	return true
}

// retryPause is the pause between two attempts at a batch that another
// process kept from its commit (SQLite's busy timeout has already waited).
const retryPause = 5 * time.Millisecond

// commitRetrying commits a batch, waiting up to BusyWait while other
// processes hold the database's lock.
func (in *ingestion) commitRetrying(batch []*appendReq) error {
	deadline := time.Now().Add(in.db.opts.BusyWait)
	for {
		err := in.commit(batch)
		if err == nil || !sqlite.IsBusy(err) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the database stayed locked by another process for %v: %w", in.db.opts.BusyWait, err)
		}
		in.db.opts.Logger.Debug("audit commit waits for another process", "err", err)
		time.Sleep(retryPause)
	}
}

func (in *ingestion) commit(batch []*appendReq) (err error) {
	ctx := context.Background()
	if in.db.pg {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, pgCommitWait)
		defer cancel()
	}
	if in.wc == nil {
		if in.wc, err = newWriterConn(ctx, in.db.aw, in.db.auth); err != nil {
			return err
		}
	}
	wc := in.wc
	in.db.stats.attempts.Add(1)
	begun := false
	err = wc.conn.Raw(func(dc any) error {
		if wc.pg {
			begun = true
			return wc.writePG(ctx, dc, batch)
		}
		if _, err := wc.begin.ExecContext(ctx, nil); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		begun = true
		return wc.write(ctx, dc, batch)
	})
	if err != nil && (begun || errors.Is(err, sql.ErrConnDone)) {
		in.endFailed(ctx, wc)
	}
	return err
}

// endFailed ends the transaction a failure left open on the audit
// writer's connection wc, under commitMu. When the connection is no use
// any more (the server closed it; database/sql, told by the driver, let
// it go), the writer gives it up and the next batch opens another: a
// connection kept after that would fail every batch with "connection is
// already closed", hiding the cause. A ROLLBACK that fails because SQLite
// already rolled back, as after a full disk, leaves it usable.
func (in *ingestion) endFailed(ctx context.Context, wc *writerConn) {
	if _, err := wc.conn.ExecContext(ctx, "ROLLBACK"); err == nil || wc.conn.PingContext(ctx) == nil {
		return
	}
	if in.wc == wc {
		in.wc = nil
	}
	_ = wc.discard()
}

// maybeCheckpoint signs a checkpoint when this process holds the
// checkpoint lease (checkpointlease.go), the last one is older than
// CheckpointEvery, and records were committed since, by this process or
// another. The first records this process commits do not wait for
// CheckpointEvery: it seeks the lease once at once, so that a guard
// killed in its first second leaves a log a checkpoint signs.
func (cp *checkpointState) maybeCheckpoint() {
	first := cp.lastCheckpoint.Load() == 0 && cp.dirty.Load() && !cp.eager.Swap(true)
	if !first && (time.Since(time.Unix(0, cp.lastCheckpoint.Load())) < cp.db.opts.CheckpointEvery ||
		time.Since(time.Unix(0, cp.lastTurn.Load())) < cp.db.opts.CheckpointEvery) {
		return
	}
	ctx := context.Background()
	if !cp.checkpointTurn(ctx) {
		return
	}
	cp.startMACs(ctx) // once what they waited for is gone
	if !cp.dirty.Load() && !cp.othersCommitted(ctx) {
		return
	}
	if err := cp.writeCheckpoint(); err != nil {
		cp.logCheckpoint(err)
	}
}

// insertRecord inserts a record; a text parameter bound to NULL stands for
// the empty string (see bindRecord). The last is the record's MAC (NULL:
// none).
const insertRecord = recordColumns + recordValues

const (
	recordColumns = `INSERT INTO records (seq, id, call_id, kind, time, session, client, protocol, server,
 direction, method, tool, arguments, pin, decision, decided_by, reason, outcome, result,
 request_size, response_size, duration_ms, detail, approval, prev_hash, hash, user_subject, user_email, user_groups, mac)
 VALUES `
	recordValues = `(?, coalesce(?,''), coalesce(?,''), coalesce(?,''), coalesce(?,''), coalesce(?,''),
 coalesce(?,''), coalesce(?,''), coalesce(?,''), coalesce(?,''), coalesce(?,''), coalesce(?,''),
 coalesce(?,''), coalesce(?,''), coalesce(?,''), coalesce(?,''), coalesce(?,''), coalesce(?,''),
 coalesce(?,''), ?, ?, ?, coalesce(?,''), coalesce(?,''), coalesce(?,''), coalesce(?,''),
 coalesce(?,''), coalesce(?,''), coalesce(?,''), ?)`
)

// insertArgs is the number of insertRecord's parameters.
const insertArgs = 30

// recordRows is how many records insertRecords inserts: a statement's
// fixed cost, among it a cursor opened on the table and on each of its
// indexes, is shared by that many rows. A batch's last records, fewer,
// go in one at a time.
const recordRows = 16

// insertRecords inserts recordRows records.
var insertRecords = recordColumns + recordValues + strings.Repeat(", "+recordValues, recordRows-1)

// bindRecord sets dst's values (insertArgs of them, their ordinals set) to
// r's columns and its MAC. An empty text is bound as NULL, which the
// statement turns into ”: it is not copied into SQLite's memory.
func bindRecord(dst []driver.NamedValue, r *guard.Record, mac []byte) {
	for i, v := range [insertArgs]any{r.Seq, r.ID, r.CallID, r.Kind, fmtTime(r.Time), r.Session, r.Client,
		r.Protocol, r.Server, r.Direction, r.Method, r.Tool, r.Arguments, r.Pin, r.Decision,
		r.DecidedBy, r.Reason, r.Outcome, r.Result, r.RequestSize, r.ResponseSize, r.DurationMS,
		r.Detail, r.Approval, r.PrevHash, r.Hash, r.User, r.UserEmail, audit.GroupsText(r.UserGroups), mac} {
		if v == "" {
			v = nil
		}
		dst[i].Value = v
	}
}

// writerConn is the audit writer's connection with its statements
// prepared once on the driver's connection: preparing them per commit
// cost more than the commit, and calling the driver directly spares
// database/sql's work per statement (its locks, a check and a slice of
// arguments per insert). The driver's connection and the statements are
// used only inside conn.Raw, and the statements are closed before the
// connection is.
type writerConn struct {
	conn    *sql.Conn
	pg      bool // on PostgreSQL (package postgres)
	begin   driverStmt
	commit  driverStmt
	tail    driverStmt
	ins     driverStmt
	insMany driverStmt   // insertRecords
	ix      *callIndexer // keeps the call index in the same transaction
	auth    *tailAuth    // the MAC key, and where MACs start (mac.go)
	mac     *audit.MACer // checks MACs of records read back, under auth's key
	batch   *audit.Batch // the rows each batch becomes
	macs    driverStmt   // selectMACsFrom
	args    [insertArgs]driver.NamedValue
	// The records chained and not yet inserted, fewer than recordRows,
	// and their MACs (copies: Batch.Add's is valid until the next).
	queued   []*guard.Record
	recMACs  [recordRows][]byte
	manyRecs [insertArgs * recordRows]driver.NamedValue
	row      [2]driver.Value
	buf      []byte // the canonical forms of records read back

	// The chain's tail as this connection last committed it, and the
	// database's data version right after that commit. SQLite changes a
	// connection's data version when it finds, as a transaction begins,
	// that another connection (of this process or another) has committed
	// since: while it is unchanged inside the write transaction, no one
	// else has written since this connection's last commit, and the tail
	// that commit left is still the tail. No one else can commit while
	// the transaction holds the write lock, so the check cannot go stale
	// before the records are committed.
	known     bool
	tailSeq   int64
	tailHash  string
	version   uint32
	tailReads int64 // times the tail was read from the table

	// The Merkle tree's right edge as this connection last committed it
	// (tree.go), valid under the same condition as the tail (its Edge nil
	// when it must be read again), with the hashes of the transaction's
	// leaves not yet inserted.
	tree     audit.Tree
	insTree  driverStmt
	getTree  driverStmt
	treeMax  driverStmt
	recsFrom driverStmt
	insTrees driverStmt // treeRows at a time
	treeArgs [2]driver.NamedValue
	manyArgs [2 * treeRows]driver.NamedValue

	// The runs of records this connection committed since the last
	// checkpoint, with their leaves (checkTail), and how many leaves.
	own       []ownRun
	ownLeaves int

	// held is how long the last batch held the audit lock (PostgreSQL).
	held time.Duration
	// pending says the last batch left calls for the indexer
	// (PostgreSQL, pgindex.go).
	pending bool
}

// driverStmt is what the writer needs of a driver's prepared statement.
type driverStmt interface {
	driver.Stmt
	driver.StmtExecContext
	driver.StmtQueryContext
}

const selectTail = `SELECT seq, hash FROM records ORDER BY seq DESC LIMIT 1`

func newWriterConn(ctx context.Context, aw *sql.DB, auth *tailAuth) (*writerConn, error) {
	if auth.key == nil {
		return nil, errors.New("audit writer: no MAC key: the checkpoint key was not read")
	}
	conn, err := aw.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("audit writer: %w", err)
	}
	wc := &writerConn{conn: conn, auth: auth, mac: audit.NewMACer(auth.key), batch: audit.NewBatch(audit.NewMACer(auth.key))}
	for i := range wc.args {
		wc.args[i].Ordinal = i + 1
	}
	for i := range wc.treeArgs {
		wc.treeArgs[i].Ordinal = i + 1
	}
	for i := range wc.manyArgs {
		wc.manyArgs[i].Ordinal = i + 1
	}
	for i := range wc.manyRecs {
		wc.manyRecs[i].Ordinal = i + 1
	}
	if err = sqlite.PersistWAL(ctx, conn); err == nil {
		err = conn.Raw(func(dc any) error {
			pc, ok := dc.(driver.ConnPrepareContext)
			if !ok {
				return errors.New("the driver cannot prepare statements")
			}
			_, wc.pg = postgres.PgxConn(dc)
			for _, p := range []struct {
				s *driverStmt
				q string
			}{{&wc.begin, "BEGIN IMMEDIATE"}, {&wc.commit, "COMMIT"}, {&wc.tail, selectTail}, {&wc.ins, insertRecord}, {&wc.insMany, insertRecords},
				{&wc.insTree, insertTreeHash}, {&wc.insTrees, insertTreeHashes}, {&wc.getTree, `SELECT hash FROM tree_hashes WHERE idx = ?`},
				{&wc.treeMax, `SELECT max(idx) FROM tree_hashes`}, {&wc.recsFrom, selectRecordMAC + ` WHERE seq > ? ORDER BY seq LIMIT ?`},
				{&wc.macs, selectMACsFrom}} {
				st, err := pc.PrepareContext(ctx, p.q)
				if err != nil {
					return err
				}
				if *p.s, ok = st.(driverStmt); !ok {
					st.Close()
					return errors.New("the driver's statements take no context")
				}
			}
			wc.ix, err = newCallIndexer(ctx, pc, wc.pg)
			return err
		})
	}
	if err != nil {
		_ = wc.discard()
		return nil, fmt.Errorf("audit writer: %w", err)
	}
	return wc, nil
}

// write appends the batch's records to the chain and commits them, in the
// transaction begun on dc: audit.Batch works out the rows, which are
// inserted as they come.
func (wc *writerConn) write(ctx context.Context, dc any, batch []*appendReq) (err error) {
	seq, prev, err := wc.chainTail(ctx, dc)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			wc.tree.Edge = nil // it holds leaves that were not committed
		}
	}()
	defer wc.dropQueued() // none left, unless the transaction failed
	// The edge is set again only once this transaction commits.
	edge := wc.tree.Edge
	wc.tree.Edge = nil
	wc.tree.Written() // left by a transaction that failed
	if edge == nil || edge.Size() != seq {
		if edge, err = wc.loadTree(ctx, seq); err != nil {
			return err
		}
	}
	wc.tree.Edge = edge
	calls, err := wc.ix.prefetch(ctx, batch)
	if err != nil {
		return err
	}
	b := wc.batch
	b.Begin(seq, prev, &wc.tree, calls)
	defer b.End()
	for _, req := range batch {
		for _, r := range req.recs {
			mac, err := b.Add(ctx, r, req.macStart)
			if err != nil {
				return err
			}
			if err := wc.queue(ctx, r, mac); err != nil {
				return err
			}
			if len(wc.tree.Hashes) >= 4*treeRows {
				if err := wc.flushTree(ctx); err != nil {
					return err
				}
			}
		}
	}
	if err := wc.flushRecords(ctx); err != nil {
		return err
	}
	if err := wc.flushTree(ctx); err != nil {
		return err
	}
	if err := wc.ix.write(ctx, b.Calls.Changes); err != nil {
		return err
	}
	if _, err := wc.commit.ExecContext(ctx, nil); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	last, hash := b.Tail()
	wc.tree.Edge = nil
	if v, err := sqlite.DataVersion(dc); err == nil || wc.pg {
		wc.known, wc.tailSeq, wc.tailHash, wc.version = true, last, hash, v
		wc.tree.Edge = edge
	}
	wc.noteOwn(ownRun{first: seq + 1, leaves: b.Leaves})
	return nil
}

// chainTail returns the chain's tail, inside the write transaction: the
// one this connection committed last if the data version says nothing else
// was committed since, else the last record in the table.
func (wc *writerConn) chainTail(ctx context.Context, dc any) (int64, string, error) {
	known := wc.known
	wc.known = false // until this transaction commits
	if known {
		if v, err := sqlite.DataVersion(dc); err == nil && v == wc.version {
			return wc.tailSeq, wc.tailHash, nil
		}
	}
	wc.tailReads++
	edge := wc.tree.Edge
	wc.tree.Edge = nil
	rows, err := wc.tail.QueryContext(ctx, nil)
	if err != nil {
		return 0, "", fmt.Errorf("chain tail: %w", err)
	}
	err = rows.Next(wc.row[:])
	cerr := rows.Close()
	switch {
	case errors.Is(err, io.EOF):
		return 0, "", cerr
	case err != nil:
		return 0, "", fmt.Errorf("chain tail: %w", err)
	case cerr != nil:
		return 0, "", fmt.Errorf("chain tail: %w", cerr)
	}
	seq, ok := wc.row[0].(int64)
	var hash string
	switch h := wc.row[1].(type) {
	case string:
		hash = h
	case []byte:
		hash = string(h)
	default:
		ok = false
	}
	if !ok {
		return 0, "", fmt.Errorf("chain tail: seq %T and hash %T, want an integer and text", wc.row[0], wc.row[1])
	}
	if known && seq == wc.tailSeq && hash == wc.tailHash {
		// Without a data version (PostgreSQL), the tail this connection
		// committed last, still the tail, says no one appended since:
		// seq only grows.
		wc.tree.Edge = edge
	}
	return seq, hash, nil
}

// queue adds a chained record with its MAC to those to insert, and
// inserts recordRows of them at once when there are as many.
func (wc *writerConn) queue(ctx context.Context, r *guard.Record, mac []byte) error {
	n := len(wc.queued)
	wc.recMACs[n] = append(wc.recMACs[n][:0], mac...)
	wc.queued = append(wc.queued, r)
	if len(wc.queued) < recordRows {
		return nil
	}
	for i, q := range wc.queued {
		bindRecord(wc.manyRecs[i*insertArgs:(i+1)*insertArgs], q, wc.recMACs[i])
	}
	_, err := wc.insMany.ExecContext(ctx, wc.manyRecs[:])
	wc.dropQueued()
	for i := range wc.manyRecs {
		wc.manyRecs[i].Value = nil // the records' text is not kept
	}
	if err != nil {
		return fmt.Errorf("insert records: %w", err)
	}
	return nil
}

// flushRecords inserts the records queued, one at a time.
func (wc *writerConn) flushRecords(ctx context.Context) error {
	defer wc.dropQueued()
	for i, r := range wc.queued {
		if err := wc.insert(ctx, r, wc.recMACs[i]); err != nil {
			return err
		}
	}
	return nil
}

// dropQueued forgets the records queued (after they were inserted, or
// when the transaction failed).
func (wc *writerConn) dropQueued() {
	clear(wc.queued)
	wc.queued = wc.queued[:0]
}

// insert inserts a record with its MAC.
func (wc *writerConn) insert(ctx context.Context, r *guard.Record, mac []byte) error {
	bindRecord(wc.args[:], r, mac)
	_, err := wc.ins.ExecContext(ctx, wc.args[:])
	for i := range wc.args {
		wc.args[i].Value = nil // the record's text is not kept
	}
	if err != nil {
		return fmt.Errorf("insert record: %w", err)
	}
	return nil
}

// closeStmts closes the prepared statements; the caller is inside
// conn.Raw.
func (wc *writerConn) closeStmts() error {
	var errs []error
	for _, s := range []*driverStmt{&wc.begin, &wc.commit, &wc.tail, &wc.ins, &wc.insMany, &wc.insTree, &wc.insTrees, &wc.getTree, &wc.treeMax, &wc.recsFrom, &wc.macs} {
		if *s != nil {
			errs = append(errs, (*s).Close())
			*s = nil
		}
	}
	if wc.ix != nil {
		errs = append(errs, wc.ix.close())
		wc.ix = nil
	}
	return errors.Join(errs...)
}

func (wc *writerConn) close() error {
	err := wc.conn.Raw(func(any) error { return wc.closeStmts() })
	return errors.Join(err, wc.conn.Close())
}

// discard closes the connection for good rather than return it to the
// pool (its state is unknown after a failure).
func (wc *writerConn) discard() error {
	_ = wc.conn.Raw(func(any) error {
		_ = wc.closeStmts()
		return driver.ErrBadConn
	})
	return wc.conn.Close()
}
