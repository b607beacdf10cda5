package exampleserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/guard-mcp/guard/exampleserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// connect starts a new example server and a go-sdk client with opts on
// in-memory transports, pinned to protocol version if it is not empty.
func connect(t *testing.T, opts *mcp.ClientOptions, version string) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := exampleserver.New(nil).Connect(ctx, st, nil)
	if err != nil {
		t.Fatalf("server connect: %v", err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, opts).Connect(ctx, ct, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("client connect: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// collect returns what arrives on ch: n values (or fewer after five
// seconds), and any that follow within a tenth of a second.
func collect[T any](ch <-chan T, n int) []T {
	var got []T
	wait := time.After(5 * time.Second)
	for {
		if len(got) == n {
			wait = time.After(100 * time.Millisecond)
		}
		select {
		case v := <-ch:
			got = append(got, v)
		case <-wait:
			return got
		}
	}
}

// call calls a tool and returns its text, failing on a protocol error.
func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (string, *mcp.CallToolResult) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res
}

type hints struct {
	readOnly, hasDestructive, destructive, hasOpenWorld, openWorld, none bool
}

func hintsOf(tl *mcp.Tool) hints {
	a := tl.Annotations
	if a == nil {
		return hints{none: true}
	}
	h := hints{readOnly: a.ReadOnlyHint}
	if a.DestructiveHint != nil {
		h.hasDestructive, h.destructive = true, *a.DestructiveHint
	}
	if a.OpenWorldHint != nil {
		h.hasOpenWorld, h.openWorld = true, *a.OpenWorldHint
	}
	return h
}

func TestToolsAndTheirAnnotations(t *testing.T) {
	cs := connect(t, nil, "")
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	readOnly := hints{readOnly: true, hasOpenWorld: true}
	want := map[string]hints{
		"echo":         readOnly,
		"read_note":    readOnly,
		"list_notes":   readOnly,
		"note_stats":   readOnly,
		"write_note":   {hasDestructive: true, hasOpenWorld: true},
		"delete_note":  {hasDestructive: true, destructive: true, hasOpenWorld: true},
		"send_message": {hasDestructive: true, hasOpenWorld: true, openWorld: true},
		"run_task":     {none: true},
	}
	got := map[string]*mcp.Tool{}
	for _, tl := range res.Tools {
		got[tl.Name] = tl
	}
	if len(got) != len(want) {
		t.Errorf("tools: got %d, want %d", len(got), len(want))
	}
	for name, h := range want {
		tl, ok := got[name]
		if !ok {
			t.Errorf("%s is not listed", name)
			continue
		}
		if g := hintsOf(tl); g != h {
			t.Errorf("%s: annotations %+v, want %+v", name, g, h)
		}
	}
	// Every tool but list_notes and note_stats takes required arguments.
	for _, name := range []string{"echo", "read_note", "write_note", "delete_note", "send_message", "run_task"} {
		b, _ := json.Marshal(got[name].InputSchema)
		var s struct {
			Required []string `json:"required"`
		}
		if err := json.Unmarshal(b, &s); err != nil || len(s.Required) == 0 {
			t.Errorf("%s: input schema has no required properties: %s", name, b)
		}
	}
	if got["note_stats"].OutputSchema == nil {
		t.Error("note_stats has no output schema")
	}
}

func TestNotebook(t *testing.T) {
	cs := connect(t, nil, "")
	if s, _ := call(t, cs, "echo", map[string]any{"text": "ab", "times": 3}); s != "ababab" {
		t.Errorf("echo: %q", s)
	}
	if s, _ := call(t, cs, "write_note", map[string]any{"title": "plan", "body": "ship it"}); s != "saved plan" {
		t.Errorf("write_note: %q", s)
	}
	if s, _ := call(t, cs, "read_note", map[string]any{"title": "plan"}); s != "ship it" {
		t.Errorf("read_note: %q", s)
	}
	if s, _ := call(t, cs, "list_notes", nil); s != "plan\nwelcome" {
		t.Errorf("list_notes: %q", s)
	}
	if s, _ := call(t, cs, "send_message", map[string]any{"to": "ops@example.com", "message": "hello"}); !strings.Contains(s, "would have sent 5 bytes to ops@example.com") {
		t.Errorf("send_message: %q", s)
	}
	_, res := call(t, cs, "note_stats", nil)
	b, _ := json.Marshal(res.StructuredContent)
	if string(b) != `{"bytes":40,"notes":2,"sent":1}` {
		t.Errorf("note_stats: structured content %s", b)
	}
	if s, _ := call(t, cs, "delete_note", map[string]any{"title": "plan"}); s != "deleted plan" {
		t.Errorf("delete_note: %q", s)
	}
	s, res := call(t, cs, "read_note", map[string]any{"title": "plan"})
	if !res.IsError || !strings.Contains(s, `no note titled "plan"`) {
		t.Errorf("read_note after delete: %v %q", res.IsError, s)
	}
	if _, res := call(t, cs, "delete_note", map[string]any{"title": "plan"}); !res.IsError {
		t.Error("deleting a missing note is not an error")
	}
	// A missing required argument is refused before the tool runs.
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "write_note", Arguments: map[string]any{"title": "x"}})
	if err == nil && !res.IsError {
		t.Error("write_note without a body succeeded")
	}
	if s, _ := call(t, cs, "list_notes", nil); s != "welcome" {
		t.Errorf("list_notes after a refused write: %q", s)
	}
}

func TestRunTaskReportsProgress(t *testing.T) {
	progress := make(chan float64, 16)
	cs := connect(t, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) { progress <- r.Params.Progress },
	}, "")
	params := &mcp.CallToolParams{Name: "run_task", Arguments: map[string]any{"task": "tidy", "seconds": 1}}
	params.SetProgressToken("p1")
	res, err := cs.CallTool(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); !ok || tc.Text != "done: tidy" {
		t.Errorf("run_task: %v", res.Content)
	}
	if seen := collect(progress, 4); !slices.Equal(seen, []float64{1, 2, 3, 4}) {
		t.Errorf("progress: %v, want 1 to 4", seen)
	}
}

func TestRunTaskLogsOnceALevelIsSet(t *testing.T) {
	logs := make(chan string, 8)
	cs := connect(t, &mcp.ClientOptions{
		LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) { logs <- fmt.Sprint(r.Params.Data) },
	}, "2025-11-25") // logging/setLevel predates 2026-07-28
	args := map[string]any{"task": "tidy"}
	call(t, cs, "run_task", args)
	if err := cs.SetLoggingLevel(context.Background(), &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	call(t, cs, "run_task", args)
	if got := collect(logs, 2); !slices.Equal(got, []string{"started tidy", "finished tidy"}) {
		t.Errorf("logs: %v, want the second call's start and end only", got)
	}
}

func TestRunTaskStopsWhenCancelled(t *testing.T) {
	cs := connect(t, nil, "")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_task", Arguments: map[string]any{"task": "long", "seconds": 30}})
	if err == nil {
		t.Fatal("a cancelled call succeeded")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cancellation took %v", d)
	}
}

// Run speaks newline-delimited JSON-RPC on a reader and a writer, as the
// example-server command does on its standard input and output.
func TestRunOverPipes(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- exampleserver.Run(context.Background(), inR, outW) }()
	lines := make(chan string, 4)
	go func() {
		buf := make([]byte, 1<<16)
		var acc []byte
		for {
			n, err := outR.Read(buf)
			acc = append(acc, buf[:n]...)
			for {
				i := slices.Index(acc, '\n')
				if i < 0 {
					break
				}
				lines <- string(acc[:i])
				acc = acc[i+1:]
			}
			if err != nil {
				close(lines)
				return
			}
		}
	}()
	send := func(s string) {
		if _, err := io.WriteString(inW, s+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	recv := func() string {
		select {
		case l := <-lines:
			return l
		case <-time.After(5 * time.Second):
			t.Fatal("no answer")
			return ""
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if l := recv(); !strings.Contains(l, `"name":"guard-example"`) {
		t.Fatalf("initialize: %s", l)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`)
	if l := recv(); !strings.Contains(l, `"id":2`) || !strings.Contains(l, `"text":"hi"`) {
		t.Fatalf("echo: %s", l)
	}
	inW.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return when its input ended")
	}
}
