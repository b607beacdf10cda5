package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/internal/repeated"
)

// Lease takes or renews the lease called name for holder, for ttl from
// now, and reports whether holder holds it. A lease is free when no one
// holds it, when its holder released it, or when it expired (its holder
// stopped renewing it); otherwise it stays with its holder. Several
// processes sharing the database call it for the same name: at any time
// at most one holds it, as far as their clocks agree.
func (s Streams) Lease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	return s.leaseWith(ctx, s.db.w, name, holder, ttl)
}

// execer runs a statement: a pool, or one connection.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// leaseWith is Lease with the statement run by ex.
func (s Streams) leaseWith(ctx context.Context, ex execer, name, holder string, ttl time.Duration) (bool, error) {
	if name == "" || holder == "" {
		return false, errors.New("lease: a lease needs a name and a holder")
	}
	now := s.db.opts.Now()
	res, err := ex.ExecContext(ctx, `INSERT INTO leases (name, holder, expires, acquired) VALUES (?1, ?2, ?3, ?4)
		ON CONFLICT (name) DO UPDATE SET
			acquired = CASE WHEN leases.holder = excluded.holder AND leases.expires > ?5 THEN leases.acquired ELSE excluded.acquired END,
			holder = excluded.holder, expires = excluded.expires
		WHERE leases.holder = excluded.holder OR leases.expires <= ?5`,
		name, holder, now.Add(ttl).UnixMilli(), fmtTime(now), now.UnixMilli())
	if err != nil {
		return false, fmt.Errorf("lease %s: %w", name, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("lease %s: %w", name, err)
	}
	return n > 0, nil
}

// ReleaseLease gives up the lease called name if holder holds it, so that
// another process takes it without waiting for it to expire.
func (s Streams) ReleaseLease(ctx context.Context, name, holder string) error {
	if _, err := s.db.w.ExecContext(ctx, `UPDATE leases SET expires = 0 WHERE name = ? AND holder = ?`, name, holder); err != nil {
		return fmt.Errorf("lease %s: release: %w", name, err)
	}
	return nil
}

// LeaseHolder returns who holds the lease called name ("" when no one
// does: never taken, released, or expired).
func (s Streams) LeaseHolder(ctx context.Context, name string) (string, error) {
	var holder string
	err := s.db.r.QueryRowContext(ctx, `SELECT holder FROM leases WHERE name = ? AND expires > ?`,
		name, s.db.opts.Now().UnixMilli()).Scan(&holder)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("lease %s: %w", name, err)
	}
	return holder, nil
}

// WithLease runs fn while holder holds the lease called name: it takes
// the lease (trying again every ttl/3 while another holds it), runs fn
// with a context that ends when the lease is lost (a renewal, every ttl/3,
// failed) or ctx ends, and, once fn has returned, takes the lease again
// and so on, until ctx ends. It releases the lease before it returns. fn
// should return soon after its context ends: the lease may be another's
// by then.
func (s Streams) WithLease(ctx context.Context, name, holder string, ttl time.Duration, fn func(context.Context)) {
	every := ttl / 3
	t := time.NewTicker(every)
	defer t.Stop()
	taking := &repeated.Condition{Logger: s.db.opts.Logger.With("lease", name), Level: slog.LevelWarn,
		Msg: "lease: cannot take it; trying again", What: "lease: taking it"}
	for {
		held, err := s.Lease(ctx, name, holder, ttl)
		switch {
		case err == nil:
			taking.Ok()
		case ctx.Err() == nil:
			taking.Failed("err", err)
		}
		if held {
			s.whileHeld(ctx, name, holder, ttl, t, fn)
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			if err := s.ReleaseLease(rctx, name, holder); err != nil {
				s.db.opts.Logger.Warn("lease: cannot release it; it expires by itself", "lease", name, "err", err)
			}
			cancel()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// whileHeld runs fn, renewing the lease on every tick, until fn returns;
// fn's context ends when a renewal fails.
func (s Streams) whileHeld(ctx context.Context, name, holder string, ttl time.Duration, t *time.Ticker, fn func(context.Context)) {
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(fctx)
	}()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			held, err := s.Lease(fctx, name, holder, ttl)
			if !held {
				if fctx.Err() == nil {
					s.db.opts.Logger.Warn("lease lost: another process took it, or it could not be renewed", "lease", name, "err", err)
				}
				cancel()
				<-done
				return
			}
		}
	}
}

// StreamCursor returns the seq of the last record the receiver is known
// to have (0: none yet).
func (s Streams) StreamCursor(ctx context.Context, receiver string) (int64, error) {
	var seq int64
	err := s.db.r.QueryRowContext(ctx, `SELECT seq FROM stream_cursors WHERE receiver = ?`, receiver).Scan(&seq)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("stream cursor %s: %w", receiver, err)
	}
	return seq, nil
}

// ErrLeaseLost is returned by SetStreamCursor when the writer no longer
// holds the lease it streams under.
var ErrLeaseLost = errors.New("the lease is held by another process")

// SetStreamCursor moves the receiver's cursor forward to seq, on behalf of
// holder of the lease called lease: a process that lost the lease (and
// may lag behind the one that took it) moves no cursor, and no cursor
// moves back.
func (s Streams) SetStreamCursor(ctx context.Context, lease, holder, receiver string, seq int64) error {
	now := s.db.opts.Now()
	res, err := s.db.w.ExecContext(ctx, `INSERT INTO stream_cursors (receiver, seq, updated)
		SELECT ?1, ?2, ?3 WHERE EXISTS (SELECT 1 FROM leases WHERE name = ?4 AND holder = ?5 AND expires > ?6)
		ON CONFLICT (receiver) DO UPDATE SET seq = excluded.seq, updated = excluded.updated
		WHERE excluded.seq > stream_cursors.seq`,
		receiver, seq, fmtTime(now), lease, holder, now.UnixMilli())
	if err != nil {
		return fmt.Errorf("stream cursor %s: %w", receiver, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		if held, _ := s.LeaseHolder(ctx, lease); held != holder {
			return fmt.Errorf("stream cursor %s: %w", receiver, ErrLeaseLost)
		}
	}
	return nil
}

// RecordsAfter returns up to limit records that follow seq, in order:
// what is in the database now, without waiting for what processes have
// appended and not yet moved in (unlike Records).
func (s Streams) RecordsAfter(ctx context.Context, seq int64, limit int) ([]*guard.Record, error) {
	rows, err := s.db.r.QueryContext(ctx, selectRecord+` WHERE seq > ? ORDER BY seq LIMIT ?`, seq, limit)
	if err != nil {
		return nil, fmt.Errorf("records after %d: %w", seq, err)
	}
	defer rows.Close()
	var out []*guard.Record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, fmt.Errorf("records after %d: %w", seq, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("records after %d: %w", seq, err)
	}
	return out, nil
}

// LastSeq returns the seq of the last record in the database (0: none).
func (s Streams) LastSeq(ctx context.Context) (int64, error) {
	var seq sql.NullInt64
	if err := s.db.r.QueryRowContext(ctx, `SELECT MAX(seq) FROM records`).Scan(&seq); err != nil {
		return 0, fmt.Errorf("last record: %w", err)
	}
	return seq.Int64, nil
}

// StreamLag says how far the receiver's cursor is behind the log: the
// records after it, and the time of the first of them (zero when none).
func (s Streams) StreamLag(ctx context.Context, receiver string) (records int64, oldest time.Time, err error) {
	var t sql.NullString
	err = s.db.r.QueryRowContext(ctx, `SELECT COALESCE((SELECT MAX(seq) FROM records), 0) - c.seq,
		(SELECT time FROM records WHERE seq = c.seq + 1)
		FROM (SELECT COALESCE((SELECT seq FROM stream_cursors WHERE receiver = ?), 0) AS seq) c`, receiver).Scan(&records, &t)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("stream lag %s: %w", receiver, err)
	}
	return records, parseTime(t.String), nil
}

// Committed returns a channel closed when this process next moves
// records into the database. Records other processes commit are not
// signalled: a reader that follows the log looks again now and then.
func (s Streams) Committed() <-chan struct{} {
	s.db.ing.progMu.Lock()
	defer s.db.ing.progMu.Unlock()
	return s.db.ing.progress
}

// CaughtUp waits until what this process (and the others writing to the
// database) appended before it was called is in the database, or ctx
// ends, or a few seconds have passed.
func (s Streams) CaughtUp(ctx context.Context) { s.db.ing.caughtUp(ctx) }

// Streams keeps the leases that let one process at a time do a job for
// all (stream the audit log, announce holds, sign checkpoints) and the
// cursors of the receivers the log is streamed to, and reads the log as
// a follower of it does; DB.Streams returns it.
type Streams struct{ db *DB }

// Streams returns the store of leases and stream cursors.
func (db *DB) Streams() Streams { return Streams{db} }
