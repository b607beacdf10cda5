package main

import (
	"context"
	"database/sql"
	"encoding/csv"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
)

// The period of the report tests, and the tool name a server could send
// to break a page.
const (
	reportSince = "2026-03-01T00:00:00Z"
	reportUntil = "2026-03-31T23:59:59Z"
	hostileTool = `<script>alert(1)</script>`
	hostileWhy  = `fine"><img src=x onerror=alert(2)>`
)

// reportLog builds, through the store, a log of known figures for March
// 2026 (and a call before it that the report must leave out):
//
//   - read_file: 4 calls allowed by read-files (one of two rounds), one a tool error
//   - write_file: 2 calls denied by no-etc
//   - <script>...: held, approved by alice after 90 s (the outcome)
//   - query: held, denied by bob after 30 s (the outcome)
//   - drop: held, the client told to retry, approved by carol 10 min later (a decision record)
//   - drop: held, expired after 10 min
//   - a resources/read denied by no-etc
//   - one tools/list
//   - a configuration reloaded, a rule learned from carol's approval
//   - old_tool, which the catalog does not have, accepted by alice, as
//     the log records it
//
// and, in the catalog, read_file changed (accepted by alice) and the
// hostile tool new (rejected by bob). It returns the database's path and
// how many records the log holds.
func reportLog(t *testing.T, dir string) (string, string) {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(dir, "data", "guard", "guard.db")
	day := time.Date(2026, 3, 10, 9, 0, 0, 0, time.UTC)
	db, err := store.Open(ctx, store.Options{Path: path, Durability: "normal", Now: func() time.Time { return day.Add(time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	n := 0
	call := func(server, tool string, at time.Time) (*guard.Record, *guard.Record) {
		n++
		q := &guard.Record{CallID: "call-" + string(rune('a'+n)), Kind: guard.KindRequest, Time: at, Server: server,
			Direction: guard.ClientToServer, Method: "tools/call", Tool: tool, Arguments: `{}`}
		o := *q
		o.Kind, o.Arguments, o.Time = guard.KindOutcome, "", at.Add(time.Second)
		return q, &o
	}
	var recs []*guard.Record
	decided := func(q, o *guard.Record, decision, by, reason, outcome string) {
		q.Decision, q.DecidedBy, q.Reason = decision, by, reason
		o.Decision, o.DecidedBy, o.Reason, o.Outcome = decision, by, reason, outcome
		recs = append(recs, q, o)
	}
	held := func(q, o *guard.Record, after time.Duration, decision, by, reason, outcome string) {
		q.Decision, q.DecidedBy, q.Reason = guard.DecisionHeld, "default", "destructive tool"
		o.Decision, o.DecidedBy, o.Reason, o.Outcome, o.Time = decision, by, reason, outcome, q.Time.Add(after)
		recs = append(recs, q, o)
	}
	q, o := call("files", "read_file", day.AddDate(0, -1, 0)) // before the period
	decided(q, o, guard.DecisionAllowed, "read-files", "", guard.OutcomeOK)
	for i, outcome := range []string{guard.OutcomeOK, guard.OutcomeOK, guard.OutcomeToolError} {
		q, o := call("files", "read_file", day.Add(time.Duration(i)*time.Minute))
		decided(q, o, guard.DecisionAllowed, "read-files", "", outcome)
	}
	// A call of two rounds: two requests, an input_required outcome between.
	q, o = call("files", "read_file", day.Add(5*time.Minute))
	decided(q, o, guard.DecisionAllowed, "read-files", "", guard.OutcomeInputRequired)
	q2, o2 := *q, *o
	q2.Time, o2.Time, o2.Outcome = q.Time.Add(2*time.Second), q.Time.Add(3*time.Second), guard.OutcomeOK
	recs = append(recs, &q2, &o2)
	for i := range 2 {
		q, o := call("files", "write_file", day.Add(time.Duration(10+i)*time.Minute))
		decided(q, o, guard.DecisionDenied, "no-etc", "no writes under /etc", guard.OutcomeDenied)
	}
	q, o = call("files", hostileTool, day.Add(20*time.Minute))
	held(q, o, 90*time.Second, guard.DecisionAllowed, "alice", hostileWhy, guard.OutcomeOK)
	q, o = call("db", "query", day.Add(30*time.Minute))
	held(q, o, 30*time.Second, guard.DecisionDenied, "bob", "not on production\x1b[2J", guard.OutcomeDenied)
	q, o = call("db", "drop", day.Add(40*time.Minute))
	held(q, o, 50*time.Second, guard.DecisionHeld, "default", "destructive tool", guard.OutcomeAwaitingApproval)
	recs = append(recs, &guard.Record{CallID: q.CallID, Kind: guard.KindDecision, Time: q.Time.Add(10 * time.Minute),
		Server: "db", Tool: "drop", Decision: guard.DecisionAllowed, DecidedBy: "carol", Reason: "=1+1 approved later", Approval: q.CallID})
	q, o = call("db", "drop", day.Add(50*time.Minute))
	held(q, o, 10*time.Minute, guard.DecisionHeld, "default", "no decision within the approval timeout", guard.OutcomeExpired)
	q, o = call("files", "", day.Add(55*time.Minute))
	q.Method, o.Method = "resources/read", "resources/read"
	decided(q, o, guard.DecisionDenied, "no-etc", "no reads under /etc", guard.OutcomeDenied)
	recs = append(recs, &guard.Record{CallID: "list-1", Kind: guard.KindRequest, Time: day, Server: "files",
		Direction: guard.ClientToServer, Method: "tools/list"},
		&guard.Record{CallID: "list-1", Kind: guard.KindOutcome, Time: day, Server: "files",
			Direction: guard.ClientToServer, Method: "tools/list", Outcome: guard.OutcomeOK})
	recs = append(recs,
		&guard.Record{Kind: guard.KindConfig, Time: day, Decision: "reloaded", Reason: "rules.d/approved.yaml changed",
			Detail: `{"digest":"sha256:c0ffee"}`},
		&guard.Record{Kind: guard.KindRuleAdded, Time: day.Add(time.Hour), Server: "db", Tool: "drop", Decision: "allow",
			DecidedBy: "carol", Approval: "call-k", Reason: "learned from approval call-k", Detail: `{"rule":"approved-db-drop","action":"allow"}`},
		&guard.Record{Kind: guard.KindToolReview, Time: day.Add(150 * time.Minute), Server: "files", Tool: "old_tool",
			Pin: "sha256:old", Decision: "accepted", DecidedBy: "alice", Detail: `{"cause":"changed"}`})
	if err := db.Append(recs...); err != nil {
		t.Fatal(err)
	}
	def := func(name, desc string) guard.Tool {
		d := `{"name":"` + name + `","description":"` + desc + `"}`
		return guard.Tool{Name: name, Def: []byte(d), Pin: "sha256:" + name + desc}
	}
	if err := db.Catalog().RecordTools(ctx, "files", []guard.Tool{def("read_file", "v1")}, day.AddDate(0, -1, 0), false); err != nil {
		t.Fatal(err)
	}
	if err := db.Catalog().RecordTools(ctx, "files", []guard.Tool{def("read_file", "v2"), def(hostileTool, "new")}, day, false); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Catalog().DecideTool(ctx, "files", "read_file", "sha256:read_filev2", true, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Catalog().DecideTool(ctx, "files", hostileTool, "", false, "bob"); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := store.OpenReadOnly(ctx, store.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	records := 0
	if err := ro.Reader().Records(ctx, func(*guard.Record) error { records++; return nil }); err != nil {
		t.Fatal(err)
	}
	return path, strconv.Itoa(records)
}

// reportOf builds reportLog's log and returns its report for March 2026
// in the format, and how many records the log holds.
func reportOf(t *testing.T, format string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	_, records := reportLog(t, dir)
	out, errs, code := run(t, dir, "audit", "report", "--since", reportSince, "--until", reportUntil, "--format", format)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	return out, records
}

func TestAuditReportText(t *testing.T) {
	out, records := reportOf(t, "text")
	lines := strings.Split(out, "\n")
	// fields returns the fields of the line that starts with the words.
	fields := func(words ...string) []string {
		t.Helper()
		for _, l := range lines {
			if f := strings.Fields(l); len(f) >= len(words) && slices.Equal(f[:len(words)], words) {
				return f[len(words):]
			}
		}
		t.Fatalf("no line %q in:\n%s", strings.Join(words, " "), out)
		return nil
	}
	for _, c := range []struct {
		words []string
		want  string
	}{
		{[]string{"Period:"}, reportSince + " to " + reportUntil},
		{[]string{"Calls"}, "11 (other requests: 1)"},
		{[]string{"Allowed", "by", "policy"}, "4"},
		{[]string{"Denied", "by", "policy"}, "3"},
		{[]string{"Held", "for", "a", "person"}, "4 approved 2, denied 1, expired 1"},
		{[]string{"Errors"}, "1"},
		{[]string{"Tool", "definitions"}, "3 new or changed; reviews: 2 accepted, 1 rejected, 0 pending"},
		{[]string{"Policy", "changes"}, "2 rules learned: 1, configurations loaded: 1"},
		{[]string{"2026-03-10T10:00:00Z", "rule_added", "approved-db-drop", "carol", "db", "drop"}, "learned from approval call-k"},
		{[]string{"2026-03-10T09:00:00Z", "config", "reloaded", "-", "-", "-"}, "rules.d/approved.yaml changed"},
		{[]string{"-", "files", "old_tool", "changed", "accepted", "alice"}, "2026-03-10T11:30:00Z sha256:old"},
		{[]string{"Verification", "ok"}, records + " records"},
		{[]string{"files", "read_file"}, "4 4 0 0 1"},
		{[]string{"files", "write_file"}, "2 0 2 0 0"},
		{[]string{"files", hostileTool}, "1 0 0 1 0"},
		{[]string{"db", "drop"}, "2 0 0 2 0"},
		{[]string{"read-files"}, "4 0 0"},
		{[]string{"no-etc", "no", "writes", "under", "/etc"}, "files write_file 2"},
		{[]string{"no-etc", "no", "reads", "under", "/etc"}, "files resources/read 1"},
		{[]string{"files", "resources/read"}, "1 0 1 0 0"},
		{[]string{"no-etc"}, "0 3 0"},
		{[]string{"tool_error"}, "1"},
		{[]string{"awaiting_approval"}, "1"},
		{[]string{"2026-03-10T09:20:00Z", "files", hostileTool, "default", "approved", "alice"}, "1m30s " + hostileWhy + " call-i"},
		{[]string{"2026-03-10T09:30:00Z", "db", "query", "default", "denied", "bob"}, `30s not on production\x1b[2J call-j`},
		{[]string{"2026-03-10T09:40:00Z", "db", "drop", "default", "approved", "carol"}, "10m0s =1+1 approved later call-k"},
		{[]string{"2026-03-10T09:50:00Z", "db", "drop", "default", "expired"}, "- 10m0s - call-l"},
		{[]string{"2026-03-10T09:00:00Z", "files", "read_file", "changed", "accepted", "alice", "2026-03-10T10:00:00Z"}, "sha256:read_filev2"},
		{[]string{"2026-03-10T09:00:00Z", "files", hostileTool, "new", "rejected", "bob"}, "2026-03-10T10:00:00Z sha256:" + hostileTool + "new"},
	} {
		if got := strings.Join(fields(c.words...), " "); got != c.want {
			t.Errorf("%s: got %q, want %q", strings.Join(c.words, " "), got, c.want)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Error("an escape character from the log reached the terminal")
	}
	for _, l := range lines {
		if strings.HasSuffix(l, " ") {
			t.Errorf("trailing spaces: %q", l)
		}
	}
	if !strings.Contains(out, "ok: all "+records+" records of the log verify") {
		t.Errorf("no verification statement:\n%s", out)
	}
}

func TestAuditReportCSV(t *testing.T) {
	csvColumns := []string{"section", "item", "server", "tool", "decided_by", "reason", "count",
		"allowed", "denied", "held", "errors", "time", "verdict", "decided_at", "wait_ms", "approval", "pin", "state"}
	out, records := reportOf(t, "csv")
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rows[0], csvColumns) {
		t.Fatalf("header %q", rows[0])
	}
	col := func(name string) int { return slices.Index(csvColumns, name) }
	// find returns the rows of a section whose columns have the values.
	find := func(section string, match map[string]string) [][]string {
		var out [][]string
	rows:
		for _, r := range rows[1:] {
			if len(r) != len(csvColumns) {
				t.Fatalf("row of %d columns: %q", len(r), r)
			}
			if r[0] != section {
				continue
			}
			for k, v := range match {
				if r[col(k)] != v {
					continue rows
				}
			}
			out = append(out, r)
		}
		return out
	}
	one := func(section string, match map[string]string, want map[string]string) {
		t.Helper()
		got := find(section, match)
		if len(got) != 1 {
			t.Fatalf("%s %v: %d rows", section, match, len(got))
		}
		for k, v := range want {
			if got[0][col(k)] != v {
				t.Errorf("%s %v: %s = %q, want %q", section, match, k, got[0][col(k)], v)
			}
		}
	}
	for item, n := range map[string]string{"calls": "11", "other_requests": "1", "allowed": "4", "denied": "3", "held": "4",
		"errors": "1", "held_approved": "2", "held_denied": "1", "held_expired": "1", "held_undecided": "0",
		"tool_definitions": "3", "reviews_accepted": "2", "reviews_rejected": "1", "rules_learned": "1", "configurations_loaded": "1"} {
		one("summary", map[string]string{"item": item}, map[string]string{"count": n})
	}
	one("report", map[string]string{"item": "since"}, map[string]string{"reason": reportSince})
	one("calls", map[string]string{"tool": "read_file"}, map[string]string{"server": "files", "count": "4", "allowed": "4", "errors": "1"})
	one("calls", map[string]string{"tool": hostileTool}, map[string]string{"count": "1", "held": "1"})
	one("decisions", map[string]string{"decided_by": "default"}, map[string]string{"held": "4", "count": "4"})
	one("denials", map[string]string{"tool": "write_file"}, map[string]string{"decided_by": "no-etc", "reason": "no writes under /etc", "count": "2"})
	one("denials", map[string]string{"tool": "resources/read"}, map[string]string{"decided_by": "no-etc", "reason": "no reads under /etc", "count": "1"})
	one("approvals", map[string]string{"tool": "query"}, map[string]string{"verdict": "denied", "decided_by": "bob",
		"wait_ms": "30000", "time": "2026-03-10T09:30:00Z", "decided_at": "2026-03-10T09:30:30Z", "state": "default"})
	one("approvals", map[string]string{"decided_by": "carol"}, map[string]string{"verdict": "approved", "wait_ms": "600000", "approval": "call-k",
		"reason": "'=1+1 approved later"}) // not a formula in a spreadsheet
	one("approvals", map[string]string{"tool": hostileTool}, map[string]string{"reason": hostileWhy})
	one("approvals", map[string]string{"verdict": "expired"}, map[string]string{"decided_by": "", "wait_ms": "600000"})
	one("tool_changes", map[string]string{"tool": hostileTool}, map[string]string{"item": "new", "state": "rejected", "decided_by": "bob"})
	one("tool_changes", map[string]string{"tool": "old_tool"}, map[string]string{"item": "changed", "state": "accepted", "decided_by": "alice",
		"time": "", "decided_at": "2026-03-10T11:30:00Z"})
	one("policy_changes", map[string]string{"item": "rule_added"}, map[string]string{"state": "approved-db-drop", "decided_by": "carol",
		"server": "db", "tool": "drop", "time": "2026-03-10T10:00:00Z"})
	one("policy_changes", map[string]string{"item": "config"}, map[string]string{"state": "reloaded", "reason": "rules.d/approved.yaml changed"})
	one("verification", nil, map[string]string{"verdict": "ok", "count": records, "reason": ""})
	if n := len(find("approvals", nil)); n != 4 {
		t.Errorf("%d approvals, want 4", n)
	}
}

func TestAuditReportHTML(t *testing.T) {
	out, records := reportOf(t, "html")
	doc, err := html.Parse(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	var title string
	var h2s []string
	var tables []*html.Node
	for n := range doc.Descendants() {
		if n.Type != html.ElementNode {
			continue
		}
		switch n.DataAtom {
		case atom.Script, atom.Img, atom.Link, atom.Iframe, atom.Object, atom.Embed, atom.Form:
			t.Errorf("a <%s> element in the page", n.Data)
		case atom.Title:
			title = text(n)
		case atom.H2:
			h2s = append(h2s, text(n))
		case atom.Table:
			tables = append(tables, n)
		}
		for _, a := range n.Attr {
			if strings.HasPrefix(a.Key, "on") || a.Key == "src" || a.Key == "href" {
				t.Errorf("<%s %s=%q> in the page", n.Data, a.Key, a.Val)
			}
		}
	}
	if want := "guard audit report, " + reportSince + " to " + reportUntil; title != want {
		t.Errorf("title %q, want %q", title, want)
	}
	if want := []string{"Summary", "Calls per server and tool", "Decisions by rule", "Denials", "Approvals", "Tool changes", "Policy changes", "Verification"}; !slices.Equal(h2s, want) {
		t.Errorf("sections %q, want %q", h2s, want)
	}
	cells := map[string][][]string{} // the first header cell of each table → its rows' cells
	for _, tb := range tables {
		var rows [][]string
		for tr := range tb.Descendants() {
			if tr.DataAtom != atom.Tr {
				continue
			}
			var row []string
			for c := tr.FirstChild; c != nil; c = c.NextSibling {
				if c.DataAtom == atom.Td || c.DataAtom == atom.Th {
					row = append(row, text(c))
				}
			}
			rows = append(rows, row)
		}
		cells[section(tb)+"/"+rows[0][0]] = rows
	}
	row := func(table string, first ...string) []string {
		t.Helper()
		for _, r := range cells[table] {
			if len(r) >= len(first) && slices.Equal(r[:len(first)], first) {
				return r[len(first):]
			}
		}
		t.Fatalf("table %q has no row %q: %q", table, first, cells[table])
		return nil
	}
	for _, c := range []struct {
		table string
		first []string
		want  []string
	}{
		{"summary/Calls", []string{"Calls"}, []string{"11", "tool calls, and other requests that rules decide; other requests (initialize, listings, ...): 1"}},
		{"summary/Calls", []string{"Held for a person"}, []string{"4", "approved 2, denied 1, expired 1"}},
		{"summary/Calls", []string{"Verification"}, []string{"ok", records + " records"}},
		{"calls/Server", []string{"files", hostileTool}, []string{"1", "0", "0", "1", "0"}},
		{"calls/Server", []string{"files", "read_file"}, []string{"4", "4", "0", "0", "1"}},
		{"calls/Outcome", []string{"denied"}, []string{"4"}},
		{"decisions/Rule", []string{"no-etc"}, []string{"0", "3", "0"}},
		{"denials/Rule", []string{"no-etc", "no writes under /etc"}, []string{"files", "write_file", "2"}},
		{"approvals/Held at", []string{"2026-03-10T09:30:00Z", "db", "query"}, []string{"default", "denied", "bob", "30s", `not on production\x1b[2J`, "call-j"}},
		{"approvals/Held at", []string{"2026-03-10T09:20:00Z", "files", hostileTool}, []string{"default", "approved", "alice", "1m30s", hostileWhy, "call-i"}},
		{"approvals/Held at", []string{"2026-03-10T09:40:00Z", "db", "drop"}, []string{"default", "approved", "carol", "10m0s", "=1+1 approved later", "call-k"}},
		{"tool-changes/First seen", []string{"2026-03-10T09:00:00Z", "files", hostileTool}, []string{"new", "rejected", "bob", "2026-03-10T10:00:00Z", "sha256:" + hostileTool + "new"}},
		{"policy-changes/Time", []string{"2026-03-10T10:00:00Z", "rule_added"}, []string{"approved-db-drop", "carol", "db", "drop", "learned from approval call-k"}},
		{"summary/Calls", []string{"Policy changes"}, []string{"2", "rules learned: 1, configurations loaded: 1"}},
	} {
		if got := row(c.table, c.first...); !slices.Equal(got, c.want) {
			t.Errorf("%s %q: %q, want %q", c.table, c.first, got, c.want)
		}
	}
	if !strings.Contains(out, "&lt;script&gt;alert(1)&lt;/script&gt;") || strings.Contains(out, hostileTool) || strings.Contains(out, "<img") {
		t.Error("a value from the log is not escaped")
	}
	var verdict string
	for n := range doc.Descendants() {
		if n.DataAtom == atom.P && slices.Contains(n.Attr, html.Attribute{Key: "class", Val: "verdict"}) {
			verdict = text(n)
		}
	}
	if !strings.HasPrefix(verdict, "ok: all "+records+" records of the log verify") {
		t.Errorf("verification statement %q", verdict)
	}
}

// section is the id of the section a node is in.
func section(n *html.Node) string {
	for p := n.Parent; p != nil; p = p.Parent {
		if p.DataAtom == atom.Section {
			for _, a := range p.Attr {
				if a.Key == "id" {
					return a.Val
				}
			}
		}
	}
	return ""
}

// text is the text of a node and its descendants.
func text(n *html.Node) string {
	var b strings.Builder
	for d := range n.Descendants() {
		if d.Type == html.TextNode {
			b.WriteString(d.Data)
		}
	}
	return strings.TrimSpace(b.String())
}

func TestAuditReportSaysWhenTheLogFails(t *testing.T) {
	dir := t.TempDir()
	path, records := reportLog(t, dir)
	alterRecord3(t, path)
	out, _, code := run(t, dir, "audit", "report", "--since", reportSince, "--until", reportUntil)
	if code != exitFailure || !strings.Contains(out, "Verification       FAILED") || !strings.Contains(out, "FAILED after "+records+" records: record 3 ") {
		t.Errorf("exit %d:\n%s", code, out)
	}
}

func TestAuditReportUsage(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--format", "pdf"}, `--format "pdf": want text, html or csv`},
		{[]string{"--since", "last week"}, "neither an RFC 3339 time nor a duration"},
		{[]string{"--since", "1d", "--until", "2d"}, "the period ends"},
	} {
		_, errs, code := run(t, dir, append([]string{"audit", "report"}, c.args...)...)
		if code != exitUsage || !strings.Contains(errs, c.want) {
			t.Errorf("%q: exit %d, %q", c.args, code, errs)
		}
	}
	// No database yet: an empty report, nothing created, and a log it
	// cannot verify, as guard audit verify says.
	out, _, code := run(t, dir, "audit", "report")
	if code != exitUnverifiable || !strings.Contains(out, "Calls              0") || !strings.Contains(out, "NOT VERIFIED: 0 records were checked") ||
		!strings.Contains(out, "there is no database at "+filepath.Join(dir, "data", "guard", "guard.db")) {
		t.Errorf("exit %d:\n%s", code, out)
	}
}

// alterRecord3 alters record 3 of the log as someone with the file would: the
// triggers dropped, a value changed.
func alterRecord3(t *testing.T, path string) {
	t.Helper()
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec(`DROP TRIGGER records_no_update; UPDATE records SET decided_by = 'nobody' WHERE seq = 3`); err != nil {
		t.Fatal(err)
	}
}
