package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
)

// sampleCall is one call of queryLog, with what the query should show.
type sampleCall struct {
	id                                 string
	at                                 time.Time
	server, tool, client, session      string
	decision, decidedBy, outcome, appr string
	args, result                       string
}

// queryLog appends n calls to db, each its request and outcome (some in
// one append, some in two, some without an outcome), with times that go
// back and forth and several calls in one millisecond, and returns them.
func queryLog(t *testing.T, db *DB, n int) []sampleCall {
	t.Helper()
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	words := []string{"alpha", "bravo", "charlie", "delta", "echo"}
	var calls []sampleCall
	for i := range n {
		c := sampleCall{
			id:        fmt.Sprintf("call-%03d", i),
			at:        base.Add(time.Duration(i/3*7%50) * time.Millisecond), // three calls a millisecond, out of order
			server:    []string{"files", "db", "web"}[i%3],
			tool:      []string{"read_file", "write_file", "query", "fetch"}[i%4],
			client:    []string{"claude/1.0", "cursor/2"}[i%2],
			session:   fmt.Sprintf("s%d", i%5),
			decision:  guard.DecisionAllowed,
			decidedBy: "default",
			outcome:   guard.OutcomeOK,
			args:      fmt.Sprintf(`{"path":"/srv/%s/report-%d.txt"}`, words[i%5], i),
			result:    fmt.Sprintf(`{"text":"%s done"}`, words[(i+2)%5]),
		}
		switch i % 7 {
		case 3:
			c.decision, c.decidedBy, c.outcome, c.result = guard.DecisionDenied, "no-shell", guard.OutcomeDenied, ""
		case 5:
			c.decision, c.decidedBy, c.appr = guard.DecisionHeld, "prod-writes", fmt.Sprintf("appr-%d", i)
		}
		req := &guard.Record{CallID: c.id, Kind: guard.KindRequest, Time: c.at, Server: c.server, Tool: c.tool,
			Method: "tools/call", Client: c.client, Session: c.session, Decision: c.decision, DecidedBy: c.decidedBy,
			Arguments: c.args, Approval: c.appr}
		out := &guard.Record{CallID: c.id, Kind: guard.KindOutcome, Time: c.at.Add(time.Second), Server: c.server,
			Tool: c.tool, Method: "tools/call", Client: c.client, Session: c.session, Decision: c.decision,
			DecidedBy: c.decidedBy, Outcome: c.outcome, Result: c.result}
		var err error
		switch {
		case i%11 == 10: // still under way: no outcome
			c.outcome, c.result = "", ""
			err = db.Append(req)
		case i%2 == 0:
			err = db.Append(req, out)
		default:
			if err = db.Append(req); err == nil {
				err = db.Append(out)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, c)
	}
	return calls
}

// newestFirst orders sample calls as Query does: by time, then arrival.
func newestFirst(calls []sampleCall) []string {
	idx := make([]int, len(calls))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		if c := calls[b].at.Compare(calls[a].at); c != 0 {
			return c
		}
		return b - a
	})
	ids := make([]string, len(idx))
	for i, j := range idx {
		ids[i] = calls[j].id
	}
	return ids
}

func queryIDs(t *testing.T, db *DB, f Filter) []string {
	t.Helper()
	var ids []string
	if err := db.Reader().Query(context.Background(), f, func(c *Call) error { ids = append(ids, c.ID); return nil }); err != nil {
		t.Fatalf("%+v: %v", f, err)
	}
	return ids
}

// Every filter, alone and with others, returns exactly the calls that
// match, newest first.
// More ids than one statement takes are refused, saying how many it
// takes, rather than failing in the database.
func TestQueryRefusesTooManyIDs(t *testing.T) {
	db := openDB(t, testPath(t))
	defer db.Close()
	ids := make([]string, maxIDs+1)
	for i := range ids {
		ids[i] = fmt.Sprintf("call-%d", i)
	}
	err := db.Reader().Query(context.Background(), Filter{IDs: ids}, func(*Call) error { return nil })
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("at most %d at once", maxIDs)) {
		t.Fatalf("a query of %d ids: %v", len(ids), err)
	}
	if err := db.Reader().Query(context.Background(), Filter{IDs: ids[:maxIDs]}, func(*Call) error { return nil }); err != nil {
		t.Fatalf("a query of %d ids: %v", maxIDs, err)
	}
	err = db.Reader().Query(context.Background(), Filter{Approvals: ids}, func(*Call) error { return nil })
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("at most %d at once", maxIDs)) {
		t.Fatalf("a query of %d approvals: %v", len(ids), err)
	}
	if _, err := db.Holds().ApprovalsByID(context.Background(), ids); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("at most %d at once", maxIDs)) {
		t.Fatalf("%d approvals by id: %v", len(ids), err)
	}
}

func TestQueryFiltersSelectExactlyTheirCalls(t *testing.T) {
	db := openDB(t, testPath(t))
	defer db.Close()
	calls := queryLog(t, db, 120)
	ordered := newestFirst(calls)
	byID := map[string]sampleCall{}
	for _, c := range calls {
		byID[c.id] = c
	}
	want := func(keep func(c sampleCall) bool) []string {
		var ids []string
		for _, id := range ordered {
			if keep(byID[id]) {
				ids = append(ids, id)
			}
		}
		return ids
	}
	base := calls[0].at
	for _, tc := range []struct {
		name string
		f    Filter
		keep func(c sampleCall) bool
	}{
		{"all", Filter{}, func(sampleCall) bool { return true }},
		{"server", Filter{Server: "db"}, func(c sampleCall) bool { return c.server == "db" }},
		{"tool", Filter{Tool: "fetch"}, func(c sampleCall) bool { return c.tool == "fetch" }},
		{"client", Filter{Client: "cursor/2"}, func(c sampleCall) bool { return c.client == "cursor/2" }},
		{"session", Filter{Session: "s3"}, func(c sampleCall) bool { return c.session == "s3" }},
		{"decision", Filter{Decision: guard.DecisionDenied}, func(c sampleCall) bool { return c.decision == guard.DecisionDenied }},
		{"decided by", Filter{DecidedBy: "prod-writes"}, func(c sampleCall) bool { return c.decidedBy == "prod-writes" }},
		{"outcome", Filter{Outcome: guard.OutcomeDenied}, func(c sampleCall) bool { return c.outcome == guard.OutcomeDenied }},
		{"approval", Filter{Approval: "appr-12"}, func(c sampleCall) bool { return c.appr == "appr-12" }},
		{"no such approval", Filter{Approval: "appr-13"}, func(sampleCall) bool { return false }},
		{"approvals", Filter{Approvals: []string{"appr-5", "appr-19", "appr-13"}}, func(c sampleCall) bool {
			return c.appr == "appr-5" || c.appr == "appr-19"
		}},
		{"approval and approvals", Filter{Approval: "appr-12", Approvals: []string{"appr-26"}}, func(c sampleCall) bool {
			return c.appr == "appr-12" || c.appr == "appr-26"
		}},
		{"id", Filter{ID: "call-007"}, func(c sampleCall) bool { return c.id == "call-007" }},
		{"ids", Filter{IDs: []string{"call-003", "call-007", "no-such-call"}}, func(c sampleCall) bool {
			return c.id == "call-003" || c.id == "call-007"
		}},
		{"since", Filter{Since: base.Add(20 * time.Millisecond)}, func(c sampleCall) bool { return !c.at.Before(base.Add(20 * time.Millisecond)) }},
		{"until", Filter{Until: base.Add(20 * time.Millisecond)}, func(c sampleCall) bool { return !c.at.After(base.Add(20 * time.Millisecond)) }},
		{"a word of the arguments", Filter{Text: "charlie"}, func(c sampleCall) bool {
			return strings.Contains(c.args, "charlie") || strings.Contains(c.result, "charlie")
		}},
		{"words of arguments and result", Filter{Text: "alpha DONE charlie"}, func(c sampleCall) bool {
			return strings.Contains(c.args, "alpha") && strings.Contains(c.result, "charlie")
		}},
		{"a path", Filter{Text: "/srv/bravo/"}, func(c sampleCall) bool { return strings.Contains(c.args, "/srv/bravo/") }},
		{"a phrase in quotes", Filter{Text: `"report 7 txt"`}, func(c sampleCall) bool { return strings.Contains(c.args, "report-7.txt") }},
		{"a prefix", Filter{Text: "report-1*"}, func(c sampleCall) bool { return strings.Contains(c.args, "report-1") }},
		{"FTS syntax is words", Filter{Text: `alpha OR NOT bravo NEAR( arguments: ^x "`}, func(sampleCall) bool { return false }},
		{"text and server", Filter{Text: "delta", Server: "web"}, func(c sampleCall) bool {
			return c.server == "web" && (strings.Contains(c.args, "delta") || strings.Contains(c.result, "delta"))
		}},
		{"text and since", Filter{Text: "echo", Since: base.Add(30 * time.Millisecond)}, func(c sampleCall) bool {
			return !c.at.Before(base.Add(30*time.Millisecond)) && (strings.Contains(c.args, "echo") || strings.Contains(c.result, "echo"))
		}},
		{"approval and text", Filter{Approval: "appr-5", Text: "alpha"}, func(c sampleCall) bool { return c.appr == "appr-5" }},
		{"server and decision", Filter{Server: "files", Decision: guard.DecisionHeld}, func(c sampleCall) bool {
			return c.server == "files" && c.decision == guard.DecisionHeld
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, w := queryIDs(t, db, tc.f), want(tc.keep)
			if !slices.Equal(got, w) {
				t.Errorf("calls %v,\nwant %v", got, w)
			}
			tc.f.Limit = 3
			if got := queryIDs(t, db, tc.f); !slices.Equal(got, w[:min(3, len(w))]) {
				t.Errorf("limit 3: calls %v, want %v", got, w[:min(3, len(w))])
			}
		})
	}
	if err := db.Reader().Query(context.Background(), Filter{Text: `" - * "`}, func(*Call) error { return nil }); !errors.Is(err, ErrNoWords) {
		t.Errorf("text without words: %v, want ErrNoWords", err)
	}
}

// Paging with the keys of the last and first calls shown walks every
// call once, older and newer, with none left out or repeated, while
// calls arrive.
func TestPagesHaveNoGapsOrRepeats(t *testing.T) {
	db := openDB(t, testPath(t))
	defer db.Close()
	calls := queryLog(t, db, 100)
	all := newestFirst(calls)
	for _, f := range []Filter{{}, {Server: "files"}, {Text: "alpha"}} {
		want := queryIDs(t, db, f)
		var pages [][]*Call
		f.Limit = 7
		for {
			var page []*Call
			if err := db.Reader().Query(context.Background(), f, func(c *Call) error { page = append(page, c); return nil }); err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			pages = append(pages, page)
			f.Before = page[len(page)-1].Key
		}
		var got []string
		for _, p := range pages {
			for _, c := range p {
				got = append(got, c.ID)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%+v: older pages gave %v,\nwant %v", f, got, want)
		}
		// Back again, newer, from the oldest page.
		f.Before = 0
		for i := len(pages) - 1; i > 0; i-- {
			f.After = pages[i][0].Key
			var page []string
			if err := db.Reader().Query(context.Background(), f, func(c *Call) error { page = append(page, c.ID); return nil }); err != nil {
				t.Fatal(err)
			}
			var w []string
			for _, c := range pages[i-1] {
				w = append(w, c.ID)
			}
			if !slices.Equal(page, w) {
				t.Fatalf("%+v: newer page %v, want %v", f, page, w)
			}
		}
	}
	if got := queryIDs(t, db, Filter{}); !slices.Equal(got, all) {
		t.Fatalf("all: %v\nwant %v", got, all)
	}
	// A call that arrives while one pages is on the first page, not in
	// the middle.
	first := queryIDs(t, db, Filter{Limit: 5})
	if err := db.Append(&guard.Record{CallID: "late", Kind: guard.KindRequest, Time: calls[0].at.Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if got := queryIDs(t, db, Filter{Limit: 5}); !slices.Equal(got, first) {
		t.Fatalf("an older call moved the first page: %v, want %v", got, first)
	}
}

// A decision record given later changes what the call shows: who
// decided, the decision, the reason and the approval, and so which
// filters select it.
func TestADecisionRecordChangesTheCall(t *testing.T) {
	db := openDB(t, testPath(t))
	defer db.Close()
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	held := func(kind string) *guard.Record {
		return &guard.Record{CallID: "held-1", Kind: kind, Time: at, Server: "db", Tool: "drop_table", Method: "tools/call",
			Decision: guard.DecisionHeld, DecidedBy: "prod-writes", Reason: "a destructive tool", Approval: "appr-1"}
	}
	req, out := held(guard.KindRequest), held(guard.KindOutcome)
	out.Approval, out.Outcome = "", guard.OutcomeAwaitingApproval
	if err := db.Append(req, out); err != nil {
		t.Fatal(err)
	}
	show := func() Call {
		t.Helper()
		var got []Call
		if err := db.Reader().Query(context.Background(), Filter{}, func(c *Call) error { got = append(got, *c); return nil }); err != nil || len(got) != 1 {
			t.Fatalf("query: %v %+v", err, got)
		}
		return got[0]
	}
	if c := show(); c.Decision != guard.DecisionHeld || c.DecidedBy != "prod-writes" || c.Reason != "a destructive tool" ||
		c.Approval != "appr-1" || c.Outcome != guard.OutcomeAwaitingApproval {
		t.Fatalf("before the decision: %+v", c)
	}
	dec := &guard.Record{CallID: "held-1", Kind: guard.KindDecision, Time: at.Add(time.Minute), Server: "db", Tool: "drop_table",
		Decision: guard.DecisionDenied, DecidedBy: "alice@example.com", Reason: "not on a Friday", Approval: "appr-1"}
	if err := db.Append(dec); err != nil {
		t.Fatal(err)
	}
	if c := show(); c.Decision != guard.DecisionDenied || c.DecidedBy != "alice@example.com" || c.Reason != "not on a Friday" ||
		c.Approval != "appr-1" || c.Outcome != guard.OutcomeAwaitingApproval || c.Time != fmtTime(at) {
		t.Fatalf("after the decision: %+v", c)
	}
	// The calls view says the same, for those who read it with SQL.
	var v [5]string
	if err := db.r.QueryRow(`SELECT decision, decided_by, reason, approval, outcome FROM calls WHERE id = 'held-1'`).Scan(
		&v[0], &v[1], &v[2], &v[3], &v[4]); err != nil || v != [5]string{guard.DecisionDenied, "alice@example.com", "not on a Friday",
		"appr-1", guard.OutcomeAwaitingApproval} {
		t.Fatalf("calls view: %v %v", v, err)
	}
	for _, tc := range []struct {
		f    Filter
		want int
	}{
		{Filter{DecidedBy: "alice@example.com"}, 1}, {Filter{DecidedBy: "prod-writes"}, 0},
		{Filter{Decision: guard.DecisionDenied}, 1}, {Filter{Decision: guard.DecisionHeld}, 0},
		{Filter{Approval: "appr-1"}, 1},
	} {
		if got := queryIDs(t, db, tc.f); len(got) != tc.want {
			t.Errorf("%+v: %v, want %d calls", tc.f, got, tc.want)
		}
	}
	// A decision record without a decision (an approval noted) keeps the
	// decision; one for a call never requested changes nothing.
	if err := db.Append(&guard.Record{CallID: "held-1", Kind: guard.KindDecision, Approval: "appr-2"},
		&guard.Record{CallID: "nobody", Kind: guard.KindDecision, Decision: guard.DecisionAllowed}); err != nil {
		t.Fatal(err)
	}
	if c := show(); c.Decision != guard.DecisionDenied || c.Approval != "appr-2" {
		t.Fatalf("after an approval noted: %+v", c)
	}
	if got := queryIDs(t, db, Filter{Approval: "appr-1"}); len(got) != 1 {
		t.Errorf("the call's earlier approval no longer selects it: %v", got)
	}
}

// The index the ingester kept is the one RebuildCallIndex makes from the
// records, and a database of an earlier version gets it when opened.
func TestTheCallIndexIsMadeAgainFromTheRecords(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "g.db")
	db := openDB(t, path)
	queryLog(t, db, 90)
	if err := db.Append(&guard.Record{CallID: "queryLog-0", Kind: guard.KindDecision}, &guard.Record{CallID: "call-005",
		Kind: guard.KindDecision, Decision: guard.DecisionAllowed, DecidedBy: "bob", Approval: "appr-5"},
		&guard.Record{CallID: "call-006", Kind: guard.KindOutcome, Outcome: guard.OutcomeToolError, Result: "second round"}); err != nil {
		t.Fatal(err)
	}
	snapshot := func(db *DB) (rows []string, texts map[string][]string) {
		t.Helper()
		db.ing.caughtUp(ctx)
		r, err := db.r.QueryContext(ctx, `SELECT k, call_id, req_seq, out_seq, dec_seq, server, tool, client, session,
			decision, decided_by, outcome, approval FROM call_index ORDER BY k`)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		for r.Next() {
			var v [13]any
			p := make([]any, len(v))
			for i := range v {
				p[i] = &v[i]
			}
			if err := r.Scan(p...); err != nil {
				t.Fatal(err)
			}
			rows = append(rows, fmt.Sprint(v))
		}
		texts = map[string][]string{}
		for _, w := range []string{"alpha", "charlie done", "second round", "report*", "txt"} {
			texts[w] = queryIDs(t, db, Filter{Text: w})
		}
		return rows, texts
	}
	rows, texts := snapshot(db)
	if len(rows) != 90 {
		t.Fatalf("%d calls indexed, want 90", len(rows))
	}
	if err := db.CallIndex().RebuildCallIndex(ctx); err != nil {
		t.Fatal(err)
	}
	rebuilt, rtexts := snapshot(db)
	if !slices.Equal(rows, rebuilt) {
		t.Fatalf("rebuilt index differs:\n%v\nwant\n%v", rebuilt, rows)
	}
	for w, ids := range texts {
		if !slices.Equal(ids, rtexts[w]) {
			t.Errorf("text %q: rebuilt finds %v, want %v", w, rtexts[w], ids)
		}
	}
	db.Close()
	// As an earlier version left it: no index; opening makes it.
	raw := rawDB(t, path)
	if _, err := raw.Exec(`DELETE FROM call_index; INSERT INTO call_text (call_text) VALUES ('delete-all')`); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	db = openDB(t, path)
	defer db.Close()
	if again, atexts := snapshot(db); !slices.Equal(rows, again) || fmt.Sprint(atexts) != fmt.Sprint(texts) {
		t.Fatalf("opened index differs:\n%v\nwant\n%v", again, rows)
	}
}

func TestMatchExpr(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"alpha", `"alpha"`},
		{"  alpha   bravo ", `"alpha" "bravo"`},
		{`say "hello world" now`, `"say" "hello world" "now"`},
		{`open "quote runs on`, `"open" "quote runs on"`},
		{`repo* *`, `"repo"* `},
		{`a"b`, `"a""b"`},
		{`OR NOT AND NEAR(x) col:val ^y`, `"OR" "NOT" "AND" "NEAR(x)" "col:val" "^y"`},
		{`- ( ) **`, ""},
	} {
		got, err := MatchExpr(tc.in)
		if tc.want == "" {
			if !errors.Is(err, ErrNoWords) {
				t.Errorf("%q: %q %v, want ErrNoWords", tc.in, got, err)
			}
			continue
		}
		if got != strings.TrimSpace(tc.want) || err != nil {
			t.Errorf("%q: %q %v, want %q", tc.in, got, err, tc.want)
		}
	}
}

// QueryRecords lists the records of a kind that is not a call's, newest
// first, with the filters that apply to them.
func TestQueryRecordsOfAKind(t *testing.T) {
	db := openDB(t, testPath(t))
	defer db.Close()
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	queryLog(t, db, 10)
	for i, r := range []*guard.Record{
		{CallID: "call-005", Kind: guard.KindDecision, Decision: guard.DecisionAllowed, DecidedBy: "alice", Approval: "appr-5"},
		{Kind: guard.KindLifecycle, Method: "start"},
		{CallID: "call-001", Kind: guard.KindDecision, Decision: guard.DecisionDenied, DecidedBy: "bob", Server: "db"},
		{Kind: guard.KindConfig, Detail: `{"digest":"sha256:ab"}`},
		{CallID: "call-002", Kind: guard.KindDecision, Decision: guard.DecisionDenied, DecidedBy: "expiry"},
	} {
		r.ID, r.Time = fmt.Sprintf("rec-%d", i), at.Add(time.Duration(i)*time.Minute)
		if err := db.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(kind string, f Filter) []string {
		t.Helper()
		var got []string
		if err := db.Reader().QueryRecords(context.Background(), kind, f, func(r *guard.Record) error { got = append(got, r.ID); return nil }); err != nil {
			t.Fatal(err)
		}
		return got
	}
	for _, tc := range []struct {
		kind string
		f    Filter
		want []string
	}{
		{guard.KindDecision, Filter{}, []string{"rec-4", "rec-2", "rec-0"}},
		{guard.KindDecision, Filter{Decision: guard.DecisionDenied, Limit: 1}, []string{"rec-4"}},
		{guard.KindDecision, Filter{DecidedBy: "alice"}, []string{"rec-0"}},
		{guard.KindDecision, Filter{Approval: "appr-5"}, []string{"rec-0"}},
		{guard.KindDecision, Filter{Server: "db"}, []string{"rec-2"}},
		{guard.KindDecision, Filter{Since: at.Add(time.Minute), Until: at.Add(3 * time.Minute)}, []string{"rec-2"}},
		{guard.KindLifecycle, Filter{}, []string{"rec-1"}},
		{guard.KindConfig, Filter{}, []string{"rec-3"}},
		{guard.KindToolReview, Filter{}, nil},
	} {
		if got := ids(tc.kind, tc.f); !slices.Equal(got, tc.want) {
			t.Errorf("%s %+v: %v, want %v", tc.kind, tc.f, got, tc.want)
		}
	}
	ctx := context.Background()
	if err := db.Reader().QueryRecords(ctx, guard.KindRequest, Filter{}, func(*guard.Record) error { return nil }); err == nil {
		t.Error("request records listed as records of a kind")
	}
	if err := db.Reader().QueryRecords(ctx, guard.KindDecision, Filter{Text: "x"}, func(*guard.Record) error { return nil }); !errors.Is(err, ErrCallsOnly) {
		t.Errorf("text on decisions: %v", err)
	}
}

// A millisecond whose keys are all taken (a clock that stood still for a
// million calls) does not stop the ingester: the next call of that
// millisecond goes after every other.
func TestAFullMillisecondDoesNotStopTheIngester(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.db")
	db := openDB(t, path)
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	later := &guard.Record{CallID: "later", Kind: guard.KindRequest, Time: at.Add(time.Second)}
	if err := db.Append(later); err != nil {
		t.Fatal(err)
	}
	db.Close()
	raw := rawDB(t, path)
	full := audit.KeyMillis(at) + 1<<audit.KeyRankBits - 1
	if _, err := raw.Exec(`INSERT INTO call_index (k, call_id, req_seq, dec_seq) VALUES (?, 'filler', 1, 1)`, full); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	db = openDB(t, path)
	defer db.Close()
	if err := db.Append(&guard.Record{CallID: "stuck", Kind: guard.KindRequest, Time: at}); err != nil {
		t.Fatal(err)
	}
	if got := queryIDs(t, db, Filter{Limit: 2}); !slices.Equal(got, []string{"stuck", "later"}) {
		t.Fatalf("newest calls %v", got)
	}
}

// A database opened read-only (guard audit query) answers from the call
// index on either engine: PostgreSQL's schema, which starts after the
// migration that added the index, has it.
func TestAReadOnlyOpenQueriesTheCalls(t *testing.T) {
	ctx := context.Background()
	p := testPath(t)
	db, err := testOpen(ctx, Options{Path: p})
	if err != nil {
		t.Fatal(err)
	}
	queryLog(t, db, 12)
	want := queryIDs(t, db, Filter{})
	key := db.opts.KeyPath
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := OpenReadOnly(ctx, Options{Path: p, KeyPath: key})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if got := queryIDs(t, ro, Filter{}); len(want) != 12 || !slices.Equal(got, want) {
		t.Fatalf("read-only query: %v, want %v", got, want)
	}
}

// Calls an earlier version recorded after the index was made (its
// journals moved in, another process of that version) are indexed when a
// writable guard next opens the database.
func TestCallsRecordedWithoutTheIndexAreIndexedAtOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.db")
	db := openDB(t, path)
	queryLog(t, db, 12)
	want := queryIDs(t, db, Filter{})
	db.Close()
	raw := rawDB(t, path)
	// As an earlier version leaves it: the newest calls' records without
	// their rows.
	if _, err := raw.Exec(`DELETE FROM call_index WHERE k IN (SELECT k FROM call_index ORDER BY req_seq DESC LIMIT 3)`); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	ro, err := OpenReadOnly(context.Background(), Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if got := queryIDs(t, ro, Filter{}); len(got) != len(want)-3 {
		t.Fatalf("the rows were not removed: %v", got)
	}
	ro.Close()
	db = openDB(t, path)
	defer db.Close()
	if got := queryIDs(t, db, Filter{}); !slices.Equal(got, want) {
		t.Fatalf("after open: %v, want %v", got, want)
	}
	if got := queryIDs(t, db, Filter{Text: "alpha"}); len(got) == 0 {
		t.Fatal("the words were not indexed again")
	}
}

// No query walks the whole log: each reads the call index (or the text
// index, or the approval's records) from one end and looks records up by
// seq, whatever the filter. SQLite's planner chooses; this holds it to it.
func TestNoQueryScansTheRecords(t *testing.T) {
	sqliteOnly(t) // SQLite's query plans
	db := openDB(t, testPath(t))
	defer db.Close()
	for _, f := range []Filter{{}, {IDs: []string{"a", "b"}}, {Server: "db"}, {Tool: "t"}, {Client: "c"}, {Session: "s"}, {Decision: "denied"},
		{DecidedBy: "alice"}, {Outcome: "ok"}, {Approval: "a"}, {Text: "word"}, {Since: time.Now().Add(-time.Hour)},
		{Until: time.Now()}, {Server: "db", Decision: "denied"}, {User: "alice@example.com"}, {User: "u", Server: "db"}} {
		f.Limit = 100
		q, args, err := queryText(f, false)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := db.r.Query("EXPLAIN QUERY PLAN "+q, args...)
		if err != nil {
			t.Fatalf("%+v: %v", f, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		for _, step := range plan {
			if strings.HasPrefix(step, "SCAN q") || strings.HasPrefix(step, "SCAN d") || strings.HasPrefix(step, "SCAN o") ||
				strings.HasPrefix(step, "SCAN records") {
				t.Errorf("%+v walks the records: %q", f, plan)
			}
		}
	}
}

// Verify checks the call index against the records: a row falsified, a
// row taken out (a call hidden from queries), or one pointed at another
// call's record, as whoever has the file could, is caught.
func TestVerifyCatchesAFalsifiedCallIndex(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ name, sql, want string }{
		{"decision changed", `UPDATE call_index SET decision = 'held' WHERE call_id = 'call-1'`, "call call-1: its decision"},
		{"row removed", `DELETE FROM call_index WHERE call_id = 'call-0'`, "3 calls in the records, 2 in the index"},
		{"outcome pointed elsewhere", `UPDATE call_index SET out_seq = (SELECT seq FROM records WHERE call_id = 'call-0' AND kind = 'outcome') WHERE call_id = 'call-1'`, "call call-1: its outcome"},
		{"request pointed elsewhere", `UPDATE call_index SET req_seq = 1 WHERE call_id = 'call-2'`, "call call-2: its request record"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "g.db")
			db := openDB(t, path)
			for i := range 3 {
				req, out := rec(i, guard.KindRequest), rec(i, guard.KindOutcome)
				if i == 1 {
					req.Decision, req.DecidedBy = guard.DecisionDenied, "no-writes"
				}
				out.Outcome = guard.OutcomeOK
				if err := db.Append(req, out); err != nil {
					t.Fatal(err)
				}
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			raw := rawDB(t, path)
			if _, err := raw.Exec(tc.sql); err != nil {
				t.Fatal(err)
			}
			raw.Close()
			db = openDB(t, path)
			defer db.Close()
			rep, err := db.Verifier().Verify(ctx)
			if err != nil || rep.OK || !strings.Contains(rep.Problem, "the call index does not match the records: "+tc.want) {
				t.Fatalf("verify: %+v %v", rep, err)
			}
		})
	}
}
