package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	guard "github.com/guard-mcp/guard"
)

// The calls of the audit log are queried through an index the ingester
// keeps in the transaction that commits their records (call_index and its
// words, call_text; migration 0009): one row per invocation with the
// columns the filters select on and the records that make the call up,
// so that a query reads the newest matching calls from an index's end
// instead of joining every call's records. It is not part of the chain:
// it is derived from the records alone, and RebuildCallIndex makes it
// again from them.
//
// A call's row is made by its first request record. Its latest outcome
// record gives its outcome and result; its decision (decision,
// decided_by, reason) is that of the latest record among its outcome and
// decision records that carries one, else its request's; its approval
// is the latest one any of its records carries.

// keyRankBits is how many of a call's key's low bits hold its rank among
// the calls of the same millisecond.
const keyRankBits = 20

// maxKeyMillis bounds the milliseconds a key holds (the year 2109), so
// that a key fits in 63 bits.
const maxKeyMillis = 1<<42 - 1

// keyMillis is the first key of the calls made in t's millisecond; times
// before 1970 or after maxKeyMillis share the first or the last.
func keyMillis(t time.Time) int64 {
	return min(max(t.UnixMilli(), 0), maxKeyMillis) << keyRankBits
}

// The ingester's statements. A call's key is the first of its millisecond
// not yet taken: the calls of one millisecond rank in the order they
// arrive, which is their records' order. None of them may need a
// statement journal (an INSERT ... SELECT, a RETURNING clause): each
// statement journal opened after the text index was written in a
// transaction makes FTS5 flush what it holds in memory to a new segment,
// which cost more than all the rest.
const (
	selectCallKey = `SELECT (SELECT k FROM call_index WHERE call_id = ?2),
 (SELECT max(k) FROM call_index WHERE k >= ?1 AND k < ?1 + 1048576), (SELECT max(k) FROM call_index)`
	insertCall = `INSERT INTO call_index (k, call_id, req_seq, dec_seq, server, tool, client, session, decision, decided_by, approval,
 user_subject, user_email) VALUES (?1, ?2, ?3, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)`
	selectCall = `SELECT k, req_seq, out_seq, decision, decided_by FROM call_index WHERE call_id = ?1`
	// The columns that are not indexed are set in one statement, and
	// decision and decided_by only when they change: an UPDATE that sets
	// an indexed column rewrites its index entry even to the same value.
	updateOutcome = `UPDATE call_index SET out_seq = ?1, outcome = ?2,
 approval = CASE WHEN ?3 = '' THEN approval ELSE ?3 END, dec_seq = CASE WHEN ?5 THEN ?1 ELSE dec_seq END WHERE k = ?4`
	updateDecision = `UPDATE call_index SET dec_seq = ?1, approval = CASE WHEN ?2 = '' THEN approval ELSE ?2 END WHERE k = ?3`
	updateDecider  = `UPDATE call_index SET decision = ?1, decided_by = ?2 WHERE k = ?3`
	updateApproval = `UPDATE call_index SET approval = ?1 WHERE k = ?2`
	selectText     = `SELECT (SELECT arguments FROM records WHERE seq = ?1), coalesce((SELECT result FROM records WHERE seq = ?2), '')`
	insertText     = `INSERT INTO call_text (rowid, arguments, result) VALUES (?1, ?2, ?3)`
	deleteText     = `INSERT INTO call_text (call_text, rowid, arguments, result) VALUES ('delete', ?1, ?2, ?3)`
)

// pgSeparators is what separates words for the text index on
// PostgreSQL, as for SQLite's FTS5 (unicode61): whitespace and ASCII
// punctuation, the underscore among it, so that /etc/passwd, delete_all
// and user@example.com are each several words. It is replaced by spaces
// before PostgreSQL's parser reads the text, which would otherwise take
// such a string as one word (a file name, an e-mail address). A bracket
// expression of ranges, not a character class, so that the database's
// locale does not change it.
const pgSeparators = "[[:space:]!-/:-@[-`{-~]+"

// pgWords is the SQL of the words of the text expr, for the text index.
func pgWords(expr string) string {
	return "to_tsvector('simple', regexp_replace(" + expr + ", '" + pgSeparators + "', ' ', 'g'))"
}

// The text index on PostgreSQL: a call's words as a tsvector (postgres
// migration 0012), replaced whole.
var pgInsertText = `INSERT INTO call_text (k, words) VALUES (?1, ` + pgWords(`?2 || ' ' || ?3`) + `)
 ON CONFLICT (k) DO UPDATE SET words = excluded.words`

const (
	pgDeleteText     = `DELETE FROM call_text WHERE k = ?1 AND ?2::text IS NOT NULL AND ?3::text IS NOT NULL`
	pgClearCallIndex = `DELETE FROM call_index; DELETE FROM call_text`
)

// callIndexer keeps the call index on the audit writer's connection, with
// its statements prepared once (see writerConn).
type callIndexer struct {
	key, ins, call, out, decided, decider, approval, args, text, untext driverStmt
	vals                                                                [12]driver.NamedValue
	row                                                                 [5]driver.Value
	texts                                                               map[int64]textChange // the batch's changes to the text index
	keys                                                                []int64
}

func newCallIndexer(ctx context.Context, pc driver.ConnPrepareContext, pg bool) (*callIndexer, error) {
	ix := &callIndexer{texts: map[int64]textChange{}}
	text, untext := insertText, deleteText
	if pg {
		text, untext = pgInsertText, pgDeleteText
	}
	for i := range ix.vals {
		ix.vals[i].Ordinal = i + 1
	}
	for _, p := range []struct {
		s *driverStmt
		q string
	}{{&ix.key, selectCallKey}, {&ix.ins, insertCall}, {&ix.call, selectCall}, {&ix.out, updateOutcome}, {&ix.decided, updateDecision},
		{&ix.decider, updateDecider}, {&ix.approval, updateApproval}, {&ix.args, selectText}, {&ix.text, text}, {&ix.untext, untext}} {
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

// close closes the statements (inside the connection's Raw).
func (ix *callIndexer) close() error {
	var errs []error
	for _, s := range []*driverStmt{&ix.key, &ix.ins, &ix.call, &ix.out, &ix.decided, &ix.decider, &ix.approval, &ix.args, &ix.text, &ix.untext} {
		if *s != nil {
			errs = append(errs, (*s).Close())
			*s = nil
		}
	}
	return errors.Join(errs...)
}

// callText is a call's row of the text index: its arguments and its
// latest result.
type callText struct{ args, result string }

func (t callText) empty() bool { return t.args == "" && t.result == "" }

// textChange is what a batch does to one call's row of the text index:
// the row as it was before the batch (none when was is empty) and as it
// is after.
type textChange struct{ was, now callText }

// index brings the index up to date with a batch of records just
// inserted, in the same transaction. The text index is written last, in
// key order: FTS5 keeps what is written to it in memory until the
// transaction ends only while each row written has a larger rowid than
// the one before (and a row's deletion comes right before its new
// version); a write out of that order makes it flush what it holds to a
// new segment first, which cost more than everything else together.
func (ix *callIndexer) index(ctx context.Context, batch []*appendReq) error {
	clear(ix.texts)
	for _, req := range batch {
		for _, r := range req.recs {
			var err error
			switch r.Kind {
			case guard.KindRequest:
				err = ix.request(ctx, r)
			case guard.KindOutcome:
				err = ix.outcome(ctx, r)
			case guard.KindDecision:
				err = ix.decision(ctx, r)
			}
			if err != nil {
				return fmt.Errorf("call index: record %d: %w", r.Seq, err)
			}
		}
	}
	keys := ix.keys[:0]
	for k := range ix.texts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	ix.keys = keys
	for _, k := range keys {
		c := ix.texts[k]
		if c.was == c.now {
			continue
		}
		if !c.was.empty() {
			if _, err := ix.exec(ctx, ix.untext, k, c.was.args, c.was.result); err != nil {
				return fmt.Errorf("call index: text: %w", err)
			}
		}
		if !c.now.empty() {
			if _, err := ix.exec(ctx, ix.text, k, c.now.args, c.now.result); err != nil {
				return fmt.Errorf("call index: text: %w", err)
			}
		}
	}
	clear(ix.texts)
	return nil
}

func (ix *callIndexer) request(ctx context.Context, r *guard.Record) error {
	base := keyMillis(r.Time)
	if _, _, err := ix.query1(ctx, ix.key, base, r.CallID); err != nil {
		return err
	}
	if ix.row[0] != nil {
		return nil // a later request of a call already indexed
	}
	k := base
	if last, ok := ix.row[1].(int64); ok {
		k = last + 1
	}
	if k >= base+1<<keyRankBits {
		// A millisecond with more calls than a key can rank (a clock
		// that stood still): the call goes after every other.
		k = ix.row[2].(int64) + 1
	}
	if _, err := ix.exec(ctx, ix.ins, k, r.CallID, r.Seq, r.Server, r.Tool, r.Client, r.Session,
		r.Decision, r.DecidedBy, r.Approval, r.User, r.UserEmail); err != nil {
		return err
	}
	ix.texts[k] = textChange{now: callText{args: r.Arguments}}
	return nil
}

// indexedCall is what the ingester reads of a call's row.
type indexedCall struct {
	k                   int64
	reqSeq, outSeq      any
	decision, decidedBy string
}

// lookup reads a call's row; ok is false for a call without a request
// record.
func (ix *callIndexer) lookup(ctx context.Context, callID string) (c indexedCall, ok bool, err error) {
	_, ok, err = ix.query1(ctx, ix.call, callID)
	if !ok || err != nil {
		return c, ok, err
	}
	c.k, _ = ix.row[0].(int64)
	c.reqSeq, c.outSeq = ix.row[1], ix.row[2]
	c.decision, _ = ix.row[3].(string)
	c.decidedBy, _ = ix.row[4].(string)
	return c, true, nil
}

// decide makes r the record whose decision the call shows.
func (ix *callIndexer) decide(ctx context.Context, c indexedCall, r *guard.Record) error {
	if r.Decision == c.decision && r.DecidedBy == c.decidedBy {
		return nil
	}
	_, err := ix.exec(ctx, ix.decider, r.Decision, r.DecidedBy, c.k)
	return err
}

func (ix *callIndexer) outcome(ctx context.Context, r *guard.Record) error {
	ic, ok, err := ix.lookup(ctx, r.CallID)
	if err != nil || !ok {
		return err
	}
	k := ic.k
	if _, err := ix.exec(ctx, ix.out, r.Seq, r.Outcome, r.Approval, k, r.Decision != ""); err != nil {
		return err
	}
	if r.Decision != "" {
		if err := ix.decide(ctx, ic, r); err != nil {
			return err
		}
	}
	// The call's words are its arguments and its latest outcome's result.
	c, seen := ix.texts[k]
	if !seen {
		if _, _, err := ix.query1(ctx, ix.args, ic.reqSeq, ic.outSeq); err != nil {
			return err
		}
		c.was.args, _ = ix.row[0].(string)
		c.was.result, _ = ix.row[1].(string)
		c.now.args = c.was.args
	}
	c.now.result = r.Result
	ix.texts[k] = c
	return nil
}

func (ix *callIndexer) decision(ctx context.Context, r *guard.Record) error {
	if r.Decision == "" && r.Approval == "" {
		return nil
	}
	ic, ok, err := ix.lookup(ctx, r.CallID)
	if err != nil || !ok {
		return err
	}
	if r.Decision == "" {
		_, err = ix.exec(ctx, ix.approval, r.Approval, ic.k)
		return err
	}
	if _, err := ix.exec(ctx, ix.decided, r.Seq, r.Approval, ic.k); err != nil {
		return err
	}
	return ix.decide(ctx, ic, r)
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

// RebuildCallIndex makes the call index again from the records, in one
// transaction: for a database whose index was damaged or written by a
// version of guard that did not keep it.
func (db *DB) RebuildCallIndex(ctx context.Context) error {
	if !db.writable {
		return errReadOnly
	}
	db.caughtUp(ctx)
	return db.fillCallIndex(ctx, true)
}

// fillCallIndex makes the call index from the records with the
// ingester's own indexer, in seq order, in one transaction on the audit
// writer's connection. Unless rebuild, it does so only when the newest
// call has no row in the index: a database of an earlier version, just
// migrated, or one that an earlier version wrote to since (records it
// moved in from its journals, another process of that version). The
// index is cleared first.
func (db *DB) fillCallIndex(ctx context.Context, rebuild bool) error {
	if !rebuild {
		var missing bool
		err := db.w.QueryRowContext(ctx, `SELECT NOT EXISTS (SELECT 1 FROM call_index WHERE call_id =
			(SELECT call_id FROM records WHERE kind = 'request' ORDER BY seq DESC LIMIT 1))
			AND EXISTS (SELECT 1 FROM records WHERE kind = 'request')`).Scan(&missing)
		if err != nil {
			return fmt.Errorf("call index: %w", err)
		}
		if !missing {
			return nil
		}
	}
	db.commitMu.Lock()
	defer db.commitMu.Unlock()
	if db.wc == nil {
		wc, err := newWriterConn(ctx, db.aw, db.auth)
		if err != nil {
			return fmt.Errorf("call index: %w", err)
		}
		db.wc = wc
	}
	start := time.Now()
	n := 0
	wc := db.wc
	err := wc.conn.Raw(func(dc any) error {
		if _, err := wc.begin.ExecContext(ctx, nil); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		n0, err := db.fillFrom(ctx, dc)
		if err == nil {
			_, err = wc.commit.ExecContext(ctx, nil)
		}
		n = n0
		return err
	})
	if err != nil {
		if _, rerr := wc.conn.ExecContext(ctx, "ROLLBACK"); rerr != nil && wc.conn.PingContext(ctx) != nil {
			db.wc = nil
			_ = wc.discard()
		}
		return fmt.Errorf("call index: %w", err)
	}
	db.opts.Logger.Info("call index made from the audit records", "records", n, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// fillFrom clears the index, then hands every record, in seq order, to
// the indexer, inside the transaction begun on dc. Records whose bodies
// retention removed are not in the index (clearDerived), nor are records
// after the latest checkpoint, from MACs' start on, whose MAC fails
// (mac.go), which are alerted.
func (db *DB) fillFrom(ctx context.Context, dc any) (int, error) {
	wc := db.wc
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
	from, err := db.auth.macsFrom(ctx, db.r)
	if err != nil {
		return 0, err
	}
	latest, err := latestSigned(ctx, db.r, db.signer.verifier)
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
	rows, err := db.r.QueryContext(ctx, `SELECT seq, call_id, kind, time, session, client, server, tool, arguments,
		decision, decided_by, outcome, result, approval, user_subject, user_email, id, hash, mac FROM records
		WHERE kind IN ('request', 'outcome', 'decision') AND pruned = 0 ORDER BY seq`)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	batch := []*appendReq{{}}
	n := 0
	flush := func() error {
		if len(batch[0].recs) == 0 {
			return nil
		}
		n += len(batch[0].recs)
		err := wc.ix.index(ctx, batch)
		batch[0].recs = batch[0].recs[:0]
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
		if from > 0 && r.Seq >= from && r.Seq > tail && !wc.mac.valid(r.Seq, r.Hash, mac) {
			db.auth.alert(r.Seq, r.ID, "carries no valid MAC")
			continue
		}
		r.Time = parseTime(at)
		batch[0].recs = append(batch[0].recs, &r)
		if len(batch[0].recs) == fillBatch {
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
