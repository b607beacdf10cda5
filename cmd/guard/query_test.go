package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
)

// guard audit query's --approval and --text select the calls of a real
// log, and text that FTS5 would read as syntax is searched as words.
func TestAuditQueryByApprovalAndText(t *testing.T) {
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "data", "guard", "guard.db")
	db, err := store.Open(context.Background(), store.Options{Path: dbPath, Durability: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for i, c := range []struct{ id, args, result, approval string }{
		{"c1", `{"sql":"DROP TABLE users"}`, `{"text":"dropped"}`, "appr-1"},
		{"c2", `{"path":"/etc/passwd"}`, `{"text":"root:x:0:0"}`, ""},
		{"c3", `{"q":"users OR admins"}`, `{"text":"3 rows"}`, ""},
	} {
		req := &guard.Record{CallID: c.id, Kind: guard.KindRequest, Time: at.Add(time.Duration(i) * time.Second), Server: "db",
			Method: "tools/call", Tool: "query", Arguments: c.args, Decision: guard.DecisionAllowed, DecidedBy: "default", Approval: c.approval}
		out := &guard.Record{CallID: c.id, Kind: guard.KindOutcome, Time: req.Time, Server: "db", Method: "tools/call", Tool: "query",
			Decision: guard.DecisionAllowed, DecidedBy: "default", Outcome: guard.OutcomeOK, Result: c.result}
		if err := db.Append(req, out); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ids := func(args ...string) []string {
		t.Helper()
		stdout, stderr, code := run(t, dir, append([]string{"audit", "query", "--format", "jsonl"}, args...)...)
		if code != 0 {
			t.Fatalf("guard audit query %v: exit %d: %s", args, code, stderr)
		}
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
			if line == "" {
				continue
			}
			var c store.Call
			if err := json.Unmarshal([]byte(line), &c); err != nil {
				t.Fatal(err)
			}
			got = append(got, c.ID)
		}
		return got
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--approval", "appr-1"}, []string{"c1"}},
		{[]string{"--approval", "appr-9"}, nil},
		{[]string{"--text", "users"}, []string{"c3", "c1"}},
		{[]string{"--text", "/etc/passwd"}, []string{"c2"}},
		{[]string{"--text", "root:x"}, []string{"c2"}},
		{[]string{"--text", "users OR"}, []string{"c3"}},
		{[]string{"--text", `NEAR(users "`}, nil},
		{[]string{"--text", "DROP*", "--server", "db"}, []string{"c1"}},
		{[]string{"--text", "users", "--limit", "1"}, []string{"c3"}},
	} {
		if got := ids(tc.args...); !slices.Equal(got, tc.want) {
			t.Errorf("%v: calls %v, want %v", tc.args, got, tc.want)
		}
	}
	stdout, _, code := run(t, dir, "audit", "query", "--format", "csv", "--approval", "appr-1")
	rows, err := csv.NewReader(strings.NewReader(stdout)).ReadAll()
	if code != 0 || err != nil || len(rows) != 2 || !slices.Equal(rows[0], store.CallColumns) {
		t.Fatalf("csv: exit %d, %v: %q", code, err, stdout)
	}
	if i := slices.Index(rows[0], "approval"); rows[1][i] != "appr-1" {
		t.Errorf("csv approval column: %q", rows[1][i])
	}
	_, stderr, code := run(t, dir, "audit", "query", "--text", `" * - "`)
	if code != 2 || !strings.Contains(stderr, "no words to search for") {
		t.Errorf("--text without words: exit %d, %q", code, stderr)
	}
}

// guard audit query --kind lists records that are not calls; an unknown
// kind, or a calls-only filter with one, is bad usage.
func TestAuditQueryKind(t *testing.T) {
	dir := t.TempDir()
	db, err := store.Open(context.Background(), store.Options{Path: filepath.Join(dir, "data", "guard", "guard.db"), Durability: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Append(&guard.Record{CallID: "c1", Kind: guard.KindRequest, Server: "db", Tool: "drop_table", Decision: guard.DecisionHeld},
		&guard.Record{CallID: "c1", Kind: guard.KindDecision, Server: "db", Tool: "drop_table", Decision: guard.DecisionDenied,
			DecidedBy: "alice", Reason: "not today", Approval: "appr-1"},
		&guard.Record{Kind: guard.KindLifecycle, Method: "start"}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	stdout, stderr, code := run(t, dir, "audit", "query", "--kind", "decision", "--format", "jsonl")
	var r guard.Record
	if code != 0 || json.Unmarshal([]byte(stdout), &r) != nil || r.DecidedBy != "alice" || r.Approval != "appr-1" || r.Kind != guard.KindDecision {
		t.Fatalf("--kind decision: exit %d %q %q", code, stdout, stderr)
	}
	if stdout, _, code := run(t, dir, "audit", "query", "--kind", "lifecycle"); code != 0 || !strings.Contains(stdout, "lifecycle") || strings.Contains(stdout, "drop_table") {
		t.Errorf("--kind lifecycle: exit %d %q", code, stdout)
	}
	if stdout, _, code := run(t, dir, "audit", "query", "--kind", "decision", "--format", "csv", "--decided-by", "bob"); code != 0 || strings.Count(stdout, "\n") != 1 {
		t.Errorf("--kind decision --decided-by bob: exit %d %q", code, stdout)
	}
	for _, args := range [][]string{{"--kind", "calls"}, {"--kind", "request"}, {"--kind", "decision", "--text", "x"}, {"--kind", "event", "--outcome", "ok"}} {
		_, stderr, code := run(t, dir, append([]string{"audit", "query"}, args...)...)
		if code != 2 || !strings.Contains(stderr, "--") {
			t.Errorf("%v: exit %d %q, want 2", args, code, stderr)
		}
	}
	if _, stderr, _ := run(t, dir, "audit", "query", "--kind", "calls"); !strings.Contains(stderr, "want one of call, decision, tool_review, rule_added, config, lifecycle, event") {
		t.Errorf("unknown kind: %q", stderr)
	}
}

// guard audit query --format csv writes the log's text so that a
// spreadsheet does not read it as a formula, for calls and for other
// records: a cell that starts with =, +, -, @, a tab or a carriage return
// is written after a "'"; the figures are written as they are.
func TestAuditQueryCSVInert(t *testing.T) {
	dir := t.TempDir()
	db, err := store.Open(context.Background(), store.Options{Path: filepath.Join(dir, "data", "guard", "guard.db"), Durability: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	req := &guard.Record{CallID: "c1", Kind: guard.KindRequest, Time: at, Server: "+db", Method: "tools/call",
		Tool: `=HYPERLINK("http://x","y")`, Arguments: `{"a":1}`, Decision: guard.DecisionHeld}
	dec := &guard.Record{CallID: "c1", Kind: guard.KindDecision, Time: at, Server: "+db", Tool: `=HYPERLINK("http://x","y")`,
		Decision: guard.DecisionDenied, DecidedBy: "@alice", Reason: "-2+3", Approval: "\tappr"}
	out := &guard.Record{CallID: "c1", Kind: guard.KindOutcome, Time: at, Server: "+db", Method: "tools/call",
		Tool: `=HYPERLINK("http://x","y")`, Decision: guard.DecisionDenied, DecidedBy: "@alice", Reason: "-2+3",
		Outcome: guard.OutcomeDenied, Result: "\r=1+1"}
	if err := db.Append(req, dec, out); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	read := func(args ...string) (cols, row []string) {
		t.Helper()
		stdout, stderr, code := run(t, dir, append([]string{"audit", "query", "--format", "csv"}, args...)...)
		rows, err := csv.NewReader(strings.NewReader(stdout)).ReadAll()
		if code != 0 || err != nil || len(rows) != 2 {
			t.Fatalf("%v: exit %d, %v: %q %s", args, code, err, stdout, stderr)
		}
		return rows[0], rows[1]
	}
	check := func(what string, cols, row []string, want map[string]string) {
		t.Helper()
		for col, v := range want {
			if i := slices.Index(cols, col); i < 0 || row[i] != v {
				t.Errorf("%s: column %s = %q, want %q", what, col, row[min(max(i, 0), len(row)-1)], v)
			}
		}
		for i, v := range row {
			if v != "" && strings.ContainsRune("=+@\t\r", rune(v[0])) {
				t.Errorf("%s: column %s = %q: a formula", what, cols[i], v)
			}
		}
	}
	cols, row := read()
	check("calls", cols, row, map[string]string{
		"server": "'+db", "tool": `'=HYPERLINK("http://x","y")`, "decided_by": "'@alice", "reason": "'-2+3",
		"result": "'\r=1+1", "arguments": `{"a":1}`, "duration_ms": "0",
	})
	cols, row = read("--kind", "decision")
	check("decisions", cols, row, map[string]string{
		"server": "'+db", "tool": `'=HYPERLINK("http://x","y")`, "decided_by": "'@alice", "reason": "'-2+3",
		"approval": "'\tappr", "seq": "2",
	})
}

// guard audit query --user selects the calls of the caller the front
// authenticated, by subject or by email, and every format shows the
// user: jsonl and csv as user, user_email and user_groups, the table by
// email; --kind takes the filter too.
func TestAuditQueryByUser(t *testing.T) {
	dir := t.TempDir()
	db, err := store.Open(context.Background(), store.Options{Path: filepath.Join(dir, "data", "guard", "guard.db"), Durability: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	alice := guard.Identity{Subject: "user-7f3a", Email: "alice@example.com", Groups: []string{"sre", "on-call"}}
	for i, who := range []guard.Identity{alice, {}, {Subject: "svc-ci"}, alice} {
		id := fmt.Sprintf("c%d", i)
		req := &guard.Record{CallID: id, Kind: guard.KindRequest, Time: at.Add(time.Duration(i) * time.Second), Server: "db",
			Method: "tools/call", Tool: "query", Decision: guard.DecisionAllowed, DecidedBy: "default",
			User: who.Subject, UserEmail: who.Email, UserGroups: who.Groups}
		out := *req
		out.Kind, out.Outcome = guard.KindOutcome, guard.OutcomeOK
		recs := []*guard.Record{req, &out}
		if i == 3 {
			req.Decision, req.Approval = guard.DecisionHeld, "appr-1"
			dec := *req
			dec.Kind, dec.Decision, dec.DecidedBy = guard.KindDecision, guard.ApprovalApproved, "bob"
			recs = append(recs, &dec)
		}
		if err := db.Append(recs...); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	query := func(args ...string) string {
		t.Helper()
		stdout, stderr, code := run(t, dir, append([]string{"audit", "query"}, args...)...)
		if code != 0 {
			t.Fatalf("guard audit query %v: exit %d: %s", args, code, stderr)
		}
		return stdout
	}
	for _, tc := range []struct {
		user string
		want []string
	}{{"alice@example.com", []string{"c3", "c0"}}, {"user-7f3a", []string{"c3", "c0"}}, {"svc-ci", []string{"c2"}}, {"bob", nil}} {
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(query("--user", tc.user, "--format", "jsonl")), "\n") {
			if line == "" {
				continue
			}
			var c map[string]any
			if err := json.Unmarshal([]byte(line), &c); err != nil {
				t.Fatal(err)
			}
			got = append(got, c["id"].(string))
			if tc.user == alice.Email && (c["user"] != alice.Subject || c["user_email"] != alice.Email ||
				fmt.Sprint(c["user_groups"]) != "[sre on-call]") {
				t.Errorf("jsonl: %s", line)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("--user %s: calls %v, want %v", tc.user, got, tc.want)
		}
	}
	rows, err := csv.NewReader(strings.NewReader(query("--format", "csv"))).ReadAll()
	if err != nil || len(rows) != 5 {
		t.Fatalf("csv: %v %q", err, rows)
	}
	col := func(name string) int { return slices.Index(rows[0], name) }
	for _, row := range rows[1:] {
		if len(row) != len(store.CallColumns) {
			t.Fatalf("a csv row of %d cells under %d columns", len(row), len(store.CallColumns))
		}
	}
	if r := rows[1]; r[col("id")] != "c3" || r[col("user")] != alice.Subject || r[col("user_email")] != alice.Email ||
		r[col("user_groups")] != `["sre","on-call"]` {
		t.Errorf("csv row of alice's call: %q", r)
	}
	if r := rows[3]; r[col("id")] != "c1" || r[col("user")] != "" || r[col("user_email")] != "" || r[col("user_groups")] != "" {
		t.Errorf("csv row of a call no one authenticated: %q", r)
	}
	lines := strings.Split(strings.TrimSpace(query()), "\n")
	if len(lines) != 5 || !strings.HasPrefix(strings.Join(strings.Fields(lines[0]), " "), "TIME USER SERVER") ||
		strings.Fields(lines[1])[1] != alice.Email || strings.Fields(lines[2])[1] != "svc-ci" || strings.Fields(lines[3])[1] != "-" {
		t.Errorf("table:\n%s", strings.Join(lines, "\n"))
	}
	decisions := query("--kind", "decision", "--user", alice.Email, "--format", "csv")
	if rows, err := csv.NewReader(strings.NewReader(decisions)).ReadAll(); err != nil || len(rows) != 2 ||
		rows[1][slices.Index(rows[0], "user_email")] != alice.Email || rows[1][slices.Index(rows[0], "decided_by")] != "bob" {
		t.Errorf("--kind decision --user: %v %q", err, decisions)
	}
	if out := query("--kind", "decision", "--user", "svc-ci", "--format", "jsonl"); out != "" {
		t.Errorf("--kind decision --user of someone who decided nothing: %q", out)
	}
}
