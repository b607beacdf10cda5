package main

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/internal/pgtest"
	"github.com/guard-mcp/guard/policy"
	"github.com/guard-mcp/guard/store"
)

// copySource makes an SQLite log at path signed with the key file key:
// calls of two servers, three held calls, and two servers' tools, one
// changed since its first listing. It is closed (a last checkpoint).
func copySource(t *testing.T, path, key string) {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, store.Options{Path: path, Durability: "normal", KeyPath: key})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i := range 8 {
		id := fmt.Sprintf("call-%d", i)
		server, tool := "files", "write_file"
		if i%3 == 0 {
			server, tool = "db", "query"
		}
		req := &guard.Record{CallID: id, ID: id + "-req", Kind: guard.KindRequest, Server: server, Method: "tools/call",
			Tool: tool, Arguments: fmt.Sprintf(`{"path":"/srv/%d","text":"ünïcode ✓"}`, i), Decision: guard.DecisionAllowed}
		out := &guard.Record{CallID: id, ID: id + "-out", Kind: guard.KindOutcome, Outcome: guard.OutcomeOK,
			Result: fmt.Sprintf(`{"content":[{"type":"text","text":"wrote %d bytes"}]}`, 10*i), DurationMS: int64(i)}
		if err := db.Append(req, out); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"held-1", "held-2", "held-3"} {
		if err := db.Holds().CreateApproval(ctx, &guard.Approval{ID: id, CallID: id, Session: "s1", Server: "files",
			Tool: "delete_file", Arguments: `{"path":"/srv/` + id + `"}`, Digest: "sha256:" + id, State: guard.ApprovalPending,
			CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	tool := func(name, desc string) guard.Tool {
		return guard.Tool{Name: name, Pin: "sha256:" + name + desc, Def: []byte(`{"name":"` + name + `","description":"` + desc + `"}`)}
	}
	for i, l := range [][]guard.Tool{
		{tool("write_file", "writes"), tool("delete_file", "deletes")},
		{tool("write_file", "writes, and more")},
	} {
		if err := db.Catalog().RecordTools(ctx, "files", l, now.Add(time.Duration(i)*time.Second), false); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Catalog().RecordTools(ctx, "db", []guard.Tool{tool("query", "reads")}, now, false); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// stored is what guard reads of a database: the records, approvals,
// tools and reviews.
type stored struct {
	Records   []*guard.Record
	Approvals []*guard.Approval
	Tools     []guard.Tool
	Reviews   []*guard.Review
}

func storedIn(t *testing.T, db *store.DB) stored {
	t.Helper()
	ctx := context.Background()
	var s stored
	var err error
	if err = db.Reader().Records(ctx, func(r *guard.Record) error { s.Records = append(s.Records, r); return nil }); err == nil {
		if s.Approvals, err = db.Holds().Approvals(ctx, ""); err == nil {
			if s.Tools, err = db.Catalog().Tools(ctx, ""); err == nil {
				s.Reviews, err = db.Catalog().Reviews(ctx, "")
			}
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// guard store copy moves a log, with its approvals, tools and the rules
// learned from approvals, from SQLite to PostgreSQL, where guard audit
// verify says what it says on SQLite, against the same checkpoint, and
// guard audit query prints the same calls; a second copy into it is
// refused.
func TestStoreCopy(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "db", "guard.db")
	key := filepath.Join(dir, "keys", "audit.key")
	cfg := writeFile(t, filepath.Join(dir, "guard.yaml"), "audit:\n  key_file: keys/audit.key\n")
	copySource(t, path, key)
	for _, args := range [][]string{
		{"approvals", "approve", "held-1", "--by", "alice", "--reason", "checked"},
		{"approvals", "deny", "held-2", "--by", "bob", "--reason", "not that file"},
	} {
		if out, errOut, code := run(t, dir, append(args, "--db", path, "--config", cfg)...); code != 0 {
			t.Fatalf("guard %s: exit %d\n%s\n%s", strings.Join(args, " "), code, out, errOut)
		}
	}
	learned := policy.Rule{Name: "allow-write_file", Server: "files", Tool: "write_file", Action: "allow"}
	if _, err := policy.AppendApprovedRule(filepath.Join(dir, "rules.d"), learned, nil); err != nil {
		t.Fatal(err)
	}
	kept := writeFile(t, filepath.Join(dir, "kept.checkpoint"), guardIn(t, dir, path, 0, "audit", "checkpoint", "--config", cfg))
	src, err := store.OpenReadOnly(ctx, store.Options{Path: path, KeyPath: key})
	if err != nil {
		t.Fatal(err)
	}
	want := storedIn(t, src)
	src.Close()
	records := len(want.Records)
	if records < 8*2+2 || len(want.Approvals) != 3 || len(want.Tools) != 3 || len(want.Reviews) != 4 {
		t.Fatalf("the source holds %d records, %d approvals, %d tools and %d reviews", records, len(want.Approvals), len(want.Tools), len(want.Reviews))
	}
	verified := fmt.Sprintf("ok: %d records, extends checkpoint %d\n", records, records)
	wantOutput(t, "verify on SQLite", guardIn(t, dir, path, 0, "audit", "verify", "--config", cfg, "--checkpoint", kept), verified)
	calls := guardIn(t, dir, path, 0, "audit", "query", "--config", cfg, "--format", "jsonl")

	url := pgtest.Database(t)
	out, errOut, code := run(t, dir, "store", "copy", "--config", cfg, "--from", path, "--to", url)
	if code != 0 {
		t.Fatalf("store copy: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"moved " + path + " to " + guard.DisplayURL(url) + ":\n",
		fmt.Sprintf("checkpoint: %d records, root ", records),
		"verify: " + verified,
		"  1 rules learned from approvals, from " + filepath.Join(dir, "rules.d", "approved.yaml"),
		"checkpoint key: " + key + "\n",
		"checkpoint file: " + filepath.Join(dir, "keys", "audit.checkpoint") + "\n",
	} {
		wantOutput(t, "store copy", out, want)
	}
	for table, n := range map[string]int{"records": records, "call_index": 8, "call_text": 8, "approvals": 3, "tools": 4, "tool_reviews": 4} {
		if !regexp.MustCompile(`(?m)^  ` + table + ` +` + strconv.Itoa(n) + `$`).MatchString(out) {
			t.Errorf("store copy does not say it moved %d rows of %s:\n%s", n, table, out)
		}
	}
	if strings.Contains(out, "audit.key_file: set it") {
		t.Errorf("store copy asks for audit.key_file, which the configuration sets:\n%s", out)
	}

	// guard on PostgreSQL: the configuration's key, and the checkpoint
	// file beside it.
	if got := guardIn(t, dir, url, 0, "audit", "verify", "--config", cfg, "--checkpoint", kept); got != verified {
		t.Errorf("verify on PostgreSQL: %q, want %q", got, verified)
	}
	if got := guardIn(t, dir, url, 0, "audit", "query", "--config", cfg, "--format", "jsonl"); got != calls || strings.Count(got, "\n") != 8 {
		t.Errorf("the calls on PostgreSQL:\n%s\nwant\n%s", got, calls)
	}
	dst, err := store.OpenReadOnly(ctx, store.Options{Path: url, KeyPath: key})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	got := storedIn(t, dst)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("read back from PostgreSQL:\n%+v\nwant\n%+v", got, want)
	}
	rules, _, err := dst.Learned().LearnedRules(ctx)
	if err != nil || len(rules) != 1 || rules[0].Name != learned.Name || rules[0].Tool != learned.Tool || rules[0].Method != "tools/call" {
		t.Errorf("learned rules on PostgreSQL: %+v %v", rules, err)
	}

	// A second copy is refused: with --db naming the source, --from's
	// default.
	out, errOut, code = run(t, dir, "store", "copy", "--config", cfg, "--db", path, "--to", url)
	if code != 1 || !strings.Contains(errOut, "its table records already holds rows") || !strings.Contains(errOut, "nothing was moved") {
		t.Fatalf("a second copy: exit %d\n%s\n%s", code, out, errOut)
	}
}

// A password in --to is refused, and so is what is not a move from an
// SQLite file to a PostgreSQL URL; nothing is opened.
func TestStoreCopyUsage(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "guard.db")
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"store"}, "guard store COMMAND"},
		{[]string{"store", "move"}, `unknown subcommand "move" (copy)`},
		{[]string{"store", "copy", "--from", path, "--to", "postgres://guard:S3cret@127.0.0.1:1/guard"}, "--to: the URL holds a password"},
		{[]string{"store", "copy", "--from", path, "--to", "postgres://guard@127.0.0.1:1/guard?password=S3cret"}, "PGPASSWORD or a .pgpass file"},
		{[]string{"store", "copy", "--from", "postgres://guard@127.0.0.1:1/a", "--to", "postgres://guard@127.0.0.1:1/b"}, "--from: want the SQLite database file"},
		{[]string{"store", "copy", "--from", path}, "--to: want the PostgreSQL database"},
		{[]string{"store", "copy", "--from", path, "--to", filepath.Join(dir, "other.db")}, "--to: want the PostgreSQL database"},
		{[]string{"store", "copy", "--from", path, "--to", "postgres://guard@127.0.0.1:1/guard", "extra"}, "usage: guard store copy"},
	} {
		stdout, stderr, code := run(t, dir, tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.stderr) || strings.Contains(stdout+stderr, "S3cret") {
			t.Errorf("guard %s: exit %d, stdout %q, stderr %q; want exit 2 saying %q", strings.Join(tc.args, " "), code, stdout, stderr, tc.stderr)
		}
	}
	// A source that is not there is not made.
	_, stderr, code := run(t, dir, "store", "copy", "--from", path, "--to", "postgres://guard@127.0.0.1:1/guard")
	if code != exitFailure || !strings.Contains(stderr, "no such file") {
		t.Errorf("a missing source: exit %d, %q", code, stderr)
	}
}
