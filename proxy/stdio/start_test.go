package stdio

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/guard-mcp/guard/proxy"
)

// A server that could not be started leaves guard run nothing to relay:
// each request the client sends is answered with an error that says why
// (an initialize in particular, which the client waits on), a
// notification or a response with nothing, until the client's input
// ends. The client used to see guard's output end, and had to guess.
func TestRefuseStartAnswersEachRequest(t *testing.T) {
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`not json`,
		`[{"jsonrpc":"2.0","id":"a","method":"ping"},{"jsonrpc":"2.0","method":"notifications/x"},{"jsonrpc":"2.0","id":"b","method":"tools/list"}]`,
		`{"jsonrpc":"2.0","id":2,"result":{}}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"x"}}`,
	}, "\n") + "\n"
	var out strings.Builder
	cause := fmt.Errorf("%w: node: the server could not be isolated from guard's files, so guard did not start it: too many open files", ErrStart)
	if err := RefuseStart(proxy.NewStreamConn(strings.NewReader(in), &out, 0), cause); err != nil {
		t.Fatal(err)
	}
	const text = `"The server could not be started: node: the server could not be isolated from guard's files, so guard did not start it: too many open files"`
	want := []string{
		`{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":` + text + `}}`,
		`[{"jsonrpc":"2.0","id":"a","error":{"code":-32603,"message":` + text + `}},{"jsonrpc":"2.0","id":"b","error":{"code":-32603,"message":` + text + `}}]`,
		`{"jsonrpc":"2.0","id":3,"error":{"code":-32603,"message":` + text + `}}`,
	}
	got := strings.Split(strings.TrimSpace(out.String()), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("answers:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Over HTTP, a session whose server could not be started has its
// initialize answered with an error that says why, under its own id.
func TestHTTPInitializeSaysWhyTheServerDidNotStart(t *testing.T) {
	refused := errors.New("the server could not be isolated from guard's files, so guard did not start it: too many open files")
	sc := Stdio{Argv: []string{"/bin/true"}, Start: func(*exec.Cmd) (*exec.Cmd, error) { return nil, refused }}
	_, url := callerFront(t, proxy.HTTPOptions{Child: sc.Serve, Session: func(proxy.Caller) proxy.Options { return proxy.Options{} }})
	status, body, session := postAs(t, context.Background(), url, "alice", initialize, nil)
	id, code, msg := errorOf(t, body)
	if status != http.StatusInternalServerError || session != "" || id != `"init-1"` || code != -32603 ||
		msg != "The server could not be started: "+refused.Error() {
		t.Fatalf("initialize: %d %s (session %q)", status, body, session)
	}
}

// callerFront serves o behind an HTTPServer whose callers are named by
// the X-Client header (a request without one is refused, 401), as
// package proxy's tests do.
func callerFront(t *testing.T, o proxy.HTTPOptions) (*proxy.HTTPServer, string) {
	t.Helper()
	front := httptest.NewUnstartedServer(nil)
	o.Name = "x"
	o.AllowedHosts = []string{front.Listener.Addr().String()}
	o.Authenticate = func(r *http.Request) (proxy.Caller, *proxy.AuthError) {
		if r.Header.Get("X-Client") == "" {
			return proxy.Caller{}, &proxy.AuthError{Status: http.StatusUnauthorized, Message: "Unauthorized"}
		}
		return proxy.Caller{Client: r.Header.Get("X-Client")}, nil
	}
	h := proxy.NewHTTPServer(o)
	front.Config.Handler = h
	front.Start()
	t.Cleanup(func() { h.Close(); front.Close() })
	return h, front.URL
}

// postAs posts body as client, with headers, and returns the answer's
// status, its body and its session.
func postAs(t *testing.T, ctx context.Context, url, client, body string, headers map[string]string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("X-Client", client)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header.Get("Mcp-Session-Id")
}

const initialize = `{"jsonrpc":"2.0","id":"init-1","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

// errorOf reads a JSON-RPC error answer: its id, code and message.
func errorOf(t *testing.T, body string) (string, int, string) {
	t.Helper()
	var m struct {
		ID    json.RawMessage
		Error struct {
			Code    int
			Message string
		}
	}
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("%q: %v", body, err)
	}
	return string(m.ID), m.Error.Code, m.Error.Message
}
