package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/approvals"
)

// A call held by a rule with approvers: {count: 2}, made by a go-sdk
// client through guard run to the example server, is released only
// after two distinct verified people approved it: a typed name from the
// command line is refused, the first approval leaves it waiting, the same
// person again counts once, the second person's approval lets the
// server's real result through. Each review is a decision record in the
// chain, which verifies. (The reviewers decide through the store, as the
// UI does for a person its OIDC or passkey login verified.)
func TestAHoldWithTwoApproversIsReleasedByTheSecond(t *testing.T) {
	e := newEnv(t, `approval: {wait: 50s}
policy:
  rules:
    - name: two-people
      server: notes
      tool: delete_note
      action: approve
      approvers: {count: 2}
`)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs := e.connectExample(ctx)
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "write_note", Arguments: map[string]any{"title": "plan", "body": "x"}}); err != nil {
		t.Fatal(err)
	}
	got := goCall(func() (*mcp.CallToolResult, error) {
		return cs.CallTool(ctx, &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"title": "plan"}})
	})
	a := e.pendingFor(ctx, "delete_note")
	if a.Rule != "two-people" || a.Approvers.Needed() != 2 {
		t.Fatalf("held: %+v", a)
	}

	out, code := e.guard("approvals", "approve", a.ID, "--by", "alice")
	if code != 1 || !strings.Contains(out, "typed name, not a verified identity") {
		t.Fatalf("approve --by: %d %s", code, out)
	}

	db := e.open(ctx)
	defer db.Close()
	m := approvals.New(db.Holds(), approvals.Options{})
	alice := approvals.Reviewer{Identity: guard.Identity{Subject: "u-alice", Email: "alice@example.com", Groups: []string{"sre"}}, Via: guard.ViaOIDC}
	bob := approvals.Reviewer{Identity: guard.Identity{Subject: "u-bob", Email: "bob@example.com"}, Via: guard.ViaPasskey}
	first, err := m.Review(ctx, a.ID, alice, true, "one of two", nil)
	if err != nil || first.State != guard.ApprovalPending {
		t.Fatalf("the first approval: %+v %v", first, err)
	}
	if _, err := m.Review(ctx, a.ID, alice, true, "", nil); err == nil {
		t.Fatal("the same person's second approval was taken")
	}
	out, _ = e.guard("approvals", "show", a.ID)
	if !strings.Contains(out, "alice@example.com approved") || !strings.Contains(out, "still needed  1 more approval") {
		t.Fatalf("approvals show after one approval: %s", out)
	}
	select {
	case r := <-got:
		t.Fatalf("the call ended after one approval of two: %+v %v", r.r, r.err)
	default:
	}

	second, err := m.Review(ctx, a.ID, bob, true, "", nil)
	if err != nil || second.State != guard.ApprovalApproved {
		t.Fatalf("the second approval: %+v %v", second, err)
	}
	if r := awaitCall(t, got); r == nil || r.IsError || r.Content[0].(*mcp.TextContent).Text != "deleted plan" {
		t.Fatalf("the approved call: %+v", r)
	}
	cs.Close()
	if err := db.Close(); err != nil { // its last checkpoint covers the reviews
		t.Fatal(err)
	}

	recs := find(e.chain(), func(r *guard.Record) bool { return r.Kind == guard.KindDecision && r.Approval == a.ID })
	if len(recs) != 2 || recs[0].Decision != "" || recs[0].DecidedBy != "alice@example.com" ||
		!strings.Contains(recs[0].Detail, `"groups":["sre"]`) || !strings.Contains(recs[0].Detail, `"via":"oidc"`) ||
		recs[1].Decision != guard.ApprovalApproved || recs[1].DecidedBy != "bob@example.com" ||
		!strings.Contains(recs[1].Detail, `"approved_by":["alice@example.com","bob@example.com"]`) {
		for _, r := range recs {
			t.Logf("%+v", r)
		}
		t.Fatalf("%d decision records of the approval, want its two reviews", len(recs))
	}
	out, _ = e.guard("audit", "query", "--format", "jsonl", "--tool", "delete_note")
	if !strings.Contains(out, `"decided_by":"bob@example.com"`) || !strings.Contains(out, `"outcome":"ok"`) {
		t.Fatalf("audit of the approved call: %s", out)
	}
}
