package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
)

// openData opens the database a guard run with HOME dir uses by default,
// and returns it with its path.
func openData(t *testing.T, dir string) (*store.DB, string) {
	t.Helper()
	path := filepath.Join(dir, "data", "guard", "guard.db")
	db, err := store.Open(context.Background(), store.Options{Path: path, Durability: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	return db, path
}

// holdIn stores a pending approval in the database at path, as a running
// guard holding a call does, and closes it.
func holdIn(t *testing.T, path string, ids ...string) {
	t.Helper()
	db, err := store.Open(context.Background(), store.Options{Path: path, Durability: "full"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, id := range ids {
		if err := db.Holds().CreateApproval(context.Background(), &guard.Approval{ID: id, CallID: id, Session: "s1", Server: "files",
			Tool: "delete_file", Arguments: `{"path":"/tmp/x"}`, Digest: "sha256:" + id, State: guard.ApprovalPending,
			CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// recordsIn reads the records of a kind from the database at path.
func recordsIn(t *testing.T, path, kind string) []*guard.Record {
	t.Helper()
	db, err := store.OpenReadOnly(context.Background(), store.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var out []*guard.Record
	if err := db.Reader().Records(context.Background(), func(r *guard.Record) error {
		if r.Kind == kind {
			out = append(out, r)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// guard approvals approve and deny leave a decision record in the chain.
func TestApprovalsFromTheCommandLineAreRecords(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "data", "guard", "guard.db")
	holdIn(t, path, "held-1", "held-2")
	if out, errOut, code := run(t, dir, "approvals", "approve", "held-1", "--by", "alice", "--reason", "checked"); code != 0 || errOut != "" {
		t.Fatalf("approve: %d %s %s", code, out, errOut)
	}
	// A person reads the answer alone: nothing is logged below warn
	// unless asked (--log-level).
	if out, errOut, code := run(t, dir, "approvals", "deny", "held-2", "--by", "bob", "--reason", "not that file"); code != 0 || errOut != "" {
		t.Fatalf("deny: %d %s %s", code, out, errOut)
	}
	got := recordsIn(t, path, guard.KindDecision)
	if len(got) != 2 || got[0].Decision != guard.ApprovalApproved || got[0].DecidedBy != "alice" || got[0].Reason != "checked" ||
		got[0].Approval != "held-1" || got[0].CallID != "held-1" || got[1].Decision != guard.ApprovalDenied ||
		got[1].DecidedBy != "bob" || got[1].Approval != "held-2" || got[1].Session != "s1" {
		t.Fatalf("decision records: %+v", got)
	}
}

// On a full disk, a decision whose record does not fit in the audit
// journal is refused with a clear error, and the held call stays pending.
func TestADecisionTheLogCannotRecordIsRefusedByTheCommandLine(t *testing.T) {
	dir, data := smallDisk(t)
	path := filepath.Join(data, "guard", "guard.db")
	holdIn(t, path, "held-1")

	// Fill the disk, then free one page: room for the new journal's
	// header as guard opens the database, none for the decision's record.
	filler := fillDisk(t, data)
	st, err := os.Stat(filler)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filler, st.Size()-4096); err != nil {
		t.Fatal(err)
	}

	reason := strings.Repeat("checked every path of this deletion. ", 200) // needs pages of its own
	out, errOut, code := run(t, dir, "approvals", "approve", "held-1", "--by", "alice", "--reason", reason)
	if code != exitFailure || !strings.Contains(errOut, "the audit log could not be written") {
		t.Fatalf("approve on a full disk: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	t.Logf("refused: %s", errOut)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	ro, err := store.OpenReadOnly(context.Background(), store.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if a, err := ro.Holds().Approval(context.Background(), "held-1"); err != nil || a.State != guard.ApprovalPending || a.DecidedBy != "" {
		t.Fatalf("the held call changed: %+v %v", a, err)
	}
	if got := recordsIn(t, path, guard.KindDecision); len(got) != 0 {
		t.Fatalf("a refused decision was recorded: %+v", got)
	}
}

// A rule learned from an approval is recorded (rule_added, with the rule
// and the approval) before its file is written; a rule whose record
// cannot be written is not written.
// approvals list writes jsonl and csv under the audit records' names, with
// their times as the records write them.
func TestApprovalsListUsesTheRecordsNames(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "data", "guard", "guard.db")
	holdIn(t, path, "held-1")
	out, errOut, code := run(t, dir, "approvals", "list", "--format", "jsonl")
	if code != 0 {
		t.Fatalf("list: %d %s", code, errOut)
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(out), &line); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	for k, want := range map[string]string{"id": "held-1", "call_id": "held-1", "session": "s1", "server": "files",
		"tool": "delete_file", "arguments": `{"path":"/tmp/x"}`, "state": guard.ApprovalPending, "decided": ""} {
		if got, ok := line[k].(string); !ok || got != want {
			t.Errorf("%s: %v, want %q (line %s)", k, line[k], want, out)
		}
	}
	for _, k := range []string{"created", "expires"} {
		s, _ := line[k].(string)
		if ts, err := time.Parse(time.RFC3339, s); err != nil || !strings.HasSuffix(s, "Z") || ts.IsZero() {
			t.Errorf("%s: %q, want an RFC 3339 UTC time", k, s)
		}
	}
	for k := range line {
		if strings.ToLower(k) != k {
			t.Errorf("member %q is not a record's name", k)
		}
	}
	out, errOut, code = run(t, dir, "approvals", "list", "--format", "csv")
	if code != 0 {
		t.Fatalf("list csv: %d %s", code, errOut)
	}
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(rows) != 2 {
		t.Fatalf("csv: %v %q", err, out)
	}
	col := map[string]string{}
	for i, name := range rows[0] {
		col[name] = rows[1][i]
	}
	if col["id"] != "held-1" || col["tool"] != "delete_file" || col["arguments"] != `{"path":"/tmp/x"}` || col["expires"] != line["expires"] {
		t.Fatalf("csv row: %v", col)
	}
}
