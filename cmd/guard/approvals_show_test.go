package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
)

// guard approvals list and show say who made a held call, what its
// approval needs, who approved so far and what is still needed; approve
// --by, a typed name, cannot decide an approval that needs verified
// people.
func TestApprovalsWithRulesFromTheCommandLine(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "data", "guard", "guard.db")
	db, err := store.Open(context.Background(), store.Options{Path: path, Durability: "full"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := db.Holds().CreateApproval(context.Background(), &guard.Approval{ID: "held-1", CallID: "held-1", Session: "s1", Server: "db",
		Tool: "write_rows", Arguments: `{"table":"orders"}`, Digest: "sha256:1", State: guard.ApprovalPending, Rule: "prod-writes",
		HeldReason: "writes to production", CreatedAt: now, ExpiresAt: now.Add(time.Hour),
		Approvers: guard.Approvers{Groups: []string{"sre"}, Count: 2}, Caller: guard.Identity{Subject: "agent-7", Email: "dev@example.com"}}); err != nil {
		t.Fatal(err)
	}
	alice := guard.Identity{Subject: "u-alice", Email: "alice@example.com", Groups: []string{"sre"}}
	if _, err := db.Holds().ReviewApproval(context.Background(), "held-1", alice, guard.ViaOIDC, true, "checked", nil); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	out, errOut, code := run(t, dir, "approvals", "list")
	if code != 0 || !strings.Contains(out, "APPROVALS") || !strings.Contains(out, "1/2 members of sre") {
		t.Fatalf("list: %d %s %s", code, out, errOut)
	}
	out, errOut, code = run(t, dir, "approvals", "list", "--format", "jsonl")
	if code != 0 {
		t.Fatalf("list jsonl: %d %s", code, errOut)
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(out), &line); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	reviews, _ := line["reviews"].([]any)
	if line["id"] != "held-1" || line["held_reason"] != "writes to production" || line["needed"] != 2.0 || line["approvals"] != 1.0 ||
		line["waiting"] != "1 more approval from members of sre, each a verified identity" ||
		line["requester"].(map[string]any)["email"] != "dev@example.com" || line["approvers"].(map[string]any)["count"] != 2.0 ||
		len(reviews) != 1 || reviews[0].(map[string]any)["via"] != "oidc" || reviews[0].(map[string]any)["by"].(map[string]any)["email"] != "alice@example.com" {
		t.Fatalf("list jsonl: %s", out)
	}
	for _, k := range []string{"ID", "Tool", "HeldReason"} {
		if _, ok := line[k]; ok {
			t.Errorf("list jsonl: Go field name %q", k)
		}
	}
	out, errOut, code = run(t, dir, "approvals", "show", "held-1")
	for _, want := range []string{"requested by  dev@example.com (cannot decide on it)", "needs         2 approvals from members of sre",
		"review 1      alice@example.com approved at", "(verified: oidc; groups sre): checked",
		"still needed  1 more approval from members of sre"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("show: missing %q: %d %s %s", want, code, out, errOut)
		}
	}
	out, errOut, code = run(t, dir, "approvals", "approve", "held-1", "--by", "bob")
	if code != exitFailure || !strings.Contains(errOut, `"bob" is a typed name, not a verified identity`) {
		t.Fatalf("approve --by: %d %s %s", code, out, errOut)
	}
	if got := recordsIn(t, path, guard.KindDecision); len(got) != 1 {
		t.Fatalf("%d decision records, want the one review", len(got))
	}
	if _, errOut, code := run(t, dir, "approvals", "show", "nope"); code != exitFailure || !strings.Contains(errOut, "no held call with id nope") {
		t.Fatalf("show nope: %d %s", code, errOut)
	}
}

// guard policy check lists what a rule's approval needs, and policy test
// says what a call's would.
func TestPolicyCheckShowsApprovers(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "guard.yaml")
	if err := os.WriteFile(cfg, []byte("policy:\n  rules:\n    - {name: prod-writes, tool: \"write_*\", action: approve, approvers: {groups: [sre], count: 2}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, dir, "policy", "check", "--config", cfg)
	if code != 0 || !strings.Contains(out, "approve (2 approvals from members of sre)") ||
		!strings.Contains(out, cfg+`:3: rule "prod-writes" holds calls for 2 approvals from members of sre, each a verified identity`) ||
		!strings.Contains(out, "neither ui.oidc nor ui.passkey is configured: no one can approve these calls") {
		t.Fatalf("policy check: %d %s %s", code, out, errOut)
	}
	// With a login that verifies identities, no warning.
	withOIDC := filepath.Join(dir, "oidc.yaml")
	if err := os.WriteFile(withOIDC, []byte("ui: {oidc: {issuer: \"https://login.example.com\", client_id: guard}}\n"+
		"policy:\n  rules:\n    - {name: prod-writes, tool: \"write_*\", action: approve, approvers: {groups: [sre], count: 2}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := run(t, dir, "policy", "check", "--config", withOIDC); code != 0 || strings.Contains(out, "no one can approve") {
		t.Fatalf("policy check with ui.oidc: %d %s %s", code, out, errOut)
	}
	out, errOut, code = run(t, dir, "policy", "test", "--config", cfg, "--call", `{"server":"db","tool":"write_rows","args":{}}`)
	if code != 0 || !strings.Contains(out, "needs:    2 approvals from members of sre, each a verified identity") {
		t.Fatalf("policy test: %d %s %s", code, out, errOut)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("policy:\n  rules:\n    - {name: a, action: approve, approvers: {count: 0}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := run(t, dir, "policy", "check", "--config", bad); code != exitUsage || !strings.Contains(errOut, bad+`:3: "0" is not a positive whole number`) {
		t.Fatalf("policy check of a bad count: %d %s", code, errOut)
	}
}

// guard approvals show says that approving a hold whose client has gone
// does not run the call, when the hold stays open for that (scope any).
func TestApprovalsShowSaysApprovingAGoneClientsCallDoesNotRunIt(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	db, _ := openData(t, dir)
	now := time.Now()
	if err := db.Holds().CreateApproval(ctx, &guard.Approval{ID: "gone-1", CallID: "gone-1", Session: "s1", Server: "files", Tool: "rm",
		Arguments: `{}`, Digest: "sha256:1", State: guard.ApprovalPending, Rule: "default", HeldReason: "destructive",
		CreatedAt: now, ExpiresAt: now.Add(time.Hour), Scope: guard.ScopeAny}); err != nil {
		t.Fatal(err)
	}
	ended := now.Add(time.Minute)
	if ok, err := db.Holds().MarkSessionEnded(ctx, "gone-1", ended); !ok || err != nil {
		t.Fatalf("session ended: %v %v", ok, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, dir, "approvals", "show", "gone-1")
	want := "client gone  Its client is gone (at " + ended.UTC().Format("2006-01-02T15:04:05.000Z07:00") + "). Approving does not run this call: it lets the same call " +
		"through once when a client makes it again (same server, tool and arguments, any session; approval.scope: any).\n"
	if code != 0 || !strings.Contains(out, want) {
		t.Fatalf("show: %d %s %s", code, out, errOut)
	}
}
