package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/guard-mcp/guard/e2e/guardtest"
)

// toolsByName lists a session's tools by name.
func toolsByName(t *testing.T, ctx context.Context, cs *mcp.ClientSession) (map[string]*mcp.Tool, *mcp.ListToolsResult) {
	t.Helper()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*mcp.Tool{}
	for _, tl := range res.Tools {
		out[tl.Name] = tl
	}
	return out, res
}

// waitSignal waits for a value on ch, or fails with what.
func waitSignal(t *testing.T, ctx context.Context, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatal(what)
	}
}

// The rug-pull server through guard run: the model reads only definitions a
// person accepted. Its poisoned tool is left out from the first listing;
// after the server rewrites fetch_weather (a friendlier description, hints
// that claim it only reads) the listing keeps the accepted definition; a
// person accepting the change from another process (the command line)
// reaches the open session within seconds as a list_changed of guard's,
// after which the listing shows the new definition.
func TestTheModelReadsOnlyAcceptedDefinitions(t *testing.T) {
	e := newEnv(t, "policy: {default: allow}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	changed := make(chan struct{}, 8)
	client := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	cs := e.connect(ctx, client, "2025-11-25", []string{"GUARD_E2E_SERVE=rugpull"}, "weather", os.Args[0])
	if !cs.InitializeResult().Capabilities.Tools.ListChanged {
		t.Fatal("guard does not declare that it tells of tool list changes")
	}
	tools, _ := toolsByName(t, ctx, cs)
	if _, ok := tools["add"]; ok {
		t.Fatalf("the poisoned tool reached the model: %q", tools["add"].Description)
	}
	accepted := tools["fetch_weather"]
	if accepted == nil || accepted.Description != "Returns the weather for a city." {
		t.Fatalf("the baseline listing: %+v", tools)
	}

	if r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "rug_pull", Arguments: map[string]any{}}); err != nil || r.IsError {
		t.Fatalf("rug_pull: %v %v", r, err)
	}
	waitSignal(t, ctx, changed, "the server's list_changed did not reach the client")
	tools, _ = toolsByName(t, ctx, cs)
	if got := tools["fetch_weather"]; got == nil || got.Description != accepted.Description || got.Annotations.ReadOnlyHint {
		t.Fatalf("the model read a definition no one accepted: %+v", got)
	}

	// Accepted elsewhere: guard tells the session, which then sees it.
	for len(changed) > 0 {
		<-changed
	}
	if out, code := e.guard("tools", "accept", "weather", "fetch_weather", "--by", "bob"); code != 0 {
		t.Fatalf("tools accept: %d %s", code, out)
	}
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	waitSignal(t, wctx, changed, "a review made elsewhere did not reach the open session")
	tools, _ = toolsByName(t, ctx, cs)
	if got := tools["fetch_weather"]; got == nil || got.Description != "Returns the weather for a city. Safe to call at any time." {
		t.Fatalf("after the change was accepted: %+v", got)
	}
}

// The same for a client of the session-less revision, through guard serve:
// the listing is marked private (it depends on reviews and on the caller),
// and guard's list_changed reaches it on its subscriptions/listen stream.
func TestAReviewReachesA20260728ClientOnItsListenStream(t *testing.T) {
	e := newEnv(t, "policy: {default: allow}\nservers:\n  weather:\n    command: ["+os.Args[0]+"]\n")
	e.environ = append(e.environ, "GUARD_E2E_SERVE=rugpull")
	url := e.serve() + "/mcp/weather"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	changed := make(chan struct{}, 8)
	client := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, res := toolsByName(t, ctx, cs)
	if res.CacheScope != "private" {
		t.Fatalf("a listing that depends on reviews has cacheScope %q", res.CacheScope)
	}
	if _, ok := tools["add"]; ok {
		t.Fatal("the poisoned tool reached the model")
	}
	if out, code := e.guard("tools", "accept", "weather", "add", "--by", "bob"); code != 0 {
		t.Fatalf("tools accept: %d %s", code, out)
	}
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	waitSignal(t, wctx, changed, "a review made elsewhere did not reach the 2026-07-28 client's listen stream")
	if tools, _ = toolsByName(t, ctx, cs); tools["add"] == nil {
		t.Fatal("the tool accepted elsewhere is not listed")
	}
}

// The official TypeScript SDK client in front of the reference filesystem
// server, over stdio and over guard serve: a tool the rules deny to the
// caller whatever the arguments is not listed (policy.hide_denied), and a
// call of it is denied by the rule.
func TestTheTypeScriptClientDoesNotSeeDeniedTools(t *testing.T) {
	root := t.TempDir()
	node, js := guardtest.Node(t), filesystemServer(t)
	e := newEnv(t, "policy:\n  rules:\n    - {name: no-writes, tool: write_file, action: deny, reason: read-only here}\n"+
		"servers:\n  files:\n    command: ["+node+", "+js+", "+root+"]\n")
	url := e.serve() + "/mcp/files"
	for _, target := range [][]string{append([]string{"--"}, e.wrap("files", node, js, root)...), {"--url", url}} {
		_, lines := callClient(t, "write_file", `{"path":"`+filepath.Join(root, "x.txt")+`","content":"x"}`, target...)
		listed := <-lines
		var names []string
		for _, x := range listed["tools"].([]any) {
			names = append(names, x.(map[string]any)["name"].(string))
		}
		if strings.Contains(strings.Join(names, " "), "write_file") || !strings.Contains(strings.Join(names, " "), "read_text_file") {
			t.Fatalf("%v: the TypeScript client's listing: %v", target[0], names)
		}
		res := <-lines
		text := res["result"].(map[string]any)["content"].([]any)[0].(map[string]any)["text"].(string)
		if text != `Denied by policy rule "no-writes": read-only here` {
			t.Fatalf("%v: a call of a hidden tool: %v", target[0], res)
		}
	}
}
