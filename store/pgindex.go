package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/guard-mcp/guard/audit"
	"github.com/guard-mcp/guard/store/postgres"
	"github.com/jackc/pgx/v5"
)

// On PostgreSQL the call index's rows and words are written after the
// batch that carries their records commits, outside the audit lock
// (store/postgres/index.go): the batch hands out its calls' keys and
// leaves a row in call_pending, and the process's indexer writes the rows
// of every pending batch it can claim, its own and those another replica
// left (one that stopped between the two transactions). Whatever reads
// the call index first completes the batches pending when it begins
// (completeIndex), writing them itself or waiting for their writers, so
// that it never misses a committed call.

// indexClaim is how many pending batches one transaction of the indexer
// writes.
const indexClaim = 64

// indexPoll is how often a reader looks again at batches that others are
// writing.
const indexPoll = time.Millisecond

// indexLinger is how long the indexer lets batches gather once one is
// committed before it writes their rows. A call's request and its
// outcome are committed in two batches (the request before the call is
// forwarded); written one batch at a time, its row is inserted and then
// updated, in each of the call index's indexes, and its words made
// twice. Gathered, a call that ends within the linger gets its row and
// words once, and a transaction (its claim, its locks, its commit)
// serves the batches of the linger rather than one. A query does not
// wait for the linger: it writes the pending batches itself first
// (completeIndex).
const indexLinger = 50 * time.Millisecond

// indexer writes the call index's rows of pending batches once one is
// committed and indexLinger has passed, until the ingester has ended,
// and then those left.
func (in *ingestion) indexer() {
	defer close(in.indexed)
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	for {
		select {
		case <-in.index:
		case <-in.closed:
			in.indexPending()
			return
		}
		linger.Reset(time.Duration(in.linger.Load()))
		select {
		case <-linger.C:
		case <-in.closed:
			linger.Stop()
			in.indexPending()
			return
		}
		in.indexPending()
	}
}

// indexPending writes the rows of the pending batches no one else is
// writing, in claims of up to indexClaim batches until none is left. A
// failure is logged: the next batch, or a reader, writes them.
func (in *ingestion) indexPending() {
	if in.noIndex.Load() {
		return
	}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), pgCommitWait)
		n, err := in.db.writePending(ctx, math.MaxInt64)
		cancel()
		if err != nil {
			in.db.opts.Logger.Warn("call index: the rows of committed calls are not written yet; the next batch or query writes them", "err", err)
			return
		}
		if n == 0 {
			return
		}
	}
}

// writePending claims up to indexClaim pending batches whose first
// record is at most upTo and that no one else is writing, and writes
// their calls' rows, in one transaction on a connection of the call
// index's writers' pool. n is how many calls it claimed (0: no batch).
func (db *DB) writePending(ctx context.Context, upTo int64) (n int, err error) {
	c, err := db.ix.Conn(ctx)
	if err != nil {
		return 0, fmt.Errorf("call index: %w", err)
	}
	defer c.Close()
	err = c.Raw(func(dc any) error {
		conn, ok := postgres.PgxConn(dc)
		if !ok {
			return errors.New("call index: not a PostgreSQL connection")
		}
		n, err = writePendingOn(ctx, conn, upTo)
		if err != nil {
			if _, rerr := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK"); rerr != nil {
				return errors.Join(err, driver.ErrBadConn) // the pool drops it
			}
		}
		return err
	})
	return n, err
}

// writePendingOn is writePending on conn.
func writePendingOn(ctx context.Context, conn *pgx.Conn, upTo int64) (int, error) {
	keys, recs, err := postgres.ClaimPending(ctx, conn, upTo, indexClaim)
	if err != nil || len(keys) == 0 {
		return 0, err
	}
	// Each call's row made again from all its records: a reader that
	// knows no row, and keys that are replaced by those handed out.
	var x audit.CallIndex
	x.Reset(noCalls{})
	for _, r := range recs {
		if err := x.Add(ctx, r); err != nil {
			return 0, err
		}
	}
	rows := postgres.NewCallColumns(len(x.Changes))
	words := &postgres.CallWords{}
	for _, c := range x.Changes {
		k, ok := keys[c.ID]
		if !ok {
			continue // not claimed: a record's call_id matched by another's
		}
		c.K = k
		rows.Add(&c.Call)
		if c.Args == "" && c.Result == "" {
			words.Empty = append(words.Empty, k)
			continue
		}
		words.K = append(words.K, k)
		words.T = append(words.T, c.Args+" "+c.Result)
	}
	if err := postgres.WriteCalls(ctx, conn, rows, words); err != nil {
		return 0, err
	}
	return len(keys), nil
}

// noCalls is the call index as writePendingOn reads it: empty.
type noCalls struct{}

func (noCalls) Call(context.Context, string) (audit.Call, bool, error) {
	return audit.Call{}, false, nil
}

func (noCalls) Keys(_ context.Context, base int64) (next, last int64, err error) { return base, 0, nil }

// completeIndex returns once the call index holds the rows of every batch
// whose first record is at most upTo (0: of every batch pending when it
// begins), writing those no one is writing and waiting for the others,
// up to caughtUpWait. A read-only process only waits; a batch left
// pending by a writer that stopped is written by the next writable
// process, and until then a read-only reader's query fails rather than
// miss its calls. On SQLite it does nothing: the ingester indexes in the
// transaction that commits.
func (db *DB) completeIndex(ctx context.Context, upTo int64) error {
	if !db.pg {
		return nil
	}
	if upTo == 0 {
		var last int64
		err := db.r.QueryRowContext(ctx, `SELECT coalesce(max(first_seq), 0) FROM call_pending`).Scan(&last)
		if err != nil {
			if db.schema.noPending {
				return nil
			}
			return fmt.Errorf("call index: %w", err)
		}
		if last == 0 {
			return nil
		}
		upTo = last
	}
	ctx, cancel := context.WithTimeout(ctx, caughtUpWait)
	defer cancel()
	for {
		if db.writable {
			n, err := db.writePending(ctx, upTo)
			if err != nil {
				return err
			}
			if n > 0 {
				continue
			}
		}
		var left bool
		if err := db.r.QueryRowContext(ctx, postgres.PendingQuery, upTo).Scan(&left); err != nil {
			return fmt.Errorf("call index: %w", err)
		}
		if !left {
			return nil
		}
		select {
		case <-time.After(indexPoll):
		case <-ctx.Done():
			return fmt.Errorf("call index: the rows of calls committed up to record %d are not written yet (a writable guard writes them): %w", upTo, ctx.Err())
		}
	}
}
