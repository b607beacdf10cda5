package store

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
)

// callIndexRows reads the call index and its words' presence, row by row.
func callIndexRows(t *testing.T, db *DB) []string {
	t.Helper()
	rows, err := db.r.QueryContext(context.Background(), `SELECT k, call_id, req_seq, out_seq, dec_seq, server, tool, client, session,
		decision, decided_by, outcome, approval FROM call_index ORDER BY k`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k, req, o, d int64
		var id, server, tool, client, session, dec, by, outcome, ap string
		if err := rows.Scan(&k, &id, &req, &o, &d, &server, &tool, &client, &session, &dec, &by, &outcome, &ap); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprint(k, id, req, o, d, server, tool, client, session, dec, by, outcome, ap))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// The ingester keeps the call index as it appends (on PostgreSQL all of
// a batch's rows at once, worked out from what the batch read); making
// it again from the records, one record at a time, gives the same rows.
// The calls here have later rounds, held calls decided after their
// outcome, approvals named only by a decision, outcomes and decisions
// of calls that have no request, and many calls in one millisecond.
func TestCallIndexAsAppendedIsAsRebuilt(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, testPath(t))
	defer db.Close()
	at := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	var batches [][]*guard.Record
	for i := range 40 {
		id := fmt.Sprintf("call-%d", i)
		r := func(kind string, f func(*guard.Record)) *guard.Record {
			rec := &guard.Record{CallID: id, Kind: kind, Server: "files", Tool: "write", Client: "c", Session: fmt.Sprint(i % 3),
				Arguments: fmt.Sprintf(`{"n":%d}`, i), Time: at.Add(time.Duration(i/10) * time.Millisecond)}
			if f != nil {
				f(rec)
			}
			return rec
		}
		switch i % 5 {
		case 0: // allowed, answered
			batches = append(batches, []*guard.Record{r(guard.KindRequest, func(x *guard.Record) { x.Decision = guard.DecisionAllowed })},
				[]*guard.Record{r(guard.KindOutcome, func(x *guard.Record) { x.Outcome = "ok"; x.Result = "fine words" })})
		case 1: // held, then approved by a decision, then answered
			batches = append(batches, []*guard.Record{
				r(guard.KindRequest, func(x *guard.Record) { x.Decision = guard.DecisionHeld; x.Approval = "ap-" + id }),
				r(guard.KindDecision, func(x *guard.Record) { x.Decision = guard.DecisionAllowed; x.DecidedBy = "alice" }),
				r(guard.KindOutcome, func(x *guard.Record) { x.Outcome = "ok"; x.Result = "done" })})
		case 2: // two rounds: a second request, then a denial in the outcome
			batches = append(batches, []*guard.Record{r(guard.KindRequest, func(x *guard.Record) { x.Decision = guard.DecisionAllowed })},
				[]*guard.Record{r(guard.KindRequest, nil), r(guard.KindOutcome, func(x *guard.Record) {
					x.Outcome = "denied"
					x.Decision = guard.DecisionDenied
					x.DecidedBy = "rule:x"
				})})
		case 3: // a decision naming only an approval, then an outcome
			batches = append(batches, []*guard.Record{r(guard.KindRequest, func(x *guard.Record) { x.Decision = guard.DecisionHeld })},
				[]*guard.Record{r(guard.KindDecision, func(x *guard.Record) { x.Approval = "ap2-" + id })},
				[]*guard.Record{r(guard.KindOutcome, func(x *guard.Record) { x.Outcome = "error"; x.Result = "boom" })})
		case 4: // no request at all
			batches = append(batches, []*guard.Record{r(guard.KindOutcome, func(x *guard.Record) { x.Outcome = "ok" }),
				r(guard.KindDecision, func(x *guard.Record) { x.Decision = guard.DecisionDenied })})
		}
	}
	// Several appends in flight at once share transactions.
	var pending []<-chan error
	for _, b := range batches {
		pending = append(pending, db.AppendAsync(b...))
	}
	for _, p := range pending {
		if err := <-p; err != nil {
			t.Fatal(err)
		}
	}
	db.caughtUp(ctx)
	appended := callIndexRows(t, db)
	if len(appended) != 32 { // every call but the 8 with no request
		t.Fatalf("%d rows in the call index, want 32:\n%v", len(appended), appended)
	}
	if err := db.RebuildCallIndex(ctx); err != nil {
		t.Fatal(err)
	}
	if rebuilt := callIndexRows(t, db); !slices.Equal(appended, rebuilt) {
		t.Fatalf("the call index as appended:\n%v\nas rebuilt from the records:\n%v", appended, rebuilt)
	}
}
