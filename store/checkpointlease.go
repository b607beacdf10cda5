package store

import (
	"context"
	"database/sql"
	"time"
)

// Of several processes writing to one database, one signs checkpoints at
// a time: the holder of the lease called checkpointLease. It signs for
// every process's records, noticing the others' commits by the log's
// size; the others sign none. A holder that stops renewing (it exited or
// hangs) loses the lease after checkpointLeaseTTL, and the next process
// whose turn comes takes it over. A process that closes signs a last
// checkpoint if the lease is its own or free, then releases it.

// checkpointLease names the lease of the process that signs checkpoints.
const checkpointLease = "checkpoint"

// checkpointLeaseTTL is how long the lease outlives its holder's last
// renewal: a few of its turns (CheckpointEvery) at least.
func (cp *checkpointState) checkpointLeaseTTL() time.Duration {
	return max(3*cp.db.opts.CheckpointEvery, 5*time.Second)
}

// checkpointTurn takes or renews the lease, and reports whether this
// process holds it. A database whose lease cannot be read or written
// (busy past its timeout, an older schema) leaves the turn to the next
// tick. The lease is written on the audit writer's connection, so that
// the writer does not take it for another writer's commit (chainTail).
func (cp *checkpointState) checkpointTurn(ctx context.Context) bool {
	cp.lastTurn.Store(time.Now().UnixNano())
	var ok bool
	err := cp.writerTx(ctx, func(conn *sql.Conn) (bool, error) {
		var err error
		ok, err = cp.db.Streams().leaseWith(ctx, conn, checkpointLease, cp.holder, cp.checkpointLeaseTTL())
		return err == nil, err
	})
	if err != nil {
		cp.db.opts.Logger.Debug("audit checkpoint lease", "err", err)
		return false
	}
	return ok
}

// othersCommitted reports whether the log holds records the last
// checkpoint this process signed does not cover.
func (cp *checkpointState) othersCommitted(ctx context.Context) bool {
	var n int64
	if err := cp.db.r.QueryRowContext(ctx, `SELECT coalesce(max(seq), 0) FROM records`).Scan(&n); err != nil {
		return false
	}
	return n > cp.signedSize.Load()
}

// releaseCheckpointTurn gives the lease up, when this process holds it.
func (cp *checkpointState) releaseCheckpointTurn() {
	if err := cp.db.Streams().ReleaseLease(context.Background(), checkpointLease, cp.holder); err != nil {
		cp.db.opts.Logger.Debug("audit checkpoint lease", "err", err)
	}
}
