package store

import (
	"fmt"
	"time"

	guard "github.com/guard-mcp/guard"
)

// On PostgreSQL an append is acknowledged once its records are committed
// there, not once a journal of the process's own holds them: a replica
// whose machine is lost for good has lost nothing it acknowledged. The
// ingester commits what is pending in batches as on SQLite (group commit:
// one transaction, one WAL flush on the server, for the records of many
// calls) and answers each append with its batch's outcome. A batch that
// cannot be committed (the server unreachable, a timeout) fails its
// appends, whose calls are refused; the next batch tries again on a new
// connection, so guard serves again by itself once the server is back.

// appendCommitted hands an append to the ingester; req.done is answered
// once its batch is committed or has failed.
func (db *DB) appendCommitted(req *appendReq) {
	db.jmu.Lock()
	for waited := false; db.stats.backlog.Load() >= maxBacklog; {
		if !waited {
			waited = true
			db.stats.waits.Add(1)
		}
		db.room.Wait()
	}
	db.pend = append(db.pend, req)
	db.appended++
	n := len(db.pend)
	db.stats.add(len(req.recs))
	db.jmu.Unlock()
	switch {
	case n >= lingerAppends:
		signal(db.urgent)
	case n == 1:
		signal(db.work)
	}
}

// answer ends a batch on PostgreSQL: each append learns whether its
// records were committed. n is the batch's records.
func (db *DB) answer(batch []*appendReq, n int, err error) error {
	if err != nil {
		err = fmt.Errorf("audit commit: %w", err)
		if db.failure.Swap(&err) == nil {
			db.opts.Logger.Error("audit records cannot be committed to the database; calls are refused until they can", "records", n, "err", err)
		}
	} else {
		if db.failure.Swap(nil) != nil {
			db.opts.Logger.Info("audit records are committed to the database again")
		}
		if n > 0 {
			db.dirty.Store(true)
			db.stats.batches.Observe(float64(n))
		}
	}
	for _, r := range batch {
		db.stats.backlog.Add(-int64(len(r.recs)))
		db.stats.latency.Observe(time.Since(r.start).Seconds())
		if err != nil {
			r.done <- fmt.Errorf("%w: %w", guard.ErrAuditWrite, err)
		} else {
			r.done <- nil
		}
	}
	db.settled.Add(int64(len(batch)))
	db.progressed()
	return err
}
