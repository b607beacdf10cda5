package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// The call index (callindex.go) is derived from the records, and queries
// and the Activity page read it: verify checks it against them, so that a
// call hidden from queries, or shown with another decision, is caught
// like a record altered. Its rows must point to their own call's
// records, hold what those records say, and be one for every call whose
// records have their bodies (retention takes a pruned call's row out).

// indexChecks are the queries that find a row of the call index at odds
// with the records, with what each says is wrong.
// user marks a check of the user columns, which a database of the
// release before has not.
var indexChecks = []struct {
	q, what string
	user    bool
}{
	{`SELECT c.call_id FROM call_index c LEFT JOIN records q ON q.seq = c.req_seq
	  WHERE q.seq IS NULL OR q.call_id != c.call_id OR q.kind != 'request' OR q.server != c.server OR q.tool != c.tool
	     OR q.client != c.client OR q.session != c.session LIMIT 1`,
		"its request record is not the one it names, or says otherwise", false},
	{`SELECT c.call_id FROM call_index c JOIN records q ON q.seq = c.req_seq
	  WHERE q.user_subject != c.user_subject OR q.user_email != c.user_email LIMIT 1`,
		"its user is not its request record's", true},
	{`SELECT c.call_id FROM call_index c LEFT JOIN records d ON d.seq = c.dec_seq
	  WHERE d.seq IS NULL OR d.call_id != c.call_id OR d.decision != c.decision OR d.decided_by != c.decided_by LIMIT 1`,
		"its decision is not that of the record it names", false},
	{`SELECT c.call_id FROM call_index c LEFT JOIN records o ON o.seq = c.out_seq
	  WHERE c.out_seq != 0 AND (o.seq IS NULL OR o.call_id != c.call_id OR o.kind != 'outcome' OR o.outcome != c.outcome) LIMIT 1`,
		"its outcome is not that of the record it names", false},
	{`SELECT c.call_id FROM call_index c
	  WHERE EXISTS (SELECT 1 FROM records r WHERE r.call_id = c.call_id AND r.kind IN ('outcome', 'decision') AND r.seq > c.out_seq AND r.seq > c.dec_seq
	                AND (r.kind = 'outcome' OR r.decision != '') AND r.seq <= ?) LIMIT 1`,
		"a later outcome or decision of the call is not in it", false},
}

// checkCallIndex returns a problem with the call index, or "" (also when
// the database has none: a schema before it). Records after upTo are an
// unauthenticated tail (mac.go): guard does not index one whose MAC
// fails, which a verifier without the MAC key cannot tell, so the index
// need not hold them.
func (vr Verifier) checkCallIndex(ctx context.Context, upTo int64) (string, error) {
	upTo, err := vr.indexedUpTo(ctx, upTo)
	if err != nil {
		return "", err
	}
	tx, err := vr.db.r.BeginTx(ctx, nil)
	if err != nil {
		return "", err
	}
	defer tx.Rollback() //nolint:errcheck // it only read
	var has int
	if err := tx.QueryRowContext(ctx, tableExists(vr.db.pg, "call_index")).Scan(&has); err != nil || has == 0 {
		return "", err
	}
	for _, c := range indexChecks {
		if c.user && vr.db.schema.noUser {
			continue
		}
		var id string
		var args []any
		if strings.Contains(c.q, "?") {
			args = append(args, upTo)
		}
		err := tx.QueryRowContext(ctx, c.q, args...).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("the call index does not match the records: call %s: %s%s", id, c.what, indexRebuild), nil
	}
	// One row for every call with a request record that has its body.
	body := `pruned = 0`
	if vr.db.schema.noPruned {
		body = `1` // a schema before retention: nothing was pruned
	}
	var calls, rows int64
	if err := tx.QueryRowContext(ctx, `SELECT count(DISTINCT call_id) FROM records WHERE kind = 'request' AND seq <= ? AND `+body, upTo).Scan(&calls); err != nil {
		return "", err
	}
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM call_index WHERE req_seq <= ?`, upTo).Scan(&rows); err != nil {
		return "", err
	}
	if calls != rows {
		return fmt.Sprintf("the call index does not match the records: %d calls in the records, %d in the index, so queries would not show them all%s", calls, rows, indexRebuild), nil
	}
	return "", nil
}

// indexedUpTo is how far the call index must hold the records up to
// upTo: on PostgreSQL a writable process first writes the rows of the
// batches pending up to there (pgindex.go); a read-only one checks the
// index only before the first batch still pending, whose rows a writable
// guard writes.
func (vr Verifier) indexedUpTo(ctx context.Context, upTo int64) (int64, error) {
	if !vr.db.pg || vr.db.schema.noPending || upTo <= 0 {
		return upTo, nil
	}
	if vr.db.writable {
		return upTo, vr.db.completeIndex(ctx, upTo)
	}
	var first sql.NullInt64
	if err := vr.db.r.QueryRowContext(ctx, `SELECT min(first_seq) FROM call_pending`).Scan(&first); err != nil {
		return 0, fmt.Errorf("call index: %w", err)
	}
	if first.Valid {
		upTo = min(upTo, first.Int64-1)
	}
	return upTo, nil
}
