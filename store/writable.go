package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Whether the audit log can be written is what a balancer needs to know
// of a replica: every call a replica answers needs its records written,
// and one that cannot write them refuses every call. The store follows
// each append's outcome: the log is unwritable from the first append
// that fails (or probe, ProbeWrite) until one succeeds again.

// writeFailure is why the audit log could not be written.
type writeFailure struct {
	err   error     // the latest failure's
	since time.Time // the first's of the failures in a row
}

// writability follows the outcome of the appends: what failed last, and
// how many succeeded.
type writability struct {
	failure atomic.Pointer[writeFailure] // nil while the log can be written
	ok      atomic.Int64                 // appends that succeeded
	mu      sync.Mutex                   // for a change of failure, and changed
	changed chan struct{}                // closed at the next change; nil until asked for
}

// noteWrite records the outcome of an append (or of the ingester's
// commit, or of a probe). It costs an atomic load or two while nothing
// changes: it is called once for every append.
func (in *ingestion) noteWrite(err error) {
	w := &in.writes
	if err == nil {
		w.ok.Add(1)
		if w.failure.Load() == nil {
			return
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	was := w.failure.Load()
	switch {
	case err == nil:
		w.failure.Store(nil)
	case was != nil:
		w.failure.Store(&writeFailure{err: err, since: was.since}) // the same failure goes on
		return
	default:
		w.failure.Store(&writeFailure{err: err, since: in.db.opts.Now()})
	}
	if w.changed != nil {
		close(w.changed)
		w.changed = nil
	}
}

// Writing keeps what the write path reports of itself: whether the audit
// log can be written (the health of the appends, and the probe of their
// path) and the figures of the appends (latency, batches, backlog);
// DB.Writing returns it. The appends themselves are DB's.
type Writing struct{ db *DB }

// Writing returns the write path's health and figures.
func (db *DB) Writing() Writing { return Writing{db} }

// WriteFailure says why the audit log cannot be written, and since when:
// the error of the latest failed append (or probe) from the first one
// that failed until an append succeeds again; a nil error while it can
// be written.
func (w Writing) WriteFailure() (since time.Time, err error) {
	if f := w.db.ing.writes.failure.Load(); f != nil {
		return f.since, f.err
	}
	return time.Time{}, nil
}

// WritesChanged returns a channel that is closed when the audit log next
// becomes unwritable, or writable again.
func (w Writing) WritesChanged() <-chan struct{} {
	ws := &w.db.ing.writes
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.changed == nil {
		ws.changed = make(chan struct{})
	}
	return ws.changed
}

// Writes is a count that moves whenever appends succeed (on PostgreSQL,
// once for each batch committed): one that has not moved since a moment
// ago says nothing was written meanwhile.
func (w Writing) Writes() int64 { return w.db.ing.writes.ok.Load() }

// ProbeWrite tries the audit log's write path without writing a record:
// a write transaction on the audit writer's connection that appends
// nothing, the one every batch goes through (on PostgreSQL: a connection,
// the audit lock, the chain's tail), after what refuses appends on SQLite
// (an ingester that cannot commit, a journal that could not be synced).
// A failure counts as a failed write (WriteFailure); a success does not
// make the log writable again: only an append that succeeds does, so
// that whoever probes can record the recovery.
func (w Writing) ProbeWrite(ctx context.Context) error {
	err := w.db.ing.probeWrite(ctx)
	if err != nil && ctx.Err() == nil {
		w.db.ing.noteWrite(err)
	}
	return err
}

func (in *ingestion) probeWrite(ctx context.Context) error {
	if !in.db.writable {
		return errReadOnly
	}
	if !in.db.pg {
		// The ingester tries its batch again by itself; a journal that
		// could not be synced is replaced before the next append.
		if err := in.failed(); err != nil {
			return err
		}
		in.jmu.Lock()
		bad := in.seg != nil && in.seg.Bad
		in.jmu.Unlock()
		if bad {
			return errors.New("the journal could not be synced; a new one is being made")
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	in.commitMu.Lock()
	defer in.commitMu.Unlock()
	// As long as a batch would wait: on SQLite up to BusyWait for other
	// processes' locks, on PostgreSQL up to pgCommitWait.
	if err := in.commitRetrying(nil); err != nil {
		return fmt.Errorf("audit commit: %w", err)
	}
	return nil
}
