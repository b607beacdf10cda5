package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// With approval.in_band: auto a held call is also put to the person at the
// client as a form elicitation; the first decision wins.
func TestInBandApproval(t *testing.T) {
	e := newEnv(t, "approval: {in_band: auto}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	asked := make(chan *mcp.ElicitRequest, 4)
	answer := make(chan *mcp.ElicitResult, 4)
	withdrawn := make(chan struct{}, 4)
	client := mcp.NewClient(&mcp.Implementation{Name: "desk", Version: "3"}, &mcp.ClientOptions{
		ElicitationHandler: func(hctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked <- req
			select {
			case r := <-answer:
				return r, nil
			case <-hctx.Done():
				withdrawn <- struct{}{}
				return nil, hctx.Err()
			}
		},
	})
	cs := e.connect(ctx, client, "2025-11-25", nil, "notes", guardBin, "example-server")
	text := func(r *mcp.CallToolResult) string { return r.Content[0].(*mcp.TextContent).Text }
	// delete_note is destructive: held under the default policy.
	del := func(title string) <-chan callResult {
		got := goCall(func() (*mcp.CallToolResult, error) {
			return cs.CallTool(ctx, &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"title": title}})
		})
		return got
	}

	// Approved in the client.
	got := del("welcome")
	req := within(t, asked)
	if !strings.Contains(req.Params.Message, "delete_note") || !strings.Contains(req.Params.Message, `"title": "welcome"`) {
		t.Fatalf("the question does not show the call: %q", req.Params.Message)
	}
	answer <- &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "approve"}}
	if r := awaitCall(t, got); r == nil || r.IsError || !strings.Contains(text(r), "deleted welcome") {
		t.Fatalf("approved in the client: %v", r)
	}
	out, _ := e.guard("audit", "query", "--format", "jsonl", "--tool", "delete_note")
	if !strings.Contains(out, `"decided_by":"user at desk/3"`) {
		t.Fatalf("the audit does not name the in-band approver:\n%s", out)
	}

	// Denied in the client, with a reason.
	got = del("other")
	within(t, asked)
	answer <- &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "deny", "reason": "keep it"}}
	if r := awaitCall(t, got); r == nil || !r.IsError || text(r) != "Denied by user at desk/3: keep it" {
		t.Fatalf("denied in the client: %v", r)
	}

	// Decided on the command line first: the question is withdrawn.
	got = del("third")
	within(t, asked)
	a := e.pendingFor(ctx, "delete_note")
	if out, code := e.guard("approvals", "deny", a.ID, "--reason", "from the terminal", "--by", "carol"); code != 0 {
		t.Fatalf("approvals deny: %d %s", code, out)
	}
	if r := awaitCall(t, got); r == nil || !r.IsError || text(r) != "Denied by carol: from the terminal" {
		t.Fatalf("decided elsewhere: %v", r)
	}
	select {
	case <-withdrawn:
	case <-time.After(5 * time.Second):
		t.Fatal("the client's question was not withdrawn after a decision elsewhere")
	}
}

// On 2026-07-28 guard asks with an input request of its own: the call is
// answered input_required, and the client's next round carries the
// person's answer; the first decision wins there too.
func TestInBandApprovalInRounds(t *testing.T) {
	e := newEnv(t, "approval: {in_band: auto}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	answers := make(chan *mcp.ElicitResult, 4)
	asked := make(chan string, 4)
	client := mcp.NewClient(&mcp.Implementation{Name: "desk", Version: "4"}, &mcp.ClientOptions{
		ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked <- req.Params.Message
			select {
			case a := <-answers:
				return a, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
	})
	cs := e.connect(ctx, client, "2026-07-28", nil, "notes", guardBin, "example-server")
	text := func(r *mcp.CallToolResult) string { return r.Content[0].(*mcp.TextContent).Text }
	del := func(title string) (*mcp.CallToolResult, error) {
		return cs.CallTool(ctx, &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"title": title}})
	}

	answers <- &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "approve"}}
	r, err := del("welcome")
	if err != nil || r.IsError || text(r) != "deleted welcome" {
		t.Fatalf("approved in the client's round: %v %v", r, err)
	}
	if q := within(t, asked); !strings.Contains(q, "delete_note") || !strings.Contains(q, `"title": "welcome"`) {
		t.Fatalf("the question: %q", q)
	}
	out, _ := e.guard("audit", "query", "--format", "jsonl", "--tool", "delete_note")
	if !strings.Contains(out, `"decided_by":"user at desk/4"`) {
		t.Fatalf("the audit does not name the in-band approver:\n%s", out)
	}

	answers <- &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "deny", "reason": "no"}}
	if r, err := del("other"); err != nil || !r.IsError || text(r) != "Denied by user at desk/4: no" {
		t.Fatalf("denied in the client's round: %v %v", r, err)
	}
	within(t, asked)

	// Someone decides on the command line while the client's question is
	// open: that decision wins over the client's later answer.
	got := goCall(func() (*mcp.CallToolResult, error) { return del("third") })
	within(t, asked)
	a := e.pendingFor(ctx, "delete_note")
	if out, code := e.guard("approvals", "deny", a.ID, "--reason", "from the terminal", "--by", "carol"); code != 0 {
		t.Fatalf("approvals deny: %s", out)
	}
	answers <- &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "approve"}}
	if r := awaitCall(t, got); r == nil || !r.IsError || text(r) != "Denied by carol: from the terminal" {
		t.Fatalf("the first decision must win: %v", r)
	}
}

// within receives from ch, failing the test after 30 s: guard never asked.
func within[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatal("guard never asked the client")
	}
	var zero T
	return zero
}
