package store

import (
	"bytes"
	"context"
	"fmt"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
	"github.com/guard-mcp/guard/store/postgres"
	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/tlog"
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
func (in *ingestion) appendCommitted(req *appendReq) {
	in.jmu.Lock()
	for waited := false; in.db.stats.backlog.Load() >= maxBacklog; {
		if !waited {
			waited = true
			in.db.stats.waits.Add(1)
		}
		in.room.Wait()
	}
	in.pend = append(in.pend, req)
	in.appended++
	n := len(in.pend)
	in.db.stats.add(len(req.recs))
	in.jmu.Unlock()
	switch {
	case n >= lingerAppends:
		signal(in.urgent)
	case n == 1:
		signal(in.work)
	}
}

// answer ends a batch on PostgreSQL: each append learns whether its
// records were committed. n is the batch's records.
func (in *ingestion) answer(batch []*appendReq, n int, err error) error {
	if err != nil {
		err = fmt.Errorf("audit commit: %w", err)
		if in.failure.Swap(&err) == nil {
			in.db.opts.Logger.Error("audit records cannot be committed to the database; calls are refused until they can", "records", n, "err", err)
		}
	} else {
		if in.failure.Swap(nil) != nil {
			in.db.opts.Logger.Info("audit records are committed to the database again")
		}
		if n > 0 {
			in.db.ckpt.dirty.Store(true)
			in.db.stats.batches.Observe(float64(n))
		}
		if in.wc != nil && in.wc.held > 0 {
			in.db.stats.held.Observe(in.wc.held.Seconds())
		}
	}
	in.reply(batch, err)
	if err == nil && in.wc != nil && in.wc.pending {
		signal(in.index) // once the appends are answered
	}
	if err != nil {
		var fixes []*appendReq
		for _, r := range batch {
			if r.fix {
				fixes = append(fixes, r)
			}
		}
		in.retryFixes(fixes)
	}
	return err
}

// writePG appends the batch's records to the chain and commits them with
// their tree and the keys of their calls in three round trips
// (postgres.BeginBatch, the tree's edge in one statement when it is
// stale, postgres.CommitBatch): audit.Batch works out the rows. The call
// index's rows are the indexer's (pgindex.go). dc is the driver's
// connection.
func (wc *writerConn) writePG(ctx context.Context, dc any, batch []*appendReq) (err error) {
	conn, _ := postgres.PgxConn(dc)
	var ids []string
	var bases []int64
	seen := map[int64]bool{}
	for _, req := range batch {
		for _, r := range req.recs {
			if len(ids) == 0 || ids[len(ids)-1] != r.CallID { // a call's records, most often together
				ids = append(ids, r.CallID)
			}
			if b := audit.KeyMillis(r.Time); r.Kind == guard.KindRequest && !seen[b] {
				seen[b] = true
				bases = append(bases, b)
			}
		}
	}
	// 1. Begin, lock, read.
	wc.held = 0
	seq, prev, calls, err := postgres.BeginBatch(ctx, conn, ids, bases)
	if err != nil {
		return err
	}
	locked := time.Now()
	// 2. The tree's edge, read again only when someone else appended.
	edge := wc.tree.Edge
	wc.tree.Edge = nil
	wc.tree.Written() // left by a transaction that failed
	defer func() {
		if err != nil {
			wc.tree.Edge = nil // it holds leaves that were not committed
		}
	}()
	if !wc.known || seq != wc.tailSeq || prev != wc.tailHash || edge == nil || edge.Size() != seq {
		wc.tailReads++
		if edge, err = wc.edgePG(ctx, conn, seq); err != nil {
			return err
		}
		if edge == nil {
			if edge, err = wc.loadTree(ctx, seq); err != nil {
				return err
			}
			// loadTree completes a tree behind the records with hashes
			// it leaves for flushTree.
			if err := wc.flushTree(ctx); err != nil {
				return err
			}
		}
	}
	wc.known = false // until this transaction commits
	wc.tree.Edge = edge
	// 3. Write and commit.
	n := 0
	for _, req := range batch {
		n += len(req.recs)
	}
	cols := postgres.NewRecordColumns(n)
	ab := wc.batch
	ab.Begin(seq, prev, &wc.tree, calls)
	defer ab.End()
	for _, req := range batch {
		for _, r := range req.recs {
			mac, err := ab.Add(ctx, r, req.macStart)
			if err != nil {
				return err
			}
			cols.Add(r, bytes.Clone(mac))
		}
	}
	idx := make([]int64, len(wc.tree.Hashes))
	hashes := make([][]byte, len(wc.tree.Hashes))
	for i := range wc.tree.Hashes {
		idx[i], hashes[i] = wc.tree.First+int64(i), wc.tree.Hashes[i][:]
	}
	// The keys of the calls the batch touched: their rows and words are
	// written after the commit, outside the lock (pgindex.go).
	changes := ab.Calls.Changes
	ids, ks := make([]string, len(changes)), make([]int64, len(changes))
	for i, c := range changes {
		ids[i], ks[i] = c.ID, c.K
	}
	wc.tree.Edge = nil
	if err := postgres.CommitBatch(ctx, conn, cols, idx, hashes, ids, ks); err != nil {
		return err
	}
	wc.pending = len(ids) > 0
	wc.held = time.Since(locked)
	wc.tree.Written()
	last, hash := ab.Tail()
	wc.known, wc.tailSeq, wc.tailHash = true, last, hash
	wc.tree.Edge = edge
	wc.noteOwn(ownRun{first: seq + 1, leaves: ab.Leaves})
	return nil
}

// edgePG reads the tree's right edge at seq leaves, the chain's length,
// in one round trip (postgres.ReadEdge); it is nil when the tree is not
// that long, which loadTree works out.
func (wc *writerConn) edgePG(ctx context.Context, conn *pgx.Conn, seq int64) (*audit.Edge, error) {
	short := false
	edge, err := audit.LoadEdge(seq, func(idx []int64) ([]tlog.Hash, error) {
		m, hs, err := postgres.ReadEdge(ctx, conn, idx)
		if err != nil {
			return nil, err
		}
		out := make([]tlog.Hash, len(idx))
		if m < 0 || audit.TreeSize(m) != seq {
			short = true
			return out, nil
		}
		for i, h := range hs {
			if len(h) != tlog.HashSize {
				return nil, fmt.Errorf("tree hash %d is missing or malformed", idx[i])
			}
			copy(out[i][:], h)
		}
		return out, nil
	})
	if err != nil || short {
		return nil, err
	}
	return edge, nil
}
