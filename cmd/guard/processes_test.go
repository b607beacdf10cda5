package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
)

// guard approvals approve on a hold whose guard process is gone (it
// stopped beating while another went on) does not approve it: it
// withdraws it, says why, and exits 1; the list then shows it withdrawn,
// with why.
func TestApprovingTheHoldOfAGoneProcessSaysSo(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "data", "guard", "guard.db")
	ctx := context.Background()
	db, err := store.Open(ctx, store.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	if err := db.Holds().CreateApproval(ctx, &guard.Approval{ID: "held-1", CallID: "held-1", Session: "s1", Server: "files",
		Tool: "delete_file", Arguments: `{"path":"/tmp/x"}`, Digest: "sha256:x", State: guard.ApprovalPending,
		Scope: guard.ScopeSession, Process: "killed", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	// The killed process's last beat, and another's run long after it.
	for _, r := range []store.Replica{
		{ID: "killed", Host: "laptop", PID: 4242, Process: "guard run", Started: now.Add(-time.Minute), Seen: now.Add(-time.Minute)},
		{ID: "witness", Host: "laptop", PID: 4243, Process: "guard run", Started: now.Add(-time.Minute), Seen: now.Add(-time.Minute)},
		{ID: "witness", Host: "laptop", PID: 4243, Process: "guard run", Seen: now.Add(-30 * time.Second)},
		{ID: "witness", Host: "laptop", PID: 4243, Process: "guard run", Seen: now},
	} {
		r.Lapse = time.Minute
		if err := db.Replicas().Heartbeat(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, dir, "approvals", "approve", "held-1", "--by", "alice")
	if code != exitFailure || !strings.Contains(errOut, "the call's guard process is gone (guard run (pid 4242 on laptop)") {
		t.Fatalf("approve: %d %q %q", code, out, errOut)
	}
	out, errOut, code = run(t, dir, "approvals", "list", "--state", "all", "--format", "jsonl")
	var a struct{ State, Reason string }
	if code != exitOK || json.Unmarshal([]byte(out), &a) != nil || a.State != guard.ApprovalWithdrawn ||
		!strings.HasPrefix(a.Reason, "the guard process that held the call is gone: guard run (pid 4242 on laptop)") {
		t.Fatalf("list: %d %q %q", code, out, errOut)
	}
}
