package postgres

import (
	"context"
	"errors"
	"fmt"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
	"github.com/jackc/pgx/v5"
)

// On PostgreSQL a batch is written in three round trips whatever its
// size, rather than a few statements per record as on SQLite (where a
// statement costs a function call, and here a round trip to the server):
//
//  1. BEGIN, the audit lock, the chain's tail, and the keys of the
//     batch's calls (from the call index and the batches not yet in it),
//     sent together;
//  2. (only when this writer's tree edge is stale: another replica
//     appended) the edge, in one statement (ReadEdge);
//  3. the records, the tree's hashes, the batch's row in call_pending
//     (the keys it handed out), and COMMIT, sent together; arrays bound
//     to unnest() make each statement one, whatever the batch's size.
//
// BeginBatch is step 1 and CommitBatch step 3; store reads the edge
// (step 2) and hands out, with package audit, the keys of the batch's new
// calls from what step 1 read. Only that is under the audit lock: the
// call index's rows and words are written after the commit, outside it
// (index.go).

const (
	selectTail = `SELECT seq, hash FROM records ORDER BY seq DESC LIMIT 1`
	// The keys of the batch's calls: from the call index, and from the
	// batches whose rows are not written yet (call_pending), read in one
	// statement, one snapshot, so that a batch whose rows were written
	// meanwhile is seen in one or the other. A pending batch's calls are
	// unnested only when it has one of the batch's (&&).
	selectCalls = `SELECT k, call_id FROM call_index WHERE call_id = ANY($1::text[])
 UNION ALL SELECT p.k, p.id FROM call_pending, unnest(ids, ks) AS p(id, k) WHERE ids && $1::text[] AND p.id = ANY($1::text[])`
	// The keys of the batches pending are unnested once (p, a CTE read
	// more than once is materialised), not once for each base and again
	// for the largest.
	selectKeys = `WITH p AS (SELECT unnest(ks) AS k FROM call_pending)
 SELECT b, greatest((SELECT max(k) FROM call_index WHERE k >= b AND k < b + 1048576),
 (SELECT max(k) FROM p WHERE k >= b AND k < b + 1048576)),
 greatest((SELECT coalesce(max(k), 0) FROM call_index), (SELECT coalesce(max(k), 0) FROM p))
 FROM unnest($1::bigint[]) AS b`
	insertRecs = `INSERT INTO records (seq, id, call_id, kind, time, session, client, protocol, server,
 direction, method, tool, arguments, pin, decision, decided_by, reason, outcome, result,
 request_size, response_size, duration_ms, detail, approval, prev_hash, hash, user_subject, user_email, user_groups, mac)
 SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
 $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::text[], $16::text[], $17::text[],
 $18::text[], $19::text[], $20::bigint[], $21::bigint[], $22::bigint[], $23::text[], $24::text[], $25::text[], $26::text[],
 $27::text[], $28::text[], $29::text[], $30::bytea[])`
	insertTree  = `INSERT INTO tree_hashes (idx, hash) SELECT * FROM unnest($1::bigint[], $2::bytea[])`
	upsertCalls = OutsideLock + `INSERT INTO call_index (k, call_id, req_seq, out_seq, dec_seq, server, tool, client, session, decision, decided_by, outcome, approval,
 user_subject, user_email)
 SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::text[], $7::text[], $8::text[],
 $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::text[])
 ON CONFLICT (k) DO UPDATE SET out_seq = excluded.out_seq, dec_seq = excluded.dec_seq, decision = excluded.decision,
 decided_by = excluded.decided_by, outcome = excluded.outcome, approval = excluded.approval`
)

// InsertWords makes the words of the call index's rows: each call's
// request's arguments and its latest outcome's result (a call with
// neither has no row). store's Copy fills the text index of a whole log
// with it.
var InsertWords = `INSERT INTO call_text (k, words)
 SELECT c.k, ` + Words(`q.arguments || ' ' || coalesce(o.result, '')`) + `
 FROM call_index c JOIN records q ON q.seq = c.req_seq LEFT JOIN records o ON o.seq = c.out_seq
 WHERE (q.arguments <> '' OR coalesce(o.result, '') <> '')`

// A batch's transaction runs with sequential scans off and generic plans
// (set_config, local to the transaction), so that its statements'
// plans look rows up by their indexes whatever the tables' statistics
// say, and are made once. PostgreSQL keeps a prepared statement's
// generic plan from its first runs until the tables are analyzed again:
// plans made while a new database's tables were small scanned them whole
// (a call's row, its words) as they grew, up to autovacuum's next
// analysis, a millisecond of PostgreSQL's CPU a call after a few thousand
// calls. Every statement of a batch reads by a key. Planning each anew
// for the tables as they are (plan_cache_mode force_custom_plan) cost a
// third of what the statements cost, and the statements that take an
// array (= ANY, unnest) were planned anew each time all the same, their
// generic plans' estimates being above their custom ones'.
// The lock is taken in the same statement.
const lockIndexScans = `SELECT pg_advisory_xact_lock($1), ` + indexScans

// indexScans sets a transaction's plans as lockIndexScans says, and JIT
// compilation off: a scan of call_pending, a table of a few rows that no
// index serves, costs what a sequential scan costs with them off, far
// above jit_above_cost, and compiling it cost 150 ms a statement.
const indexScans = `set_config('enable_seqscan', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true),
 set_config('jit', 'off', true)`

// Calls is what BeginBatch read of the call index for a batch: the key
// of each of its calls that has one (the call index's row or a pending
// batch's) and the keys around its new calls' milliseconds.
type Calls struct {
	rows map[string]audit.Call
	next map[int64]int64 // key base → the key after the largest in its range
	last int64
}

var _ audit.CallReader = (*Calls)(nil)

// Call returns a row read in step 1: its key and call id only.
func (p *Calls) Call(_ context.Context, id string) (audit.Call, bool, error) {
	c, ok := p.rows[id]
	return c, ok, nil
}

// Keys returns the keys read in step 1.
func (p *Calls) Keys(_ context.Context, base int64) (next, last int64, err error) {
	next, ok := p.next[base]
	if !ok {
		return 0, 0, fmt.Errorf("the keys of %d were not read", base)
	}
	return next, p.last, nil
}

// BeginBatch begins a batch's transaction on conn, the audit writer's
// connection, takes the audit lock and reads the chain's tail (seq 0 and
// prev "" for an empty log) and what the call index holds of the calls
// ids and of the key bases (the milliseconds of the batch's new calls),
// in one round trip (step 1). Of the calls, only the keys are read. On error the transaction may be open: the
// caller ends it as after a failed write.
func BeginBatch(ctx context.Context, conn *pgx.Conn, ids []string, bases []int64) (seq int64, prev string, calls *Calls, err error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(lockIndexScans, LockAudit)
	b.Queue(selectTail)
	b.Queue(selectCalls, ids)
	if len(bases) > 0 {
		b.Queue(selectKeys, bases) // a batch with no new call needs no key
	}
	res := conn.SendBatch(ctx, b)
	calls = &Calls{rows: map[string]audit.Call{}, next: map[int64]int64{}}
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
			if err := rows.Scan(&c.K, &c.ID); err != nil {
				rows.Close()
				return fmt.Errorf("call index: %w", err)
			}
			calls.rows[c.ID] = c
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("call index: %w", err)
		}
		if len(bases) == 0 {
			return nil
		}
		if rows, err = res.Query(); err != nil {
			return fmt.Errorf("call index: %w", err)
		}
		for rows.Next() {
			var base int64
			var m *int64
			if err := rows.Scan(&base, &m, &calls.last); err != nil {
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
		return nil
	}()
	if cerr := res.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("begin: %w", cerr)
	}
	return seq, prev, calls, err
}

// InDoubt is CommitBatch's error when the COMMIT was sent and its answer
// not read: the batch may be committed or not. Seq and ID are the
// batch's first record.
type InDoubt struct {
	Seq int64
	ID  string
	Err error
}

func (e *InDoubt) Error() string { return e.Err.Error() }
func (e *InDoubt) Unwrap() error { return e.Err }

// CommitBatch writes a batch's records, its tree hashes (at idx) and its
// pending row (the calls ids it touched and their keys ks; none when it
// touched none), and commits, in one round trip (step 3); a statement
// with no rows to write is left out. A failure once records were sent is
// an *InDoubt.
func CommitBatch(ctx context.Context, conn *pgx.Conn, recs *RecordColumns, idx []int64, hashes [][]byte, ids []string, ks []int64) error {
	b := &pgx.Batch{}
	b.Queue(insertRecs, recs.args()...)
	if len(idx) > 0 {
		b.Queue(insertTree, idx, hashes)
	}
	if len(ids) > 0 && len(recs.seq) > 0 {
		b.Queue(insertPending, recs.seq[len(recs.seq)-1], recs.seq[0], ids, ks)
	}
	b.Queue("COMMIT")
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		if len(recs.seq) == 0 {
			return fmt.Errorf("commit: %w", err)
		}
		// The COMMIT may have been carried out: the batch is in doubt.
		return &InDoubt{Seq: recs.seq[0], ID: recs.text[0][0], Err: fmt.Errorf("commit: %w", err)}
	}
	return nil
}

// RecordColumns are a batch's records, column by column, for unnest().
type RecordColumns struct {
	seq, reqSize, respSize, dur []int64
	text                        [25][]string
	mac                         [][]byte
}

// NewRecordColumns makes the columns of n records.
func NewRecordColumns(n int) *RecordColumns {
	c := &RecordColumns{seq: make([]int64, 0, n), reqSize: make([]int64, 0, n), respSize: make([]int64, 0, n), dur: make([]int64, 0, n),
		mac: make([][]byte, 0, n)}
	for i := range c.text {
		c.text[i] = make([]string, 0, n)
	}
	return c
}

// Add adds record r, with its MAC, to the columns.
func (c *RecordColumns) Add(r *guard.Record, mac []byte) {
	c.seq = append(c.seq, r.Seq)
	c.mac = append(c.mac, mac)
	c.reqSize = append(c.reqSize, r.RequestSize)
	c.respSize = append(c.respSize, r.ResponseSize)
	c.dur = append(c.dur, r.DurationMS)
	for i, s := range [25]string{r.ID, r.CallID, r.Kind, audit.FormatTime(r.Time), r.Session, r.Client, r.Protocol, r.Server,
		r.Direction, r.Method, r.Tool, r.Arguments, r.Pin, r.Decision, r.DecidedBy, r.Reason, r.Outcome, r.Result,
		r.Detail, r.Approval, r.PrevHash, r.Hash, r.User, r.UserEmail, audit.GroupsText(r.UserGroups)} {
		c.text[i] = append(c.text[i], s)
	}
}

// args are the parameters of insertRecs, in its columns' order.
func (c *RecordColumns) args() []any {
	t := c.text
	return []any{c.seq, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9], t[10], t[11], t[12], t[13], t[14], t[15], t[16], t[17],
		c.reqSize, c.respSize, c.dur, t[18], t[19], t[20], t[21], t[22], t[23], t[24], c.mac}
}

// CallColumns are the call index's rows a batch writes, for unnest().
type CallColumns struct {
	k, req, out, dec []int64
	text             [11][]string
}

// NewCallColumns makes the columns of n rows.
func NewCallColumns(n int) *CallColumns {
	c := &CallColumns{k: make([]int64, 0, n), req: make([]int64, 0, n), out: make([]int64, 0, n), dec: make([]int64, 0, n)}
	for i := range c.text {
		c.text[i] = make([]string, 0, n)
	}
	return c
}

// Add adds row r to the columns.
func (c *CallColumns) Add(r *audit.Call) {
	c.k = append(c.k, r.K)
	c.req = append(c.req, r.ReqSeq)
	c.out = append(c.out, r.OutSeq)
	c.dec = append(c.dec, r.DecSeq)
	for i, s := range [11]string{r.ID, r.Server, r.Tool, r.Client, r.Session, r.Decision, r.DecidedBy, r.Outcome, r.Approval,
		r.User, r.UserEmail} {
		c.text[i] = append(c.text[i], s)
	}
}

// args are the parameters of upsertCalls, in its columns' order.
func (c *CallColumns) args() []any {
	t := c.text
	return []any{c.k, t[0], c.req, c.out, c.dec, t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9], t[10]}
}

// ReadEdge reads, in one round trip (step 2), the tree's largest stored
// index (-1 for an empty tree) and the hashes at idx, in idx's order (nil
// where there is none): the right edge of a tree the caller expects to be
// as long as the chain, read in one statement rather than one a hash.
func ReadEdge(ctx context.Context, conn *pgx.Conn, idx []int64) (maxIdx int64, hashes [][]byte, err error) {
	b := &pgx.Batch{}
	b.Queue(`SELECT coalesce(max(idx), -1) FROM tree_hashes`)
	b.Queue(`SELECT idx, hash FROM tree_hashes WHERE idx = ANY($1::bigint[])`, idx)
	res := conn.SendBatch(ctx, b)
	defer func() {
		if cerr := res.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("tree edge: %w", cerr)
		}
	}()
	if err := res.QueryRow().Scan(&maxIdx); err != nil {
		return 0, nil, fmt.Errorf("tree size: %w", err)
	}
	rows, err := res.Query()
	if err != nil {
		return 0, nil, fmt.Errorf("tree edge: %w", err)
	}
	defer rows.Close()
	hashes = make([][]byte, len(idx))
	for rows.Next() {
		var x int64
		var h []byte
		if err := rows.Scan(&x, &h); err != nil {
			return 0, nil, fmt.Errorf("tree edge: %w", err)
		}
		for i := range idx {
			if idx[i] == x {
				hashes[i] = h
			}
		}
	}
	if err := rows.Err(); err != nil {
		return 0, nil, fmt.Errorf("tree edge: %w", err)
	}
	return maxIdx, hashes, nil
}
