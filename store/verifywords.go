package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"

	"github.com/guard-mcp/guard/store/postgres"
	"github.com/guard-mcp/guard/store/sqlite"
)

// The words of the text index (call_text: a call's redacted arguments
// and latest result) are derived from the records like the rest of the
// call index (verifyindex.go), and guard audit query --text reads them: a
// call whose words were removed or changed is missed by a search that
// every other filter shows it to. Verify checks them against the records.
//
// On PostgreSQL each call's tsvector is compared with the one its
// records make, in the database, a batch of calls at a time. SQLite's
// index is contentless, and its words are compared through hashes summed
// by call (sqlite.CheckWords).

// wordsBatch is how many calls' text the index in memory takes at a
// time, and on PostgreSQL how many calls one statement compares.
const wordsBatch = 2048

// wordsProblem says what is wrong with a call's words.
func wordsProblem(call string) string {
	return fmt.Sprintf("the text index does not match the records: call %s: its words are not those of its arguments and result, so guard audit query --text would not find it by them (or would by others)%s",
		call, indexRebuild)
}

// indexRebuild says how the call index, words included, is made again.
const indexRebuild = "; the index is derived from the records: a writable guard makes it again (guard run or guard serve, after removing the call_index rows)"

// checkCallWords returns a problem with the text index's words, or ""
// (also when the database has no call index: a schema before it).
func (vr Verifier) checkCallWords(ctx context.Context) (string, error) {
	if vr.db.hold != nil {
		return "", nil // nothing recorded
	}
	var has int
	if err := vr.db.r.QueryRowContext(ctx, tableExists(vr.db.pg, "call_text")).Scan(&has); err != nil || has == 0 {
		return "", err
	}
	if vr.db.pg {
		return vr.checkCallWordsPG(ctx)
	}
	return vr.checkCallWordsSQLite(ctx)
}

// pgWordsDiffer finds the first call of a batch (keys after ?1, up to
// ?2) whose words are not those its records make, as postgres.InsertWords makes
// them (a call without text has no row).
var pgWordsDiffer = `SELECT c.call_id FROM call_index c
 JOIN records q ON q.seq = c.req_seq LEFT JOIN records o ON o.seq = c.out_seq LEFT JOIN call_text t ON t.k = c.k
 WHERE c.k > ?1 AND c.k <= ?2 AND coalesce(t.words, ''::tsvector) IS DISTINCT FROM
  CASE WHEN q.arguments <> '' OR coalesce(o.result, '') <> '' THEN ` + postgres.Words(`q.arguments || ' ' || coalesce(o.result, '')`) + ` ELSE ''::tsvector END
 ORDER BY c.k LIMIT 1`

func (vr Verifier) checkCallWordsPG(ctx context.Context) (string, error) {
	tx, err := vr.db.r.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return "", err
	}
	defer tx.Rollback() //nolint:errcheck // it only read
	var k int64
	err = tx.QueryRowContext(ctx, `SELECT t.k FROM call_text t LEFT JOIN call_index c ON c.k = t.k WHERE c.k IS NULL LIMIT 1`).Scan(&k)
	if err == nil {
		return fmt.Sprintf("the text index does not match the records: it holds words under key %d, which is no call's%s", k, indexRebuild), nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return "", err
	}
	for lo := int64(math.MinInt64); ; {
		var hi sql.NullInt64
		if err := tx.QueryRowContext(ctx, `SELECT max(k) FROM (SELECT k FROM call_index WHERE k > ? ORDER BY k LIMIT ?) b`, lo, wordsBatch).Scan(&hi); err != nil {
			return "", err
		}
		if !hi.Valid {
			return "", nil
		}
		var id string
		err := tx.QueryRowContext(ctx, pgWordsDiffer, lo, hi.Int64).Scan(&id)
		if err == nil {
			return wordsProblem(id), nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return "", err
		}
		lo = hi.Int64
	}
}

// checkCallWordsSQLite is checkCallWords on SQLite (sqlite.CheckWords).
func (vr Verifier) checkCallWordsSQLite(ctx context.Context) (string, error) {
	m, err := sqlite.CheckWords(ctx, vr.db.opts.Path, wordsBatch)
	if err != nil || m == nil {
		return "", err
	}
	if m.CallID == "" {
		return fmt.Sprintf("the text index does not match the records: it holds words under key %d, which is no call's%s", m.Key, indexRebuild), nil
	}
	return wordsProblem(m.CallID), nil
}
