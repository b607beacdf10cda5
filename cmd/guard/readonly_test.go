package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
)

// tree lists every file under dir with its mode, size and time of change.
func tree(t *testing.T, dir string) string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		mtime := fi.ModTime().UnixNano()
		if strings.HasSuffix(p, "-shm") {
			mtime = 0 // readers of a WAL database mark what they read there, in place
		}
		out = append(out, fmt.Sprintf("%s %v %d %v", strings.TrimPrefix(p, dir), fi.Mode(), fi.Size(), mtime))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// The commands that only read work on a full disk, and create, change and
// write nothing: no file appears in the data directory, and a hold past
// its expiry is shown as expired without being recorded as such.
func TestReadOnlyCommandsOnAFullDisk(t *testing.T) {
	dir, data := smallDisk(t)
	ctx := context.Background()
	dbPath := filepath.Join(data, "guard", "guard.db")
	db, err := store.Open(ctx, store.Options{Path: dbPath, Durability: "full"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		call := "call-" + string(rune('a'+i))
		if err := db.Append(&guard.Record{CallID: call, Kind: guard.KindRequest, Server: "files", Method: "tools/call", Tool: "read_file", Decision: guard.DecisionAllowed},
			&guard.Record{CallID: call, Kind: guard.KindOutcome, Server: "files", Method: "tools/call", Tool: "read_file", Outcome: guard.OutcomeOK}); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	if err := db.Holds().CreateApproval(ctx, &guard.Approval{ID: "held-1", Server: "files", Tool: "delete_file", Arguments: `{}`,
		Digest: "sha256:x", State: guard.ApprovalPending, CreatedAt: now.Add(-time.Hour), ExpiresAt: now.Add(-time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	fillDisk(t, data)

	before := tree(t, data)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"audit", "query"}, "read_file"},
		{[]string{"audit", "query", "--format", "jsonl"}, `"outcome":"ok"`},
		{[]string{"audit", "verify"}, "ok, unwitnessed: 10 records"},
		{[]string{"approvals", "list", "--state", "all"}, "expired"},
		{[]string{"approvals", "list"}, "ID"},
		{[]string{"policy", "check"}, "built-in defaults"},
		{[]string{"tools", "list"}, "SERVER"},
	} {
		stdout, stderr, code := run(t, dir, tc.args...)
		if code != 0 || !strings.Contains(stdout, tc.want) {
			t.Errorf("guard %s on a full disk: exit %d, stdout %q, stderr %q; want %q", strings.Join(tc.args, " "), code, stdout, stderr, tc.want)
		}
	}
	if stdout, _, _ := run(t, dir, "approvals", "list"); strings.Contains(stdout, "held-1") {
		t.Errorf("a pending list shows a hold past its expiry:\n%s", stdout)
	}
	if after := tree(t, data); after != before {
		t.Fatalf("the data directory changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	ro, err := store.OpenReadOnly(ctx, store.Options{Path: dbPath})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if a, err := ro.Holds().Approval(ctx, "held-1"); err != nil || a.State != guard.ApprovalPending {
		t.Fatalf("the listing wrote the hold's expiry: %+v %v", a, err)
	}
}
