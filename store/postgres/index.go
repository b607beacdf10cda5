package postgres

import (
	"context"
	"fmt"
	"slices"

	guard "github.com/guard-mcp/guard"
	"github.com/jackc/pgx/v5"
)

// The call index's rows and words are written after the batch that
// handed out their calls' keys commits, outside the audit lock, in a
// transaction of their own: writers on several replicas write theirs at
// once. A batch leaves a row in call_pending (migration 0022) naming the
// calls it touched and their keys; whoever writes the index's rows of a
// pending batch (its writer, another replica's, a query that would read
// the index) claims the row (deleting it, so that no one else writes the
// batch), locks the batch's calls (an advisory lock for each, taken in
// one order by everyone, so that two writers of one call take turns and
// none waits for another in a circle), and makes each call's row again
// from every record of the call (not from the batch's records alone: a
// call's request and outcome may be in batches written in either order).
// A row is thus its call's state as the records committed before its
// writer read them say, whichever batch is written last.
//
// ClaimPending is the claim, the locks and the read of the records, in
// two round trips; WriteCalls writes the rows and words and commits, in
// one.

// OutsideLock begins the statements of the call index's writers: in
// pg_stat_statements (the benchmark's figures) it tells them from the
// statements a batch runs under the audit lock.
const OutsideLock = "/* outside the audit lock */ "

// insertPending is a batch's row in call_pending.
const insertPending = `INSERT INTO call_pending (last_seq, first_seq, ids, ks) VALUES ($1, $2, $3, $4)`

// claimPending claims up to $2 pending batches whose first record is at
// most $1 and that no one else claimed, returning their calls and keys.
const claimPending = OutsideLock + `WITH c AS (DELETE FROM call_pending WHERE last_seq IN
 (SELECT last_seq FROM call_pending WHERE first_seq <= $1 ORDER BY last_seq LIMIT $2 FOR UPDATE SKIP LOCKED)
 RETURNING ids, ks)
 SELECT p.id, p.k FROM c, unnest(c.ids, c.ks) AS p(id, k)`

// lockCallKeys takes the advisory locks of calls, in the array's order
// (CallLocks sorts them): the two-key form, in a space of its own.
const lockCallKeys = OutsideLock + `SELECT count(pg_advisory_xact_lock($1, x)) FROM unnest($2::int[]) AS x`

// LockCalls is a statement that takes, in the transaction under way,
// the advisory locks of the calls keyed ks, which a writer of their
// call index rows holds: with its arguments.
func LockCalls(ks []int64) (query string, args []any) {
	return lockCallKeys, []any{lockCalls, CallLocks(ks)}
}

// CallLocks are the second keys of the locks of the calls keyed ks,
// sorted, each once.
func CallLocks(ks []int64) []int32 {
	locks := make([]int32, 0, len(ks))
	for _, k := range ks {
		locks = append(locks, callLock(k))
	}
	slices.Sort(locks)
	return slices.Compact(locks)
}

// selectCallRecords reads what the call index holds of calls' records,
// in the log's order; those whose bodies retention removed are not in it.
const selectCallRecords = OutsideLock + `SELECT seq, call_id, kind, session, client, server, tool, arguments, decision, decided_by,
 outcome, result, approval, user_subject, user_email FROM records
 WHERE call_id = ANY($1::text[]) AND kind IN ('request', 'outcome', 'decision') AND pruned = 0 ORDER BY seq`

// PendingQuery tells whether a batch whose first record is at most $1
// still waits for its call index rows.
const PendingQuery = `SELECT EXISTS (SELECT 1 FROM call_pending WHERE first_seq <= $1)`

// deleteWords removes the words of calls that have none any more.
const deleteWords = OutsideLock + `DELETE FROM call_text WHERE k = ANY($1::bigint[])`

// lockCalls is the first key of the calls' advisory locks.
var lockCalls = int32(AdvisoryKey("guard: call index"))

// callLock is the second key of the advisory lock of the call keyed k.
func callLock(k int64) int32 { return int32(k ^ k>>32) }

// ClaimPending begins a transaction on conn, claims up to limit pending
// batches whose first record is at most upTo, locks their calls, and
// reads their calls' records (without their time): keys are the calls'
// keys. When it claimed none, keys is empty and the transaction is
// ended. On error the transaction may be open: the caller rolls back.
func ClaimPending(ctx context.Context, conn *pgx.Conn, upTo int64, limit int) (keys map[string]int64, recs []*guard.Record, err error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(OutsideLock + `SELECT ` + indexScans)
	b.Queue(claimPending, upTo, limit)
	keys = map[string]int64{}
	err = func() error {
		res := conn.SendBatch(ctx, b)
		defer res.Close()
		for range 2 {
			if _, err := res.Exec(); err != nil {
				return err
			}
		}
		rows, err := res.Query()
		if err != nil {
			return err
		}
		var id string
		var k int64
		_, err = pgx.ForEachRow(rows, []any{&id, &k}, func() error {
			keys[id] = k
			return nil
		})
		if err != nil {
			return err
		}
		return res.Close()
	}()
	if err != nil {
		return nil, nil, fmt.Errorf("call index: claim: %w", err)
	}
	if len(keys) == 0 {
		if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
			return nil, nil, fmt.Errorf("call index: claim: %w", err)
		}
		return keys, nil, nil
	}
	ids := make([]string, 0, len(keys))
	ks := make([]int64, 0, len(keys))
	for id, k := range keys {
		ids, ks = append(ids, id), append(ks, k)
	}
	b = &pgx.Batch{}
	q, args := LockCalls(ks)
	b.Queue(q, args...)
	b.Queue(selectCallRecords, ids)
	err = func() error {
		res := conn.SendBatch(ctx, b)
		defer res.Close()
		if _, err := res.Exec(); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		rows, err := res.Query()
		if err != nil {
			return err
		}
		var r guard.Record
		_, err = pgx.ForEachRow(rows, []any{&r.Seq, &r.CallID, &r.Kind, &r.Session, &r.Client, &r.Server, &r.Tool,
			&r.Arguments, &r.Decision, &r.DecidedBy, &r.Outcome, &r.Result, &r.Approval, &r.User, &r.UserEmail}, func() error {
			c := r
			recs = append(recs, &c)
			return nil
		})
		if err != nil {
			return err
		}
		return res.Close()
	}()
	if err != nil {
		return nil, nil, fmt.Errorf("call index: records: %w", err)
	}
	return keys, recs, nil
}

// CallWords are the words of calls: those keyed K, made from their text
// T; Empty are the calls that have none.
type CallWords struct {
	K     []int64
	T     []string
	Empty []int64
}

// WriteCalls writes the call index's rows and their words, in the
// transaction ClaimPending began, and commits, in one round trip.
func WriteCalls(ctx context.Context, conn *pgx.Conn, calls *CallColumns, words *CallWords) error {
	b := &pgx.Batch{}
	if len(calls.k) > 0 {
		b.Queue(upsertCalls, calls.args()...)
	}
	if len(words.K) > 0 {
		b.Queue(upsertText, words.K, words.T)
	}
	if len(words.Empty) > 0 {
		b.Queue(deleteWords, words.Empty)
	}
	b.Queue("COMMIT")
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("call index: %w", err)
	}
	return nil
}

// upsertText makes the words of calls from their text, as InsertWords
// makes it (the request's arguments, a space, the latest result).
var upsertText = OutsideLock + `INSERT INTO call_text (k, words) SELECT u.k, ` + Words(`u.t`) + `
 FROM unnest($1::bigint[], $2::text[]) AS u(k, t)
 ON CONFLICT (k) DO UPDATE SET words = excluded.words`
