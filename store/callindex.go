package store

import (
	"cmp"
	"context"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
	"github.com/guard-mcp/guard/store/postgres"
)

// The calls of the audit log are queried through an index the ingester
// keeps in the transaction that commits their records (call_index and its
// words, call_text; migration 0009), as audit.CallIndex works it out: so
// that a query reads the newest matching calls from an index's end
// instead of joining every call's records. CallIndex.RebuildCallIndex makes
// it again from the records.

// The ingester's statements. A call's key is the first of its millisecond
// not yet taken: the calls of one millisecond rank in the order they
// arrive, which is their records' order. None of them may need a
// statement journal (an INSERT ... SELECT, a RETURNING clause): each
// statement journal opened after the text index was written in a
// transaction makes FTS5 flush what it holds in memory to a new segment,
// which cost more than all the rest.
const (
	selectKeys  = `SELECT (SELECT max(k) FROM call_index WHERE k >= ?1 AND k < ?1 + 1048576), (SELECT max(k) FROM call_index)`
	insertCall  = callColumns + `(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)`
	callColumns = `INSERT INTO call_index (k, call_id, req_seq, out_seq, dec_seq, server, tool, client, session, decision, decided_by,
 outcome, approval, user_subject, user_email) VALUES `
	selectCall = `SELECT k, req_seq, out_seq, dec_seq, decision, decided_by, outcome, approval FROM call_index WHERE call_id = ?1`
	// The columns that are not indexed are set in one statement, and
	// decision and decided_by only when they change: an UPDATE that sets
	// an indexed column rewrites its index entry even to the same value.
	updateCall    = `UPDATE call_index SET out_seq = ?1, outcome = ?2, approval = ?3, dec_seq = ?4 WHERE k = ?5`
	updateDecider = `UPDATE call_index SET decision = ?1, decided_by = ?2 WHERE k = ?3`
	selectText    = `SELECT (SELECT arguments FROM records WHERE seq = ?1), coalesce((SELECT result FROM records WHERE seq = ?2), '')`
	// A batch's calls and key bases, read at once (prefetch): each a JSON
	// array of the batch's call ids or bases. The keys' last row, with
	// NULL as its base, is the largest key of all.
	selectCalls = `SELECT k, call_id, req_seq, out_seq, dec_seq, decision, decided_by, outcome, approval FROM call_index
 WHERE call_id IN (SELECT value FROM json_each(?1))`
	selectBases = `SELECT j.value, (SELECT max(k) FROM call_index WHERE k >= j.value AND k < j.value + 1048576) FROM json_each(?1) j
 UNION ALL SELECT NULL, (SELECT max(k) FROM call_index)`
	insertText = `INSERT INTO call_text (rowid, arguments, result) VALUES (?1, ?2, ?3)`
	deleteText = `INSERT INTO call_text (call_text, rowid, arguments, result) VALUES ('delete', ?1, ?2, ?3)`
)

// callRows is how many new calls' rows insertCalls inserts: a
// statement's fixed cost, a cursor opened on the table and on each of its
// many indexes among it, is shared by that many rows.
const callRows = 16

// insertCalls inserts callRows rows.
var insertCalls = callColumns + strings.TrimSuffix(strings.Repeat(`(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?), `, callRows), ", ")

// The text index on PostgreSQL: a call's words as a tsvector (postgres
// migration 0012), replaced whole.
var pgInsertText = `INSERT INTO call_text (k, words) VALUES (?1, ` + postgres.Words(`?2 || ' ' || ?3`) + `)
 ON CONFLICT (k) DO UPDATE SET words = excluded.words`

const (
	pgDeleteText = `DELETE FROM call_text WHERE k = ?1 AND ?2::text IS NOT NULL AND ?3::text IS NOT NULL`
	// The batches pending are written by the fill (pgindex.go): it waits
	// for those being written.
	pgClearCallIndex = `DELETE FROM call_pending; DELETE FROM call_index; DELETE FROM call_text`
)

// callIndexer keeps the call index on the audit writer's connection, with
// its statements prepared once (see writerConn): it reads the index's
// rows as a batch needs them (audit.CallReader) and writes the rows the
// batch changed (write).
type callIndexer struct {
	keys, ins, call, update, decider, args, text, untext driverStmt
	calls, bases                                         driverStmt // prefetch's
	insMany                                              driverStmt // insertCalls
	vals                                                 [15]driver.NamedValue
	many                                                 [15 * callRows]driver.NamedValue
	fresh                                                []*audit.CallChange // new rows not inserted yet
	row                                                  [9]driver.Value
	changed                                              []*audit.CallChange // write's, sorted by key
	batch                                                batchCalls
	ids                                                  []string // prefetch's
	bs                                                   []int64
}

var _ audit.CallReader = (*callIndexer)(nil)

func newCallIndexer(ctx context.Context, pc driver.ConnPrepareContext, pg bool) (*callIndexer, error) {
	ix := &callIndexer{}
	text, untext := insertText, deleteText
	if pg {
		text, untext = pgInsertText, pgDeleteText
	}
	for i := range ix.vals {
		ix.vals[i].Ordinal = i + 1
	}
	for i := range ix.many {
		ix.many[i].Ordinal = i + 1
	}
	for _, p := range []struct {
		s *driverStmt
		q string
	}{{&ix.keys, selectKeys}, {&ix.ins, insertCall}, {&ix.call, selectCall}, {&ix.update, updateCall},
		{&ix.decider, updateDecider}, {&ix.args, selectText}, {&ix.text, text}, {&ix.untext, untext},
		{&ix.calls, selectCalls}, {&ix.bases, selectBases}, {&ix.insMany, insertCalls}} {
		if pg && (p.s == &ix.calls || p.s == &ix.bases || p.s == &ix.insMany) {
			continue // SQLite's: PostgreSQL's batches read and write theirs at once (package postgres)
		}
		st, err := pc.PrepareContext(ctx, p.q)
		if err != nil {
			_ = ix.close()
			return nil, fmt.Errorf("call index: %w", err)
		}
		s, ok := st.(driverStmt)
		if !ok {
			st.Close()
			_ = ix.close()
			return nil, errors.New("call index: the driver's statements take no context")
		}
		*p.s = s
	}
	return ix, nil
}

func (ix *callIndexer) close() error {
	var errs []error
	for _, s := range []driverStmt{ix.keys, ix.ins, ix.call, ix.update, ix.decider, ix.args, ix.text, ix.untext, ix.calls, ix.bases, ix.insMany} {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	return errors.Join(errs...)
}

// Call reads a call's row (the columns a batch changes).
func (ix *callIndexer) Call(ctx context.Context, id string) (c audit.Call, ok bool, err error) {
	_, ok, err = ix.query1(ctx, ix.call, id)
	if !ok || err != nil {
		return c, ok, err
	}
	c.ID = id
	c.K, _ = ix.row[0].(int64)
	c.ReqSeq, _ = ix.row[1].(int64)
	c.OutSeq, _ = ix.row[2].(int64)
	c.DecSeq, _ = ix.row[3].(int64)
	c.Decision, _ = ix.row[4].(string)
	c.DecidedBy, _ = ix.row[5].(string)
	c.Outcome, _ = ix.row[6].(string)
	c.Approval, _ = ix.row[7].(string)
	return c, true, nil
}

// Keys reads the keys around a new call's millisecond.
func (ix *callIndexer) Keys(ctx context.Context, base int64) (next, last int64, err error) {
	if _, _, err := ix.query1(ctx, ix.keys, base); err != nil {
		return 0, 0, err
	}
	next = base
	if m, ok := ix.row[0].(int64); ok {
		next = m + 1
	}
	last, _ = ix.row[1].(int64)
	return next, last, nil
}

// batchCalls is what the call index holds of a batch's calls and key
// bases, read at once before the batch is chained (prefetch) instead of a
// query per call: the audit.CallReader of the batch. What it was not asked
// for it reads from the index as it goes.
type batchCalls struct {
	ix    *callIndexer
	rows  map[string]*audit.Call // nil: the call has no row
	next  map[int64]int64        // key base → the key after the largest in its range
	last  int64
	valid bool // rows and next were read
}

var _ audit.CallReader = (*batchCalls)(nil)

// Call returns a row read by prefetch, or reads it.
func (bc *batchCalls) Call(ctx context.Context, id string) (audit.Call, bool, error) {
	if c, ok := bc.rows[id]; ok && bc.valid {
		if c == nil {
			return audit.Call{}, false, nil
		}
		return *c, true, nil
	}
	return bc.ix.Call(ctx, id)
}

// Keys returns the keys read by prefetch, or reads them.
func (bc *batchCalls) Keys(ctx context.Context, base int64) (next, last int64, err error) {
	if n, ok := bc.next[base]; ok && bc.valid {
		return n, bc.last, nil
	}
	return bc.ix.Keys(ctx, base)
}

// prefetch reads what the index holds of the batch's calls and of the key
// bases of its requests, in two statements, inside the transaction that
// writes the batch, and returns the batch's reader.
func (ix *callIndexer) prefetch(ctx context.Context, batch []*appendReq) (*batchCalls, error) {
	bc := &ix.batch
	bc.ix, bc.valid = ix, false
	if bc.rows == nil {
		bc.rows, bc.next = map[string]*audit.Call{}, map[int64]int64{}
	}
	clear(bc.rows)
	clear(bc.next)
	ix.ids, ix.bs = ix.ids[:0], ix.bs[:0]
	for _, req := range batch {
		for _, r := range req.recs {
			switch r.Kind {
			case guard.KindRequest, guard.KindOutcome, guard.KindDecision:
			default:
				continue
			}
			if _, ok := bc.rows[r.CallID]; !ok {
				bc.rows[r.CallID] = nil
				ix.ids = append(ix.ids, r.CallID)
			}
			if b := audit.KeyMillis(r.Time); r.Kind == guard.KindRequest {
				if _, ok := bc.next[b]; !ok {
					bc.next[b] = b
					ix.bs = append(ix.bs, b)
				}
			}
		}
	}
	if len(ix.ids) == 0 {
		return bc, nil
	}
	ids, err := json.Marshal(ix.ids)
	if err != nil {
		return nil, fmt.Errorf("call index: %w", err)
	}
	bases, err := json.Marshal(ix.bs)
	if err != nil {
		return nil, fmt.Errorf("call index: %w", err)
	}
	err = ix.each(ctx, ix.calls, string(ids), func(row []driver.Value) {
		c := &audit.Call{}
		c.K, _ = row[0].(int64)
		c.ID, _ = row[1].(string)
		c.ReqSeq, _ = row[2].(int64)
		c.OutSeq, _ = row[3].(int64)
		c.DecSeq, _ = row[4].(int64)
		c.Decision, _ = row[5].(string)
		c.DecidedBy, _ = row[6].(string)
		c.Outcome, _ = row[7].(string)
		c.Approval, _ = row[8].(string)
		bc.rows[c.ID] = c
	})
	if err == nil {
		err = ix.each(ctx, ix.bases, string(bases), func(row []driver.Value) {
			m, ok := row[1].(int64)
			base, isBase := row[0].(int64)
			switch {
			case !isBase:
				bc.last = m // the largest key of all (0: none)
			case ok:
				bc.next[base] = m + 1
			}
		})
	}
	if err != nil {
		return nil, fmt.Errorf("call index: %w", err)
	}
	bc.valid = true
	return bc, nil
}

// each runs a query with one argument and hands each row to f.
func (ix *callIndexer) each(ctx context.Context, st driverStmt, arg any, f func([]driver.Value)) error {
	defer ix.unbind()
	rows, err := st.QueryContext(ctx, ix.bind([]any{arg}))
	if err != nil {
		return err
	}
	row := ix.row[:len(rows.Columns())]
	for {
		clear(ix.row[:])
		if err = rows.Next(row); err != nil {
			break
		}
		f(row)
	}
	cerr := rows.Close()
	if !errors.Is(err, io.EOF) {
		return err
	}
	return cerr
}

// index indexes records already chained and inserted, in seq order.
func (ix *callIndexer) index(ctx context.Context, recs []*guard.Record) error {
	var x audit.CallIndex
	x.Reset(ix)
	for _, r := range recs {
		if err := x.Add(ctx, r); err != nil {
			return err
		}
	}
	return ix.write(ctx, x.Changes)
}

// callText is what the text index holds of a call: its request's
// arguments and its latest outcome's result.
type callText struct{ args, result string }

func (t callText) empty() bool { return t.args == "" && t.result == "" }

// write writes the rows a batch changed, then their words in key order:
// FTS5 keeps what is written to it in memory until the transaction ends
// only while each row written has a larger rowid than the one before (and
// a row's deletion comes right before its new version); a write out of
// that order makes it flush what it holds to a new segment first, which
// cost more than everything else together.
func (ix *callIndexer) write(ctx context.Context, changes []*audit.CallChange) error {
	defer clear(ix.fresh)
	ix.fresh = ix.fresh[:0]
	for _, c := range changes {
		if c.New && ix.insMany != nil {
			ix.fresh = append(ix.fresh, c)
			if len(ix.fresh) == callRows {
				if err := ix.insertFresh(ctx); err != nil {
					return err
				}
			}
			continue
		}
		if err := ix.writeRow(ctx, c); err != nil {
			return fmt.Errorf("call index: call %s: %w", c.ID, err)
		}
	}
	for _, c := range ix.fresh {
		if err := ix.writeRow(ctx, c); err != nil {
			return fmt.Errorf("call index: call %s: %w", c.ID, err)
		}
	}
	ix.changed = append(ix.changed[:0], changes...)
	slices.SortFunc(ix.changed, func(a, b *audit.CallChange) int { return cmp.Compare(a.K, b.K) })
	defer clear(ix.changed)
	for _, c := range ix.changed {
		if !c.Words {
			continue
		}
		var was callText
		if !c.New {
			if _, _, err := ix.query1(ctx, ix.args, c.Was.ReqSeq, c.Was.OutSeq); err != nil {
				return fmt.Errorf("call index: text: %w", err)
			}
			was.args, _ = ix.row[0].(string)
			was.result, _ = ix.row[1].(string)
		}
		now := was
		if c.New {
			now.args = c.Args
		}
		if c.HasResult {
			now.result = c.Result
		}
		if was == now {
			continue
		}
		if !was.empty() {
			if _, err := ix.exec(ctx, ix.untext, c.K, was.args, was.result); err != nil {
				return fmt.Errorf("call index: text: %w", err)
			}
		}
		if !now.empty() {
			if _, err := ix.exec(ctx, ix.text, c.K, now.args, now.result); err != nil {
				return fmt.Errorf("call index: text: %w", err)
			}
		}
	}
	return nil
}

// insertFresh inserts callRows new calls' rows at once.
func (ix *callIndexer) insertFresh(ctx context.Context) error {
	defer func() {
		for i := range ix.many {
			ix.many[i].Value = nil
		}
	}()
	for i, c := range ix.fresh {
		for j, v := range newCallValues(c) {
			ix.many[i*len(ix.vals)+j].Value = v
		}
	}
	ix.fresh = ix.fresh[:0]
	if _, err := ix.insMany.ExecContext(ctx, ix.many[:]); err != nil {
		return fmt.Errorf("call index: %w", err)
	}
	return nil
}

// newCallValues are a new call's columns, as insertCall takes them.
func newCallValues(c *audit.CallChange) [15]any {
	return [15]any{c.K, c.ID, c.ReqSeq, c.OutSeq, c.DecSeq, c.Server, c.Tool, c.Client, c.Session,
		c.Decision, c.DecidedBy, c.Outcome, c.Approval, c.User, c.UserEmail}
}

// writeRow inserts a new call's row, or updates what changed of one.
func (ix *callIndexer) writeRow(ctx context.Context, c *audit.CallChange) error {
	if c.New {
		v := newCallValues(c)
		_, err := ix.exec(ctx, ix.ins, v[:]...)
		return err
	}
	w := &c.Was
	if c.OutSeq != w.OutSeq || c.Outcome != w.Outcome || c.Approval != w.Approval || c.DecSeq != w.DecSeq {
		if _, err := ix.exec(ctx, ix.update, c.OutSeq, c.Outcome, c.Approval, c.DecSeq, c.K); err != nil {
			return err
		}
	}
	if c.Decision != w.Decision || c.DecidedBy != w.DecidedBy {
		if _, err := ix.exec(ctx, ix.decider, c.Decision, c.DecidedBy, c.K); err != nil {
			return err
		}
	}
	return nil
}

func (ix *callIndexer) bind(args []any) []driver.NamedValue {
	for i, a := range args {
		ix.vals[i].Value = a
	}
	return ix.vals[:len(args)]
}

func (ix *callIndexer) unbind() {
	for i := range ix.vals {
		ix.vals[i].Value = nil // the record's text is not kept
	}
}

func (ix *callIndexer) exec(ctx context.Context, st driverStmt, args ...any) (driver.Result, error) {
	defer ix.unbind()
	return st.ExecContext(ctx, ix.bind(args))
}

// query1 runs a statement that returns at most one row into ix.row, and
// returns its first column (ok false when it returned none).
func (ix *callIndexer) query1(ctx context.Context, st driverStmt, args ...any) (any, bool, error) {
	defer ix.unbind()
	rows, err := st.QueryContext(ctx, ix.bind(args))
	if err != nil {
		return nil, false, err
	}
	clear(ix.row[:])
	err = rows.Next(ix.row[:len(rows.Columns())])
	cerr := rows.Close()
	switch {
	case errors.Is(err, io.EOF):
		return nil, false, cerr
	case err != nil:
		return nil, false, err
	case cerr != nil:
		return nil, false, cerr
	}
	return ix.row[0], true, nil
}

// clearCallIndex empties the call index.
const clearCallIndex = `DELETE FROM call_index; INSERT INTO call_text (call_text) VALUES ('delete-all');`

// fillBatch is how many records the fill hands the indexer at a time.
const fillBatch = 4096

// CallIndex keeps the call index the readers query: the ingester keeps it
// as it commits, and it is made from the records when an open finds it
// behind or when asked to; DB.CallIndex returns it.
type CallIndex struct{ db *DB }

// CallIndex returns the audit log's call index.
func (db *DB) CallIndex() CallIndex { return CallIndex{db} }

// RebuildCallIndex makes the call index again from the records, in one
// transaction: for a database whose index was damaged or written by a
// version of guard that did not keep it.
func (ci CallIndex) RebuildCallIndex(ctx context.Context) error {
	if !ci.db.writable {
		return errReadOnly
	}
	ci.db.ing.caughtUp(ctx)
	return ci.fillCallIndex(ctx, true)
}

// fillCallIndex makes the call index from the records with the
// ingester's own indexer, in seq order, in one transaction on the audit
// writer's connection. Unless rebuild, it does so only when the newest
// call has no row in the index: a database of an earlier version, just
// migrated, or one that an earlier version wrote to since (records it
// moved in from its journals, another process of that version). The
// index is cleared first.
func (ci CallIndex) fillCallIndex(ctx context.Context, rebuild bool) error {
	if !rebuild {
		var missing bool
		q := `SELECT NOT EXISTS (SELECT 1 FROM call_index WHERE call_id =
			(SELECT call_id FROM records WHERE kind = 'request' ORDER BY seq DESC LIMIT 1))
			AND EXISTS (SELECT 1 FROM records WHERE kind = 'request')`
		if ci.db.pg {
			// A call of a batch whose rows are not written yet is not
			// missing (pgindex.go).
			q += ` AND NOT EXISTS (SELECT 1 FROM call_pending WHERE
			(SELECT call_id FROM records WHERE kind = 'request' ORDER BY seq DESC LIMIT 1) = ANY(ids))`
		}
		err := ci.db.w.QueryRowContext(ctx, q).Scan(&missing)
		if err != nil {
			return fmt.Errorf("call index: %w", err)
		}
		if !missing {
			return nil
		}
	}
	ci.db.ing.commitMu.Lock()
	defer ci.db.ing.commitMu.Unlock()
	if ci.db.ing.wc == nil {
		wc, err := newWriterConn(ctx, ci.db.aw, ci.db.auth)
		if err != nil {
			return fmt.Errorf("call index: %w", err)
		}
		ci.db.ing.wc = wc
	}
	start := time.Now()
	n := 0
	wc := ci.db.ing.wc
	err := wc.conn.Raw(func(dc any) error {
		if _, err := wc.begin.ExecContext(ctx, nil); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		n0, err := ci.fillFrom(ctx, dc)
		if err == nil {
			_, err = wc.commit.ExecContext(ctx, nil)
		}
		n = n0
		return err
	})
	if err != nil {
		ci.db.ing.endFailed(ctx, wc)
		return fmt.Errorf("call index: %w", err)
	}
	ci.db.opts.Logger.Info("call index made from the audit records", "records", n, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// fillFrom clears the index, then hands every record, in seq order, to
// the indexer, inside the transaction begun on dc. Records whose bodies
// retention removed are not in the index (clearDerived), nor are records
// after the latest checkpoint, from MACs' start on, whose MAC fails
// (mac.go), which are alerted.
func (ci CallIndex) fillFrom(ctx context.Context, dc any) (int, error) {
	wc := ci.db.ing.wc
	ec, ok := dc.(driver.ExecerContext)
	if !ok {
		return 0, errors.New("the driver cannot run a statement")
	}
	clear := clearCallIndex
	if wc.pg {
		clear = pgClearCallIndex
	}
	if _, err := ec.ExecContext(ctx, clear, nil); err != nil {
		return 0, fmt.Errorf("clear: %w", err)
	}
	from, err := ci.db.auth.macsFrom(ctx, ci.db.r)
	if err != nil {
		return 0, err
	}
	latest, err := latestSigned(ctx, ci.db.r, ci.db.signer.Verifier())
	if err != nil {
		return 0, err
	}
	var tail int64 // the records the latest checkpoint covers
	if latest != nil {
		tail = latest.Size
	}
	// Only what the index reads of them: a call's records, with their
	// text, in seq order (through records_call's rows would be no
	// faster: every record is read), and what their MACs cover.
	rows, err := ci.db.r.QueryContext(ctx, `SELECT seq, call_id, kind, time, session, client, server, tool, arguments,
		decision, decided_by, outcome, result, approval, user_subject, user_email, id, hash, mac FROM records
		WHERE kind IN ('request', 'outcome', 'decision') AND pruned = 0 ORDER BY seq`)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var recs []*guard.Record
	n := 0
	flush := func() error {
		if len(recs) == 0 {
			return nil
		}
		n += len(recs)
		err := wc.ix.index(ctx, recs)
		recs = recs[:0]
		return err
	}
	for rows.Next() {
		var r guard.Record
		var at string
		var mac []byte
		if err := rows.Scan(&r.Seq, &r.CallID, &r.Kind, &at, &r.Session, &r.Client, &r.Server, &r.Tool, &r.Arguments,
			&r.Decision, &r.DecidedBy, &r.Outcome, &r.Result, &r.Approval, &r.User, &r.UserEmail, &r.ID, &r.Hash, &mac); err != nil {
			return n, err
		}
		if from > 0 && r.Seq >= from && r.Seq > tail && !wc.mac.Valid(r.Seq, r.Hash, mac) {
			ci.db.auth.alert(r.Seq, r.ID, "carries no valid MAC")
			continue
		}
		r.Time = parseTime(at)
		recs = append(recs, &r)
		if len(recs) == fillBatch {
			if err := flush(); err != nil {
				return n, err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return n, err
	}
	return n, flush()
}
