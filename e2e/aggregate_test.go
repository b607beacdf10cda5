package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/guard-mcp/guard/e2e/guardtest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// serveAggregate runs guard serve with the example server as "notes", the
// go-sdk conformance server as "everything" and a server that cannot
// start, and returns the aggregate endpoint.
func serveAggregate(t *testing.T, config string) (*env, string) {
	t.Helper()
	e := newEnv(t, config+"servers:\n  notes:\n    command: ["+guardBin+", example-server]\n"+
		"  everything:\n    command: ["+guardtest.EverythingServer(t)+"]\n  broken:\n    command: [/nonexistent/mcp-server]\n")
	return e, e.serve() + "/mcp"
}

// The aggregate endpoint offers every server's tools and prompts under
// SERVER__NAME and their resources under their own URIs; each call reaches
// its own server under its own name, is decided by the rules written for
// that server and tool, and is recorded as that server's; a server's
// requests (sampling) and notifications (progress) reach the client
// during its call. A server that cannot start is left out and said to be.
func TestAggregateEndpoint(t *testing.T) {
	e, url := serveAggregate(t, "aggregate: {enabled: true}\npolicy:\n  default: allow\n  rules:\n"+
		"    - {name: notes-stay, server: notes, tool: delete_note, action: deny, reason: notes stay}\n")
	for _, v := range []string{"2025-03-26", "2025-11-25", "2026-07-28"} {
		t.Run(v, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			progress := make(chan float64, 10)
			client := mcp.NewClient(&mcp.Implementation{Name: "agg", Version: "1"}, &mcp.ClientOptions{
				CreateMessageHandler: func(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
					return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "sampled for " + v}}, nil
				},
				ProgressNotificationHandler: func(ctx context.Context, req *mcp.ProgressNotificationClientRequest) {
					progress <- req.Params.Progress
				},
			})
			cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, &mcp.ClientSessionOptions{ProtocolVersion: v})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			if v != "2026-07-28" {
				ir := cs.InitializeResult()
				if ir.ServerInfo.Name != "guard" || ir.Capabilities.Tools == nil || ir.Capabilities.Prompts == nil || ir.Capabilities.Resources == nil {
					t.Fatalf("initialize result: %+v %+v", ir.ServerInfo, ir.Capabilities)
				}
				if ir.ProtocolVersion != v {
					t.Fatalf("negotiated %s, want %s", ir.ProtocolVersion, v)
				}
			}
			tools, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			names := map[string]bool{}
			for _, tl := range tools.Tools {
				if !strings.HasPrefix(tl.Name, "notes__") && !strings.HasPrefix(tl.Name, "everything__") {
					t.Errorf("tool %q is not namespaced", tl.Name)
				}
				names[tl.Name] = true
			}
			for _, want := range []string{"notes__write_note", "everything__test_simple_text", "everything__test_sampling"} {
				if !names[want] {
					t.Errorf("%s is not listed (%d tools)", want, len(names))
				}
			}
			// Its server's session leaves out what a rule denies
			// whatever the arguments (policy.hide_denied).
			if names["notes__delete_note"] {
				t.Error("notes__delete_note, which a rule denies, is listed")
			}
			if text, isErr := callText(t, cs, "notes__write_note", map[string]any{"title": "agg" + v, "body": "b"}); isErr {
				t.Fatalf("notes__write_note: %s", text)
			}
			if text, isErr := callText(t, cs, "notes__read_note", map[string]any{"title": "agg" + v}); isErr || !strings.Contains(text, "b") {
				t.Fatalf("notes__read_note: %q %v", text, isErr)
			}
			if text, isErr := callText(t, cs, "everything__test_simple_text", map[string]any{}); isErr || text == "" {
				t.Fatalf("everything__test_simple_text: %q %v", text, isErr)
			}
			// A rule written for server notes, tool delete_note.
			r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "notes__delete_note", Arguments: map[string]any{"title": "agg" + v}})
			if err == nil && (r == nil || !r.IsError) {
				t.Fatalf("the denied call was not refused: %+v", r)
			}
			if got := errText(r, err); !strings.Contains(got, "notes stay") {
				t.Fatalf("the denial does not give the rule's reason: %q", got)
			}
			if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "nobody__delete_note", Arguments: map[string]any{}}); err == nil || !strings.Contains(err.Error(), "Unknown tool") {
				t.Fatalf("a call for no server: %v", err)
			}
			if v != "2026-07-28" {
				// The server asks the client during the call.
				if text, isErr := callText(t, cs, "everything__test_sampling", map[string]any{"prompt": "hi"}); isErr || !strings.Contains(text, "sampled for "+v) {
					t.Fatalf("everything__test_sampling: %q %v", text, isErr)
				}
				params := &mcp.CallToolParams{Name: "everything__test_tool_with_progress", Arguments: map[string]any{}}
				params.SetProgressToken("p-" + v)
				if _, err := cs.CallTool(ctx, params); err != nil {
					t.Fatal(err)
				}
				select {
				case <-progress:
				case <-time.After(5 * time.Second):
					t.Fatal("no progress reached the client")
				}
			}
			prompts, err := cs.ListPrompts(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(prompts.Prompts) == 0 || !strings.HasPrefix(prompts.Prompts[0].Name, "everything__") {
				t.Fatalf("prompts: %+v", prompts.Prompts)
			}
			if p, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "everything__test_simple_prompt"}); err != nil || len(p.Messages) == 0 {
				t.Fatalf("everything__test_simple_prompt: %v %+v", err, p)
			}
			res, err := cs.ListResources(ctx, nil)
			if err != nil || len(res.Resources) == 0 {
				t.Fatalf("resources: %v %+v", err, res)
			}
			rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: res.Resources[0].URI})
			if err != nil || len(rr.Contents) == 0 {
				t.Fatalf("reading %s: %v %+v", res.Resources[0].URI, err, rr)
			}
			if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "test://template/7/data"}); err != nil {
				t.Fatalf("a templated resource: %v", err)
			}
		})
	}
	// Recorded as the servers' own calls.
	out, code := e.guard("audit", "query", "--server", "notes", "--tool", "delete_note", "--format", "jsonl")
	if code != 0 || !strings.Contains(out, `"denied"`) || strings.Contains(out, "notes__") {
		t.Fatalf("audit of notes/delete_note (%d): %s", code, out)
	}
	out, _ = e.guard("audit", "query", "--server", "everything", "--tool", "test_simple_text", "--format", "jsonl")
	if n := strings.Count(strings.TrimSpace(out), "\n") + 1; out == "" || n != 3 {
		t.Fatalf("audit of everything/test_simple_text: %d records: %s", n, out)
	}
}

// errText is the text of a refused call: its error, or its result's text.
func errText(r *mcp.CallToolResult, err error) string {
	if err != nil {
		return err.Error()
	}
	b, _ := json.Marshal(r.Content)
	return string(b)
}

// The separator is configurable; without aggregate, /mcp is not served.
func TestAggregateSeparator(t *testing.T) {
	_, url := serveAggregate(t, "aggregate: {enabled: true, separator: \"-\"}\npolicy: {default: allow}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agg", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	// The server that could not start is named in initialize's _meta.
	req, _ := http.NewRequest("POST", url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"guard/unavailable":["broken"]`) || !strings.Contains(string(body), `"protocolVersion":"2025-11-25"`) {
		t.Fatalf("initialize through the aggregate: %s", body)
	}
	if text, isErr := callText(t, cs, "notes-echo", map[string]any{"text": "hello"}); isErr || text != "hello" {
		t.Fatalf("notes-echo: %q %v", text, isErr)
	}
	_, off := serveAggregate(t, "policy: {default: allow}\n")
	resp, err = http.Post(off, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("/mcp without aggregate enabled: %d, want 404", resp.StatusCode)
	}
	if resp, err := http.Post(strings.TrimSuffix(off, "/mcp")+"/mcp/notes", "application/json", strings.NewReader(`{}`)); err != nil || resp.StatusCode == http.StatusNotFound {
		t.Fatalf("/mcp/notes is not served: %v %v", resp, err)
	}
}
