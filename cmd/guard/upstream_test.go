package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// headerServer is a real go-sdk Streamable HTTP server that answers only
// requests carrying the headers want.
func headerServer(t *testing.T, want map[string]string) string {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "hello", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello from remote"}}}, nil, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range want {
			if r.Header.Get(k) != v {
				http.Error(w, k+" is missing or wrong", http.StatusForbidden)
				return
			}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp"
}

// guard run --upstream sends the headers --header-env and --bearer-env
// name, with their values from the environment, and shows the values
// nowhere: not in its logs, not in the audit log.
func TestRunUpstreamHeadersFromTheEnvironment(t *testing.T) {
	url := headerServer(t, map[string]string{"X-Api-Key": "key-0123456789abcdef", "Authorization": "Bearer tok-0123456789abcdef"})
	dir := t.TempDir()
	env := map[string]string{"HOME": dir, "XDG_CONFIG_HOME": filepath.Join(dir, "config"), "XDG_DATA_HOME": filepath.Join(dir, "data"),
		"REMOTE_KEY": "key-0123456789abcdef", "REMOTE_TOKEN": "tok-0123456789abcdef"}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var errb lockedBuffer
	a := newApp(inR, outW, &errb, func(k string) string { return env[k] })
	done := make(chan int, 1)
	go func() {
		done <- a.main(context.Background(), []string{"run", "--no-ui", "--name", "remote", "--upstream", url,
			"--header-env", "x-api-key=REMOTE_KEY", "--bearer-env", "REMOTE_TOKEN"})
		outW.Close()
	}()
	lines := bufio.NewScanner(outR)
	send := func(s string) {
		if _, err := io.WriteString(inW, s+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	next := func() string {
		if !lines.Scan() {
			t.Fatalf("guard ended its output; stderr: %s", errb.String())
		}
		return lines.Text()
	}
	send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"lines","version":"1"}}}`)
	if got := next(); !strings.Contains(got, `"serverInfo"`) {
		t.Fatalf("initialize: %s", got)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	next()
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"hello","arguments":{}}}`)
	if got := next(); !strings.Contains(got, "hello from remote") {
		t.Fatalf("tools/call: %s\nstderr: %s", got, errb.String())
	}
	inW.Close()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("guard run did not end with its input")
	}
	out, _, _ := run(t, dir, "audit", "query", "--format", "jsonl", "--server", "remote")
	if !strings.Contains(out, `"tool":"hello"`) {
		t.Fatalf("the call is not in the audit log: %s", out)
	}
	for _, secret := range []string{"key-0123456789abcdef", "tok-0123456789abcdef"} {
		if strings.Contains(errb.String()+out, secret) {
			t.Fatalf("a header's value shows: %s\n%s", errb.String(), out)
		}
	}
}

// Header flags are checked before anything starts: the variable that is
// missing is named, its value never.
func TestRunUpstreamHeaderFlags(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"--header-env", "Authorization=TOKEN", "--", "true"}, "go with --upstream URL"},
		{[]string{"--upstream", "http://127.0.0.1:1/mcp", "--header-env", "Authorization"}, "want Header=ENVNAME"},
		{[]string{"--upstream", "http://127.0.0.1:1/mcp", "--header-env", "Bad Header=X"}, `"Bad Header" is not a header name`},
		{[]string{"--upstream", "http://127.0.0.1:1/mcp", "--header-env", "Authorization=NO_SUCH_TOKEN"}, "the variable NO_SUCH_TOKEN is not set"},
		{[]string{"--upstream", "http://127.0.0.1:1/mcp", "--bearer-env", "NO_SUCH_TOKEN"}, "--bearer-env NO_SUCH_TOKEN: the variable NO_SUCH_TOKEN is not set"},
	} {
		_, stderr, code := run(t, dir, append([]string{"run", "--no-ui"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.stderr) {
			t.Errorf("guard run %s: exit %d, %q; want 2 with %q", strings.Join(tc.args, " "), code, stderr, tc.stderr)
		}
	}
}
