package store

import (
	"context"
	"errors"
	"fmt"

	guard "github.com/guard-mcp/guard"
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
	db.reply(batch, err)
	if err != nil {
		var fixes []*appendReq
		for _, r := range batch {
			if r.fix {
				fixes = append(fixes, r)
			}
		}
		db.retryFixes(fixes)
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

// pgCall is a row of the call index as the batch leaves it.
type pgCall struct {
	k                                int64
	callID                           string
	reqSeq, outSeq, decSeq           int64
	server, tool, client, session    string
	decision, decidedBy, outcome, ap string
	user, userEmail                  string
	dirty, words                     bool // to be written; its words to be made again
}

// pgBatchIndex works out the call index's rows for one batch.
type pgBatchIndex struct {
	calls    map[string]*pgCall
	rangeMax map[int64]int64 // key base → the largest key in its range (0: none)
	maxK     int64
	order    []*pgCall // dirty rows, in the order they were first touched
}

func (x *pgBatchIndex) touch(c *pgCall) {
	if !c.dirty {
		c.dirty = true
		x.order = append(x.order, c)
	}
}

// add applies one record, as callIndexer's request, outcome and decision
// do.
func (x *pgBatchIndex) add(r *guard.Record) {
	switch r.Kind {
	case guard.KindRequest:
		if x.calls[r.CallID] != nil {
			return // a later request of a call already indexed
		}
		base := keyMillis(r.Time)
		k := base
		if last := x.rangeMax[base]; last != 0 {
			k = last + 1
		}
		if k >= base+1<<keyRankBits {
			k = x.maxK + 1 // a millisecond with more calls than a key can rank
		}
		c := &pgCall{k: k, callID: r.CallID, reqSeq: r.Seq, decSeq: r.Seq, server: r.Server, tool: r.Tool, client: r.Client,
			session: r.Session, decision: r.Decision, decidedBy: r.DecidedBy, ap: r.Approval, user: r.User, userEmail: r.UserEmail,
			words: true}
		x.calls[r.CallID] = c
		for b, m := range x.rangeMax {
			if k >= b && k < b+1<<keyRankBits && k > m {
				x.rangeMax[b] = k
			}
		}
		x.maxK = max(x.maxK, k)
		x.touch(c)
	case guard.KindOutcome:
		c := x.calls[r.CallID]
		if c == nil {
			return
		}
		c.outSeq, c.outcome, c.words = r.Seq, r.Outcome, true
		if r.Approval != "" {
			c.ap = r.Approval
		}
		if r.Decision != "" {
			c.decSeq, c.decision, c.decidedBy = r.Seq, r.Decision, r.DecidedBy
		}
		x.touch(c)
	case guard.KindDecision:
		c := x.calls[r.CallID]
		if c == nil || (r.Decision == "" && r.Approval == "") {
			return
		}
		if r.Approval != "" {
			c.ap = r.Approval
		}
		if r.Decision != "" {
			c.decSeq, c.decision, c.decidedBy = r.Seq, r.Decision, r.DecidedBy
		}
		x.touch(c)
	}
}

// writePG appends the batch's records to the chain and commits them with
// their tree and call index (see above). dc is the driver's connection.
func (wc *writerConn) writePG(ctx context.Context, dc any, batch []*appendReq) error {
	conn := dc.(*pgConn).Conn.Conn()
	var ids []string
	var bases []int64
	seen := map[int64]bool{}
	for _, req := range batch {
		for _, r := range req.recs {
			ids = append(ids, r.CallID)
			if b := keyMillis(r.Time); r.Kind == guard.KindRequest && !seen[b] {
				seen[b] = true
				bases = append(bases, b)
			}
		}
	}
	// 1. Begin, lock, read.
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue("SELECT pg_advisory_xact_lock($1)", lockAudit)
	b.Queue(pgSelectTail)
	b.Queue(pgSelectCalls, ids)
	b.Queue(pgSelectKeys, bases)
	b.Queue(pgSelectMaxK)
	res := conn.SendBatch(ctx, b)
	var seq int64
	var prev string
	x := &pgBatchIndex{calls: map[string]*pgCall{}, rangeMax: map[int64]int64{}}
	err := func() error {
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
			c := &pgCall{}
			if err := rows.Scan(&c.k, &c.callID, &c.reqSeq, &c.outSeq, &c.decSeq, &c.server, &c.tool, &c.client, &c.session,
				&c.decision, &c.decidedBy, &c.outcome, &c.ap, &c.user, &c.userEmail); err != nil {
				rows.Close()
				return fmt.Errorf("call index: %w", err)
			}
			x.calls[c.callID] = c
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
			x.rangeMax[base] = 0
			if m != nil {
				x.rangeMax[base] = *m
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("call index: %w", err)
		}
		return res.QueryRow().Scan(&x.maxK)
	}()
	if cerr := res.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("begin: %w", cerr)
	}
	if err != nil {
		return err
	}
	// 2. The tree's edge, read again only when someone else appended.
	edge := wc.edge
	wc.edge = nil
	wc.treeHashes = wc.treeHashes[:0] // left by a transaction that failed
	if !wc.known || seq != wc.tailSeq || prev != wc.tailHash || edge == nil || edge.n != seq {
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
	// 3. Write and commit.
	n := 0
	for _, req := range batch {
		n += len(req.recs)
	}
	cols := newRecordColumns(n)
	var idx []int64
	var hashes [][]byte
	tree := edge.n == seq // else it stops before a record whose MAC fails (see write)
	run := ownRun{first: seq + 1}
	for _, req := range batch {
		for _, r := range req.recs {
			seq++
			wc.chain(r, req.macStart, seq, prev)
			prev = r.Hash
			cols.add(r, wc.mac.mac(seq, r.Hash))
			x.add(r)
			if !tree {
				continue
			}
			first := tlog.StoredHashIndex(0, edge.n)
			hs, err := edge.append(leafHash(wc.buf))
			if err != nil {
				return err
			}
			for i, h := range hs {
				idx = append(idx, first+int64(i))
				hashes = append(hashes, h[:])
			}
			run.leaves = append(run.leaves, hs[0])
		}
	}
	if cap(wc.buf) > maxHashBuf {
		wc.buf = nil
	}
	calls := newCallColumns(len(x.order))
	var words []int64
	for _, c := range x.order {
		calls.add(c)
		if c.words {
			words = append(words, c.k)
		}
	}
	b = &pgx.Batch{}
	b.Queue(pgInsertRecs, cols.args()...)
	b.Queue(pgInsertTree, idx, hashes)
	b.Queue(pgUpsertCalls, calls.args()...)
	b.Queue(pgUpsertWords, words)
	b.Queue("COMMIT")
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		if len(cols.seq) == 0 {
			return fmt.Errorf("commit: %w", err)
		}
		// The COMMIT may have been carried out: the batch is in doubt.
		first := cols.text[0][0]
		return &inDoubt{seq: cols.seq[0], id: first, err: fmt.Errorf("commit: %w", err)}
	}
	wc.known, wc.tailSeq, wc.tailHash = true, seq, prev
	wc.edge = edge
	wc.noteOwn(run)
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
		r.Detail, r.Approval, r.PrevHash, r.Hash, r.User, r.UserEmail, groupsText(r.UserGroups)} {
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

func (c *callColumns) add(r *pgCall) {
	c.k = append(c.k, r.k)
	c.req = append(c.req, r.reqSeq)
	c.out = append(c.out, r.outSeq)
	c.dec = append(c.dec, r.decSeq)
	for i, s := range [11]string{r.callID, r.server, r.tool, r.client, r.session, r.decision, r.decidedBy, r.outcome, r.ap,
		r.user, r.userEmail} {
		c.text[i] = append(c.text[i], s)
	}
}

// args are the parameters of pgUpsertCalls, in its columns' order.
func (c *callColumns) args() []any {
	t := c.text
	return []any{c.k, t[0], c.req, c.out, c.dec, t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9], t[10]}
}
