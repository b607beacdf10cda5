package streamable

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/guard-mcp/guard/proxy"
	"github.com/guard-mcp/guard/proxy/stdio"
	"github.com/guard-mcp/guard/wire"
)

// holdingRun is a session (Options.Run) that answers every request
// with an empty result, except those of method hold, which it never
// answers; received gets the method of each request it reads.
func holdingRun(hold string, received chan<- string) func(ctx context.Context, c Caller, conn proxy.Conn) error {
	return readingRun(hold, func(m wire.Message) {
		if received != nil {
			received <- m.Method
		}
	})
}

// readingRun is holdingRun that calls read with each request it reads.
func readingRun(hold string, read func(wire.Message)) func(ctx context.Context, c Caller, conn proxy.Conn) error {
	return func(ctx context.Context, _ Caller, conn proxy.Conn) error {
		for {
			m, err := conn.Read(ctx)
			if err != nil {
				return nil
			}
			if m.Kind != wire.KindRequest {
				continue
			}
			read(m)
			if m.Method == hold {
				continue
			}
			result := `{}`
			if m.Method == "initialize" {
				result = `{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"t","version":"1"}}`
			}
			if err := conn.Write(ctx, proxy.Unparsed([]byte(`{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":`+result+`}`))); err != nil {
				return nil
			}
		}
	}
}

// callerFront serves o behind an Server whose callers are named by
// the X-Client header (a request without one is refused, 401).
func callerFront(t *testing.T, o Options) (*Server, string) {
	t.Helper()
	front := httptest.NewUnstartedServer(nil)
	o.Name = "x"
	o.AllowedHosts = []string{front.Listener.Addr().String()}
	o.Authenticate = func(r *http.Request) (Caller, *AuthError) {
		if r.Header.Get("X-Client") == "" {
			return Caller{}, &AuthError{Status: http.StatusUnauthorized, Message: "Unauthorized"}
		}
		return Caller{Client: r.Header.Get("X-Client")}, nil
	}
	h := NewServer(o)
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

// Every request's reading is bounded from the start: one refused before
// its body is read (here for want of a token) does not keep its
// connection either while the body trickles in. Only the POSTs that
// reached the session's handling were bounded, so a client without a
// token could hold connections, and descriptors, for as long as it liked.
func TestARefusedRequestsBodyIsBoundedToo(t *testing.T) {
	_, url := callerFront(t, Options{BodyTimeout: 200 * time.Millisecond, Run: holdingRun("", nil)})
	host := strings.TrimPrefix(url, "http://")
	conn, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("POST / HTTP/1.1\r\nHost: " + host + "\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")); err != nil {
		t.Fatal(err)
	}
	// Guard answers 401 at once, then closes the connection once the
	// bound has passed, though the client never sends the rest.
	conn.SetReadDeadline(time.Now().Add(20 * time.Second)) // a failure's bound, not the test's clock
	got, err := io.ReadAll(conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection of a refused request stayed open (guard answered %q)", got)
	}
	if !strings.HasPrefix(string(got), "HTTP/1.1 401") {
		t.Fatalf("guard answered %q, want 401", got)
	}
}

// Over HTTP, a session whose server could not be started has its
// initialize answered with an error that says why, under its own id.
func TestHTTPInitializeSaysWhyTheServerDidNotStart(t *testing.T) {
	refused := errors.New("the server could not be isolated from guard's files, so guard did not start it: too many open files")
	sc := stdio.Stdio{Argv: []string{"/bin/true"}, Start: func(*exec.Cmd) (*exec.Cmd, error) { return nil, refused }}
	_, url := callerFront(t, Options{Child: sc.Serve, Session: func(Caller) proxy.Options { return proxy.Options{} }})
	status, body, session := postAs(t, context.Background(), url, "alice", initialize, nil)
	id, code, msg := errorOf(t, body)
	if status != http.StatusInternalServerError || session != "" || id != `"init-1"` || code != -32603 ||
		msg != "The server could not be started: "+refused.Error() {
		t.Fatalf("initialize: %d %s (session %q)", status, body, session)
	}
}
