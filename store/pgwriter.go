package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
	"github.com/guard-mcp/guard/store/postgres"
	"github.com/jackc/pgx/v5"
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
	}
	in.reply(batch, err)
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

// On PostgreSQL a batch is written in three round trips whatever its
// size, rather than a few statements per record as on SQLite (where a
// statement costs a function call, and here a round trip to the server):
//
//  1. BEGIN, the audit lock, the chain's tail, and what the call index
//     holds of the batch's calls, sent together;
//  2. (only when this writer's tree edge is stale) the edge;
//  3. the records, the tree's hashes, the call index's rows and words,
//     and COMMIT, sent together; arrays bound to unnest() make each
//     statement one, whatever the batch's size.
//
// The call index's rows are worked out here from what step 1 read, as
// callIndexer does statement by statement on SQLite, and written once
// each, in their state after the batch.

const (
	pgSelectTail  = `SELECT seq, hash FROM records ORDER BY seq DESC LIMIT 1`
	pgSelectCalls = `SELECT k, call_id, req_seq, out_seq, dec_seq, server, tool, client, session, decision, decided_by, outcome, approval,
 user_subject, user_email FROM call_index WHERE call_id = ANY($1::text[])`
	pgSelectKeys = `SELECT b, (SELECT max(k) FROM call_index WHERE k >= b AND k < b + 1048576) FROM unnest($1::bigint[]) AS b`
	pgSelectMaxK = `SELECT coalesce(max(k), 0) FROM call_index`
	pgInsertRecs = `INSERT INTO records (seq, id, call_id, kind, time, session, client, protocol, server,
 direction, method, tool, arguments, pin, decision, decided_by, reason, outcome, result,
 request_size, response_size, duration_ms, detail, approval, prev_hash, hash, user_subject, user_email, user_groups, mac)
 SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
 $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::text[], $16::text[], $17::text[],
 $18::text[], $19::text[], $20::bigint[], $21::bigint[], $22::bigint[], $23::text[], $24::text[], $25::text[], $26::text[],
 $27::text[], $28::text[], $29::text[], $30::bytea[])`
	pgInsertTree  = `INSERT INTO tree_hashes (idx, hash) SELECT * FROM unnest($1::bigint[], $2::bytea[])`
	pgUpsertCalls = `INSERT INTO call_index (k, call_id, req_seq, out_seq, dec_seq, server, tool, client, session, decision, decided_by, outcome, approval,
 user_subject, user_email)
 SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::text[], $7::text[], $8::text[],
 $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::text[])
 ON CONFLICT (k) DO UPDATE SET out_seq = excluded.out_seq, dec_seq = excluded.dec_seq, decision = excluded.decision,
 decided_by = excluded.decided_by, outcome = excluded.outcome, approval = excluded.approval`
)

// pgUpsertWords makes the words of the calls whose arguments or result
// the batch set, read back from the records the same transaction
// inserted.
var pgUpsertWords = pgInsertWords + ` AND c.k = ANY($1::bigint[])
 ON CONFLICT (k) DO UPDATE SET words = excluded.words`

// pgInsertWords makes the words of the call index's rows: each call's
// request's arguments and its latest outcome's result (a call with
// neither has no row). The batches add to its condition; Copy fills the
// text index of a whole log with it.
var pgInsertWords = `INSERT INTO call_text (k, words)
 SELECT c.k, ` + pgWords(`q.arguments || ' ' || coalesce(o.result, '')`) + `
 FROM call_index c JOIN records q ON q.seq = c.req_seq LEFT JOIN records o ON o.seq = c.out_seq
 WHERE (q.arguments <> '' OR coalesce(o.result, '') <> '')`

// pgCalls is what step 1 read of the call index for a batch: every row
// of its calls and the keys around its new calls' milliseconds.
type pgCalls struct {
	rows map[string]audit.Call
	next map[int64]int64 // key base → the key after the largest in its range
	last int64
}

var _ audit.CallReader = (*pgCalls)(nil)

// Call returns a row read in step 1.
func (p *pgCalls) Call(_ context.Context, id string) (audit.Call, bool, error) {
	c, ok := p.rows[id]
	return c, ok, nil
}

// Keys returns the keys read in step 1.
func (p *pgCalls) Keys(_ context.Context, base int64) (next, last int64, err error) {
	next, ok := p.next[base]
	if !ok {
		return 0, 0, fmt.Errorf("the keys of %d were not read", base)
	}
	return next, p.last, nil
}

// writePG appends the batch's records to the chain and commits them with
// their tree and call index (see above): audit.Batch works out the rows,
// sent at once. dc is the driver's connection.
func (wc *writerConn) writePG(ctx context.Context, dc any, batch []*appendReq) (err error) {
	conn, _ := postgres.PgxConn(dc)
	var ids []string
	var bases []int64
	seen := map[int64]bool{}
	for _, req := range batch {
		for _, r := range req.recs {
			ids = append(ids, r.CallID)
			if b := audit.KeyMillis(r.Time); r.Kind == guard.KindRequest && !seen[b] {
				seen[b] = true
				bases = append(bases, b)
			}
		}
	}
	// 1. Begin, lock, read.
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue("SELECT pg_advisory_xact_lock($1)", postgres.LockAudit)
	b.Queue(pgSelectTail)
	b.Queue(pgSelectCalls, ids)
	b.Queue(pgSelectKeys, bases)
	b.Queue(pgSelectMaxK)
	res := conn.SendBatch(ctx, b)
	var seq int64
	var prev string
	calls := &pgCalls{rows: map[string]audit.Call{}, next: map[int64]int64{}}
	err = func() error {
		for range 2 {
			if _, err := res.Exec(); err != nil {
				return fmt.Errorf("begin: %w", err)
			}
		}
		if err := res.QueryRow().Scan(&seq, &prev); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("chain tail: %w", err)
		}
		rows, err := res.Query()
		if err != nil {
			return fmt.Errorf("call index: %w", err)
		}
		for rows.Next() {
			var c audit.Call
			if err := rows.Scan(&c.K, &c.ID, &c.ReqSeq, &c.OutSeq, &c.DecSeq, &c.Server, &c.Tool, &c.Client, &c.Session,
				&c.Decision, &c.DecidedBy, &c.Outcome, &c.Approval, &c.User, &c.UserEmail); err != nil {
				rows.Close()
				return fmt.Errorf("call index: %w", err)
			}
			calls.rows[c.ID] = c
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("call index: %w", err)
		}
		if rows, err = res.Query(); err != nil {
			return fmt.Errorf("call index: %w", err)
		}
		for rows.Next() {
			var base int64
			var m *int64
			if err := rows.Scan(&base, &m); err != nil {
				rows.Close()
				return fmt.Errorf("call index: %w", err)
			}
			calls.next[base] = base
			if m != nil {
				calls.next[base] = *m + 1
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("call index: %w", err)
		}
		return res.QueryRow().Scan(&calls.last)
	}()
	if cerr := res.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("begin: %w", cerr)
	}
	if err != nil {
		return err
	}
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
		if edge, err = wc.loadTree(ctx, seq); err != nil {
			return err
		}
		// loadTree completes a tree behind the records with hashes it
		// leaves for flushTree.
		if err := wc.flushTree(ctx); err != nil {
			return err
		}
	}
	wc.known = false // until this transaction commits
	wc.tree.Edge = edge
	// 3. Write and commit.
	n := 0
	for _, req := range batch {
		n += len(req.recs)
	}
	cols := newRecordColumns(n)
	ab := wc.batch
	ab.Begin(seq, prev, &wc.tree, calls)
	defer ab.End()
	for _, req := range batch {
		for _, r := range req.recs {
			mac, err := ab.Add(ctx, r, req.macStart)
			if err != nil {
				return err
			}
			cols.add(r, bytes.Clone(mac))
		}
	}
	idx := make([]int64, len(wc.tree.Hashes))
	hashes := make([][]byte, len(wc.tree.Hashes))
	for i := range wc.tree.Hashes {
		idx[i], hashes[i] = wc.tree.First+int64(i), wc.tree.Hashes[i][:]
	}
	changes := ab.Calls.Changes
	rows := newCallColumns(len(changes))
	var words []int64
	for _, c := range changes {
		rows.add(&c.Call)
		if c.Words {
			words = append(words, c.K)
		}
	}
	b = &pgx.Batch{}
	b.Queue(pgInsertRecs, cols.args()...)
	b.Queue(pgInsertTree, idx, hashes)
	b.Queue(pgUpsertCalls, rows.args()...)
	b.Queue(pgUpsertWords, words)
	b.Queue("COMMIT")
	wc.tree.Edge = nil
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		if len(cols.seq) == 0 {
			return fmt.Errorf("commit: %w", err)
		}
		// The COMMIT may have been carried out: the batch is in doubt.
		first := cols.text[0][0]
		return &inDoubt{seq: cols.seq[0], id: first, err: fmt.Errorf("commit: %w", err)}
	}
	wc.tree.Written()
	last, hash := ab.Tail()
	wc.known, wc.tailSeq, wc.tailHash = true, last, hash
	wc.tree.Edge = edge
	wc.noteOwn(ownRun{first: seq + 1, leaves: ab.Leaves})
	return nil
}

// recordColumns are a batch's records, column by column, for unnest().
type recordColumns struct {
	seq, reqSize, respSize, dur []int64
	text                        [25][]string
	mac                         [][]byte
}

func newRecordColumns(n int) *recordColumns {
	c := &recordColumns{seq: make([]int64, 0, n), reqSize: make([]int64, 0, n), respSize: make([]int64, 0, n), dur: make([]int64, 0, n),
		mac: make([][]byte, 0, n)}
	for i := range c.text {
		c.text[i] = make([]string, 0, n)
	}
	return c
}

func (c *recordColumns) add(r *guard.Record, mac []byte) {
	c.seq = append(c.seq, r.Seq)
	c.mac = append(c.mac, mac)
	c.reqSize = append(c.reqSize, r.RequestSize)
	c.respSize = append(c.respSize, r.ResponseSize)
	c.dur = append(c.dur, r.DurationMS)
	for i, s := range [25]string{r.ID, r.CallID, r.Kind, fmtTime(r.Time), r.Session, r.Client, r.Protocol, r.Server,
		r.Direction, r.Method, r.Tool, r.Arguments, r.Pin, r.Decision, r.DecidedBy, r.Reason, r.Outcome, r.Result,
		r.Detail, r.Approval, r.PrevHash, r.Hash, r.User, r.UserEmail, audit.GroupsText(r.UserGroups)} {
		c.text[i] = append(c.text[i], s)
	}
}

// args are the parameters of pgInsertRecs, in its columns' order.
func (c *recordColumns) args() []any {
	t := c.text
	return []any{c.seq, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9], t[10], t[11], t[12], t[13], t[14], t[15], t[16], t[17],
		c.reqSize, c.respSize, c.dur, t[18], t[19], t[20], t[21], t[22], t[23], t[24], c.mac}
}

// callColumns are the call index's rows a batch writes, for unnest().
type callColumns struct {
	k, req, out, dec []int64
	text             [11][]string
}

func newCallColumns(n int) *callColumns {
	c := &callColumns{k: make([]int64, 0, n), req: make([]int64, 0, n), out: make([]int64, 0, n), dec: make([]int64, 0, n)}
	for i := range c.text {
		c.text[i] = make([]string, 0, n)
	}
	return c
}

func (c *callColumns) add(r *audit.Call) {
	c.k = append(c.k, r.K)
	c.req = append(c.req, r.ReqSeq)
	c.out = append(c.out, r.OutSeq)
	c.dec = append(c.dec, r.DecSeq)
	for i, s := range [11]string{r.ID, r.Server, r.Tool, r.Client, r.Session, r.Decision, r.DecidedBy, r.Outcome, r.Approval,
		r.User, r.UserEmail} {
		c.text[i] = append(c.text[i], s)
	}
}

// args are the parameters of pgUpsertCalls, in its columns' order.
func (c *callColumns) args() []any {
	t := c.text
	return []any{c.k, t[0], c.req, c.out, c.dec, t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9], t[10]}
}
