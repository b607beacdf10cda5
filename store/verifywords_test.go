package store

import (
	"context"
	"fmt"
	"strings"
	"testing"

	guard "github.com/guard-mcp/guard"
)

// wordsLog appends n calls whose arguments and results hold words of
// their own (the first calls' results come in two rounds, so that their
// words are replaced once), and returns the database.
func wordsLog(t *testing.T, n int) *DB {
	t.Helper()
	db := openDB(t, testPath(t))
	t.Cleanup(func() { db.Close() })
	for i := range n {
		req, out := rec(i, guard.KindRequest), rec(i, guard.KindOutcome)
		req.Arguments = fmt.Sprintf(`{"path":"/srv/file%d","note":"word%d alpha"}`, i, i)
		out.Outcome, out.Result = guard.OutcomeOK, fmt.Sprintf(`{"text":"Résumé %d beta"}`, i)
		recs := []*guard.Record{req, out}
		if i < 3 {
			round := rec(i, guard.KindOutcome)
			round.Outcome, round.Result = guard.OutcomeInputRequired, `{"ask":"gamma"}`
			recs = []*guard.Record{req, round, out}
		}
		if err := db.Append(recs...); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// Verify checks the words of the text index against the records, on
// both engines: a log whose calls' words were replaced as their results
// came verifies, and one where whoever has the file removed or changed a
// call's words, so that a search by them misses it, or added words for no
// call, fails naming the call.
func TestVerifyCatchesFalsifiedWords(t *testing.T) {
	ctx := context.Background()
	t.Run("intact", func(t *testing.T) {
		db := wordsLog(t, wordsBatch+300)
		verifyOK(t, db)
	})
	// Each change, in SQLite's words (its contentless FTS5 index is
	// changed with its own commands, given the text a row was made of)
	// and in PostgreSQL's.
	ofCall1 := `(SELECT k FROM call_index WHERE call_id = 'call-1')`
	sqliteDelete := `INSERT INTO call_text (call_text, rowid, arguments, result) SELECT 'delete', c.k, q.arguments, coalesce(o.result, '')
		FROM call_index c JOIN records q ON q.seq = c.req_seq LEFT JOIN records o ON o.seq = c.out_seq WHERE c.call_id = 'call-1'`
	for _, tc := range []struct {
		name, sqlite, pg, want string
		hidden                 bool
	}{
		{"words removed", sqliteDelete,
			`DELETE FROM call_text WHERE k = ` + ofCall1, "call call-1: its words", true},
		{"words changed", sqliteDelete + `;
			INSERT INTO call_text (rowid, arguments, result) SELECT k, 'nothing to see', '' FROM call_index WHERE call_id = 'call-1'`,
			`UPDATE call_text SET words = to_tsvector('simple', 'nothing to see') WHERE k = ` + ofCall1, "call call-1: its words", true},
		{"words of no call", `INSERT INTO call_text (rowid, arguments, result) VALUES (7, 'word1 alpha', '')`,
			`INSERT INTO call_text (k, words) VALUES (7, to_tsvector('simple', 'word1 alpha'))`, "it holds words under key 7, which is no call's", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := wordsLog(t, 5)
			db.ing.caughtUp(ctx)
			q := tc.sqlite
			if db.pg {
				q = tc.pg
			}
			if _, err := db.w.ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
			if tc.hidden {
				if got := callIDs(t, db, Filter{Text: "word1"}); len(got) != 0 {
					t.Fatalf("the change left the call found by its words: %v", got)
				}
			}
			if err := db.ckpt.writeCheckpoint(); err != nil {
				t.Fatal(err)
			}
			rep, err := db.Verifier().Verify(ctx)
			if err != nil || rep.OK || !strings.Contains(rep.Problem, "the text index does not match the records: "+tc.want) {
				t.Fatalf("verify: %+v %v", rep, err)
			}
		})
	}
}
