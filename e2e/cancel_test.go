package e2e

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// serveSlow is a go-sdk server whose tool "block" reports progress once it
// has started, blocks until the client cancels it, and then answers anyway
// (the go-sdk writes a handler's result after a cancellation).
func serveSlow() int {
	s := mcp.NewServer(&mcp.Implementation{Name: "slow", Version: "1"}, nil)
	ro := &mcp.ToolAnnotations{ReadOnlyHint: true}
	s.AddTool(&mcp.Tool{Name: "block", InputSchema: map[string]any{"type": "object"}, Annotations: ro},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if tok := req.Params.GetProgressToken(); tok != nil {
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1, Message: "started"})
			}
			<-ctx.Done()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "late answer"}}}, nil
		})
	s.AddTool(&mcp.Tool{Name: "quick", InputSchema: map[string]any{"type": "object"}, Annotations: ro},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "quick"}}}, nil
		})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		return 1
	}
	return 0
}

// waitRecords waits until found reports true of the audit records of e's
// database, or fails after 20s; each round, check may fail the test.
func (e *env) waitRecords(ctx context.Context, what string, found func([]*guard.Record) bool, check func()) {
	e.t.Helper()
	db := e.open(ctx)
	defer db.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var recs []*guard.Record
		if err := db.Reader().Records(ctx, func(r *guard.Record) error {
			recs = append(recs, r)
			return nil
		}); err != nil {
			e.t.Fatal(err)
		}
		if found(recs) {
			return
		}
		if check != nil {
			check()
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the audit log never showed %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// outcomeOf returns the outcome recorded for the tool's call, "" while none.
func outcomeOf(recs []*guard.Record, tool string) string {
	for _, r := range recs {
		if r.Kind == guard.KindOutcome && r.Tool == tool {
			return r.Outcome
		}
	}
	return ""
}

// A go-sdk client cancels its context during a slow tool call through
// guard run: the call's outcome is recorded as cancelled (not as the
// server's later answer), and the session goes on.
func TestCancelledCallIsRecordedCancelled(t *testing.T) {
	e := newEnv(t, "policy: {default: allow}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client, started := progressClient()
	cs := e.connect(ctx, client, "2025-11-25", []string{"GUARD_E2E_SERVE=slow"}, "slow", os.Args[0])
	blockThenCancel(t, ctx, cs, started)
	e.waitRecords(ctx, "the call cancelled", func(recs []*guard.Record) bool {
		switch outcomeOf(recs, "block") {
		case "":
			return false
		case guard.OutcomeCancelled:
			return true
		default:
			t.Fatalf("the cancelled call was recorded %q", outcomeOf(recs, "block"))
			return false
		}
	}, nil)
	if text, isErr := callText(t, cs, "quick", nil); isErr || text != "quick" {
		t.Fatalf("after a cancellation: %q", text)
	}
	out, _ := e.guard("audit", "query", "--format", "jsonl", "--tool", "block")
	if !strings.Contains(out, `"outcome":"cancelled"`) {
		t.Fatalf("audit query: %s", out)
	}
}

// The server's answer to a call the client cancelled never reaches the
// client (the go-sdk client would hide it, so this client reads lines).
func TestLateAnswerToACancelledCallIsDropped(t *testing.T) {
	t.Setenv("GUARD_E2E_SERVE", "slow")
	e := newEnv(t, "policy: {default: allow}\n")
	lc := startLines(t, e.wrap("slow", os.Args[0]))
	lc.init()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lc.send(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"block","arguments":{},"_meta":{"progressToken":"p"}}}`)
	for m := range lc.lines {
		if m["method"] == "notifications/progress" {
			break
		}
		t.Fatalf("before the tool started: %v", m)
	}
	lc.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"changed my mind"}}`)
	// guard records the answer it drops: once it has, the answer has
	// had every chance to reach the client.
	e.waitRecords(ctx, "the late answer dropped", func(recs []*guard.Record) bool {
		for _, r := range recs {
			if r.Kind == guard.KindEvent && r.Method == "guard/dropped" && strings.Contains(r.Detail, "cancelled") {
				return outcomeOf(recs, "block") == guard.OutcomeCancelled
			}
		}
		return false
	}, func() {
		select {
		case m := <-lc.lines:
			b, _ := json.Marshal(m)
			t.Fatalf("the client read %s after cancelling", b)
		default:
		}
	})
	lc.send(`{"jsonrpc":"2.0","id":8,"method":"ping"}`)
	if m := lc.next(20 * time.Second); m["id"] != 8.0 {
		t.Fatalf("the client got an answer to a request it cancelled: %v", m)
	}
}
