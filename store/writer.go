package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/metrics"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// The audit log is written by group commit. Each process has one writer
// goroutine with its own connection; callers queue their records and wait.
// The writer takes whatever is queued, commits it in one transaction (the
// chain's tail is found inside it, as several processes share the
// database), and answers every caller of the batch. While a commit runs,
// the next batch gathers: the busier the process, the larger the batches
// and the cheaper each record, so the writer keeps pace without a timer.
// When it cannot, the queue fills and AppendAsync blocks: callers slow
// down, and nothing is refused for want of room.
//
// A batch that cannot be committed (disk full, I/O error) is refused to its
// callers only: the next batch tries again, so guard recovers by itself when
// the cause goes away. Another process holding the database's write lock is
// not a failure: the batch waits for it (up to Options.BusyWait).

// errClosed is returned for appends after Close.
var errClosed = errors.New("the database is closed")

// errReadOnly is returned for appends to a database opened read-only.
var errReadOnly = errors.New("the database is open read-only")

// queueCap bounds the appends waiting for the writer: beyond it,
// AppendAsync blocks until the writer has taken some (backpressure).
const queueCap = 1024

// maxBatch is the number of records past which the writer stops adding
// appends to a batch (one append's records always go together).
const maxBatch = 2048

// BatchBuckets are the bounds of the batch-size histogram, in records.
var BatchBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048}

type appendReq struct {
	recs  []*guard.Record
	done  chan error
	start time.Time
}

// auditStats are the writer's figures.
type auditStats struct {
	latency  *metrics.Histogram // until committed
	batches  *metrics.Histogram // records per transaction
	backlog  atomic.Int64       // records appended, not yet answered
	peak     atomic.Int64       // the most backlog has been
	attempts atomic.Int64       // transactions begun (retries included)
}

func newAuditStats() *auditStats {
	return &auditStats{latency: metrics.NewHistogram(metrics.LatencyBuckets), batches: metrics.NewHistogram(BatchBuckets)}
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

// AppendAsync queues records for the audit log and returns a channel that
// receives one value once they are committed (nil) or could not be (an
// error wrapping guard.ErrAuditWrite). The records of one call are
// committed in one transaction, in order. With durability normal, a caller
// that finds nothing queued and no commit running commits its records
// itself before AppendAsync returns. When the writer is behind by more than
// its queue holds, AppendAsync blocks until there is room. Writes
// do not depend on any caller's context: a client that goes away cannot
// cancel the record of what it did.
func (db *DB) AppendAsync(recs ...*guard.Record) <-chan error {
	done := make(chan error, 1)
	if db.queue == nil {
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
	// Close waits for appends that are blocked on a full queue (the writer
	// goes on taking from it), then closes the queue.
	db.closeMu.RLock()
	defer db.closeMu.RUnlock()
	if db.closing {
		done <- fmt.Errorf("%w: %w", guard.ErrAuditWrite, errClosed)
		return done
	}
	db.stats.add(len(recs))
	req := &appendReq{recs: recs, done: done, start: time.Now()}
	if !db.fsync && db.stats.backlog.Load() == int64(len(recs)) && db.commitMu.TryLock() {
		// Nothing waits and nothing is being committed: the caller
		// commits its own records, which spares a lone call two
		// hand-offs between goroutines. Under load the queue is never
		// empty for long and the writer batches as before. Not with
		// durability full: a caller that waited for its own fsync here
		// would keep the next records of its session (read by the same
		// goroutine) out of the batch that shares it. Nothing else is
		// outstanding (the backlog is this append's own), so no record
		// appended earlier can be committed after these. One attempt
		// only: if another process holds the database, the writer waits
		// for it instead, and the caller goes on.
		batch := []*appendReq{req}
		err := db.commit(batch)
		if err != nil && isBusy(err) {
			db.commitMu.Unlock()
			db.queue <- req
			return done
		}
		db.answer(batch, err)
		db.commitMu.Unlock()
		if db.checkpointDue() {
			select {
			case db.due <- struct{}{}:
			default:
			}
		}
		return done
	}
	db.queue <- req
	return done
}

// Append is AppendAsync that waits for the commit.
func (db *DB) Append(recs ...*guard.Record) error { return <-db.AppendAsync(recs...) }

// AppendLatency is how long appends take until committed (queueing
// included).
func (db *DB) AppendLatency() *metrics.Histogram { return db.stats.latency }

// BatchSizes is how many records each audit transaction committed.
func (db *DB) BatchSizes() *metrics.Histogram { return db.stats.batches }

// Backlog is the number of records appended and not yet answered: queued,
// blocked on the full queue, or being committed.
func (db *DB) Backlog() int64 { return db.stats.backlog.Load() }

// PeakBacklog is the most Backlog has been since Open.
func (db *DB) PeakBacklog() int64 { return db.stats.peak.Load() }

// writer commits whatever is queued in one transaction, answers the
// batch's callers, and writes checkpoints; it ends when Close has closed
// the queue and everything in it is answered.
func (db *DB) writer() {
	defer close(db.closed)
	t := time.NewTicker(db.opts.CheckpointEvery)
	defer t.Stop()
	var batch []*appendReq
	for {
		select {
		case req, ok := <-db.queue:
			if !ok {
				if err := db.writeCheckpoint(); err != nil {
					db.opts.Logger.Error("audit checkpoint", "err", err)
				}
				return
			}
			batch = db.collect(batch[:0], req)
			db.commitMu.Lock()
			db.commitBatch(batch)
			db.commitMu.Unlock()
			clear(batch)
			db.maybeCheckpoint()
		case <-db.due:
			db.maybeCheckpoint()
		case <-t.C:
			db.maybeCheckpoint()
		}
	}
}

// collect appends first and whatever else is queued to batch, up to
// maxBatch records.
func (db *DB) collect(batch []*appendReq, first *appendReq) []*appendReq {
	batch = append(batch, first)
	n := len(first.recs)
	for n < maxBatch {
		select {
		case r, ok := <-db.queue:
			if !ok {
				return batch
			}
			batch = append(batch, r)
			n += len(r.recs)
		default:
			return batch
		}
	}
	return batch
}

// commitBatch commits a batch and answers its callers. The caller holds
// commitMu.
func (db *DB) commitBatch(batch []*appendReq) {
	db.answer(batch, db.commitRetrying(batch))
}

// answer answers the callers of a batch with the outcome of its commit.
func (db *DB) answer(batch []*appendReq, err error) {
	n := 0
	for _, r := range batch {
		n += len(r.recs)
	}
	if err != nil {
		err = fmt.Errorf("%w: %w", guard.ErrAuditWrite, err)
		db.opts.Logger.Error("audit commit failed; its calls are refused", "records", n, "err", err)
	} else {
		db.dirty.Store(true)
		db.stats.batches.Observe(float64(n))
	}
	for _, r := range batch {
		db.stats.latency.Observe(time.Since(r.start).Seconds())
		db.stats.backlog.Add(-int64(len(r.recs)))
		r.done <- err
	}
}

// retryPause is the pause between two attempts at a batch that another
// process kept from its commit (SQLite's busy timeout has already waited).
const retryPause = 5 * time.Millisecond

// commitRetrying commits a batch, waiting up to BusyWait while other
// processes hold the database's lock.
func (db *DB) commitRetrying(batch []*appendReq) error {
	deadline := time.Now().Add(db.opts.BusyWait)
	for {
		err := db.commit(batch)
		if err == nil || !isBusy(err) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the database stayed locked by another process for %v: %w", db.opts.BusyWait, err)
		}
		db.opts.Logger.Debug("audit commit waits for another process", "err", err)
		time.Sleep(retryPause)
	}
}

// isBusy reports whether err is SQLite's "busy" or "locked": another
// connection holds a lock, which goes away.
func isBusy(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	c := se.Code() & 0xff
	return c == sqlite3.SQLITE_BUSY || c == sqlite3.SQLITE_LOCKED
}

func (db *DB) commit(batch []*appendReq) (err error) {
	ctx := context.Background()
	if db.wc == nil {
		if db.wc, err = newWriterConn(ctx, db.aw); err != nil {
			return err
		}
	}
	wc := db.wc
	db.stats.attempts.Add(1)
	begun := false
	err = wc.conn.Raw(func(dc any) error {
		if _, err := wc.begin.ExecContext(ctx, nil); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		begun = true
		return wc.write(ctx, dc, batch)
	})
	if err != nil && begun {
		if _, rerr := wc.conn.ExecContext(ctx, "ROLLBACK"); rerr != nil && wc.conn.PingContext(ctx) != nil {
			// The connection is no use any more: the next batch opens
			// another. (A ROLLBACK that fails because SQLite already
			// rolled back, as after a full disk, leaves it usable.)
			db.wc = nil
			_ = wc.discard()
		}
	}
	return err
}

// checkpointDue reports whether records were committed since the last
// checkpoint and it is older than CheckpointEvery.
func (db *DB) checkpointDue() bool {
	return db.dirty.Load() && time.Since(time.Unix(0, db.lastCheckpoint.Load())) >= db.opts.CheckpointEvery
}

func (db *DB) maybeCheckpoint() {
	if !db.checkpointDue() {
		return
	}
	if err := db.writeCheckpoint(); err != nil {
		db.opts.Logger.Error("audit checkpoint", "err", err)
	}
}

// insertRecord inserts a record; a text parameter bound to NULL stands for
// the empty string (see writerConn.insert).
const insertRecord = `INSERT INTO records (seq, id, call_id, kind, time, session, client, protocol, server,
 direction, method, tool, arguments, pin, decision, decided_by, reason, outcome, result,
 request_size, response_size, duration_ms, detail, prev_hash, hash)
 VALUES (?, coalesce(?,''), coalesce(?,''), coalesce(?,''), coalesce(?,''), coalesce(?,''),
 coalesce(?,''), coalesce(?,''), coalesce(?,''), coalesce(?,''), coalesce(?,''), coalesce(?,''),
 coalesce(?,''), coalesce(?,''), coalesce(?,''), coalesce(?,''), coalesce(?,''), coalesce(?,''),
 coalesce(?,''), ?, ?, ?, coalesce(?,''), coalesce(?,''), coalesce(?,''))`

// insertArgs is the number of insertRecord's parameters.
const insertArgs = 25

// writerConn is the audit writer's connection with its statements
// prepared once on the driver's connection: preparing them per commit
// cost more than the commit, and calling the driver directly spares
// database/sql's work per statement (its locks, a check and a slice of
// arguments per insert). The driver's connection and the statements are
// used only inside conn.Raw, and the statements are closed before the
// connection is.
type writerConn struct {
	conn   *sql.Conn
	begin  driverStmt
	commit driverStmt
	tail   driverStmt
	ins    driverStmt
	args   [insertArgs]driver.NamedValue
	row    [2]driver.Value
	buf    []byte // records' canonical forms, to hash

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
}

// maxHashBuf is the largest buffer for canonical forms the writer keeps
// from one commit to the next.
const maxHashBuf = 64 << 10

// driverStmt is what the writer needs of a driver's prepared statement.
type driverStmt interface {
	driver.Stmt
	driver.StmtExecContext
	driver.StmtQueryContext
}

const selectTail = `SELECT seq, hash FROM records ORDER BY seq DESC LIMIT 1`

func newWriterConn(ctx context.Context, aw *sql.DB) (*writerConn, error) {
	conn, err := aw.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("audit writer: %w", err)
	}
	wc := &writerConn{conn: conn}
	for i := range wc.args {
		wc.args[i].Ordinal = i + 1
	}
	if err = persistWAL(ctx, conn); err == nil {
		err = conn.Raw(func(dc any) error {
			pc, ok := dc.(driver.ConnPrepareContext)
			if !ok {
				return errors.New("the driver cannot prepare statements")
			}
			for _, p := range []struct {
				s *driverStmt
				q string
			}{{&wc.begin, "BEGIN IMMEDIATE"}, {&wc.commit, "COMMIT"}, {&wc.tail, selectTail}, {&wc.ins, insertRecord}} {
				st, err := pc.PrepareContext(ctx, p.q)
				if err != nil {
					return err
				}
				if *p.s, ok = st.(driverStmt); !ok {
					st.Close()
					return errors.New("the driver's statements take no context")
				}
			}
			return nil
		})
	}
	if err != nil {
		_ = wc.discard()
		return nil, fmt.Errorf("audit writer: %w", err)
	}
	return wc, nil
}

// write appends the batch's records to the chain and commits them, in the
// transaction begun on dc.
func (wc *writerConn) write(ctx context.Context, dc any, batch []*appendReq) error {
	seq, prev, err := wc.chainTail(ctx, dc)
	if err != nil {
		return err
	}
	for _, req := range batch {
		for _, r := range req.recs {
			seq++
			r.Seq, r.PrevHash = seq, prev
			r.Hash, wc.buf = hashRecord(wc.buf, r)
			prev = r.Hash
			if err := wc.insert(ctx, r); err != nil {
				return err
			}
		}
	}
	if cap(wc.buf) > maxHashBuf {
		wc.buf = nil // a large record's buffer is not kept
	}
	if _, err := wc.commit.ExecContext(ctx, nil); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	if v, err := dataVersion(dc); err == nil {
		wc.known, wc.tailSeq, wc.tailHash, wc.version = true, seq, prev, v
	}
	return nil
}

// chainTail returns the chain's tail, inside the write transaction: the
// one this connection committed last if the data version says nothing else
// was committed since, else the last record in the table.
func (wc *writerConn) chainTail(ctx context.Context, dc any) (int64, string, error) {
	known := wc.known
	wc.known = false // until this transaction commits
	if known {
		if v, err := dataVersion(dc); err == nil && v == wc.version {
			return wc.tailSeq, wc.tailHash, nil
		}
	}
	wc.tailReads++
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
	return seq, hash, nil
}

// dataVersion is SQLite's data version of the main database on the
// driver's connection dc (SQLITE_FCNTL_DATA_VERSION): it changes with
// every commit the connection has seen, its own and those of others.
func dataVersion(dc any) (uint32, error) {
	fc, ok := dc.(sqlite.FileControl)
	if !ok {
		return 0, errors.New("data version: the driver has no file control")
	}
	v, err := fc.FileControlDataVersion("main")
	if err != nil {
		return 0, fmt.Errorf("data version: %w", err)
	}
	return v, nil
}

func (wc *writerConn) insert(ctx context.Context, r *guard.Record) error {
	a := &wc.args
	for i, v := range [insertArgs]any{r.Seq, r.ID, r.CallID, r.Kind, fmtTime(r.Time), r.Session, r.Client,
		r.Protocol, r.Server, r.Direction, r.Method, r.Tool, r.Arguments, r.Pin, r.Decision,
		r.DecidedBy, r.Reason, r.Outcome, r.Result, r.RequestSize, r.ResponseSize, r.DurationMS,
		r.Detail, r.PrevHash, r.Hash} {
		if v == "" {
			v = nil // bound without copying an empty string into SQLite's memory
		}
		a[i].Value = v
	}
	_, err := wc.ins.ExecContext(ctx, a[:])
	for i := range a {
		a[i].Value = nil // the record's text is not kept
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
	for _, s := range []*driverStmt{&wc.begin, &wc.commit, &wc.tail, &wc.ins} {
		if *s != nil {
			errs = append(errs, (*s).Close())
			*s = nil
		}
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

// persistWAL keeps the -wal and -shm files when the last connection
// closes, so that a reader opening the database read-only (on a full disk,
// say) finds them and creates nothing.
func persistWAL(ctx context.Context, conn *sql.Conn) error {
	return conn.Raw(func(dc any) error {
		fc, ok := dc.(sqlite.FileControl)
		if !ok {
			return nil
		}
		if _, err := fc.FileControlPersistWAL("main", 1); err != nil {
			return fmt.Errorf("persist WAL: %w", err)
		}
		return nil
	})
}
