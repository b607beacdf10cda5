package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// serveSlowHTTP runs guard serve with the slow go-sdk server (a stdio
// child) as "slow" and returns its endpoint.
func serveSlowHTTP(t *testing.T) (*env, string) {
	t.Helper()
	e := newEnv(t, "policy: {default: allow}\nservers:\n  slow:\n    command: ["+os.Args[0]+"]\n")
	e.environ = []string{"GUARD_E2E_SERVE=slow"}
	return e, e.serve() + "/mcp/slow"
}

// withoutCancelNotifications is an HTTP client that never sends a
// notifications/cancelled (it answers 202 itself): a 2026-07-28 client
// that cancels only by closing the request's stream, as that revision
// says it does.
func withoutCancelNotifications() *http.Client {
	return &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		if r.Body != nil {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				return nil, err
			}
			if bytes.Contains(b, []byte(`"notifications/cancelled"`)) {
				return &http.Response{StatusCode: http.StatusAccepted, Body: io.NopCloser(strings.NewReader("")), Header: http.Header{}, Request: r}, nil
			}
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		return http.DefaultTransport.RoundTrip(r)
	})}
}

// progressClient is a go-sdk client that signals started when a call's
// progress arrives (the slow server's block tool has begun).
func progressClient() (client *mcp.Client, started <-chan struct{}) {
	ch := make(chan struct{}, 1)
	return mcp.NewClient(&mcp.Implementation{Name: "canceller", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
			select {
			case ch <- struct{}{}:
			default:
			}
		},
	}), ch
}

// blockThenCancel calls the slow server's block tool, cancels the call's
// context once the tool has started, and returns when the call returned.
func blockThenCancel(t *testing.T, ctx context.Context, cs *mcp.ClientSession, started <-chan struct{}) {
	t.Helper()
	cctx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		params := &mcp.CallToolParams{Name: "block", Arguments: map[string]any{}}
		params.SetProgressToken("tok")
		_, err := cs.CallTool(cctx, params)
		errc <- err
	}()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the tool never started")
	}
	stop()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled call returned %v", err)
	}
}

// cancelBlock connects to url over HTTP in the given revision and runs
// blockThenCancel. The session stays open until the test ends (the go-sdk
// client sends its notifications/cancelled after the call returned).
func cancelBlock(t *testing.T, ctx context.Context, url, version string, hc *http.Client) {
	t.Helper()
	client, started := progressClient()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	blockThenCancel(t, ctx, cs, started)
}

// cancelledAndDropped reports whether the audit shows the block call
// cancelled and the server's late answer to it dropped: the server got
// the cancellation (its tool answers only once cancelled).
func cancelledAndDropped(recs []*guard.Record) bool {
	for _, r := range recs {
		if r.Kind == guard.KindEvent && r.Method == "guard/dropped" && strings.Contains(r.Detail, "cancelled") {
			return outcomeOf(recs, "block") == guard.OutcomeCancelled
		}
	}
	return false
}

// sseUntil reads an SSE response until a data line contains want.
func sseUntil(t *testing.T, sc *bufio.Scanner, want string) {
	t.Helper()
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data:") && strings.Contains(sc.Text(), want) {
			return
		}
	}
	t.Fatalf("the stream ended before %s: %v", want, sc.Err())
}

// cancelEndsStream posts a notifications/cancelled (send) and fails
// unless it is accepted and what is left of the cancelled request's stream
// (sc) ends, within its request's context, without an answer.
func cancelEndsStream(t *testing.T, sc *bufio.Scanner, send func() *http.Response) {
	t.Helper()
	r := send()
	r.Body.Close()
	if r.StatusCode != http.StatusAccepted {
		t.Fatalf("notifications/cancelled: HTTP %d", r.StatusCode)
	}
	var rest bytes.Buffer
	for sc.Scan() {
		rest.WriteString(sc.Text() + "\n")
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("the cancelled request's stream did not end: %v", err)
	}
	if bytes.Contains(rest.Bytes(), []byte(`"result"`)) {
		t.Fatalf("a cancelled request was answered: %s", rest.Bytes())
	}
}

// Before 2026-07-28, a client cancels a call over HTTP with
// notifications/cancelled in a POST of its own: the call is recorded
// cancelled, the server is told, and the call's stream ends (no answer
// will come), while the session goes on.
func TestHTTPCancelledCallEndsItsStream(t *testing.T) {
	e, url := serveSlowHTTP(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A go-sdk client sends notifications/cancelled when its call's
	// context ends.
	cancelBlock(t, ctx, url, "2025-11-25", nil)
	e.waitRecords(ctx, "the call cancelled, its late answer dropped", cancelledAndDropped, nil)

	// The stream of the cancelled request, as a client reads it.
	resp := openPost(t, ctx, url, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	session := resp.Header.Get("Mcp-Session-Id")
	resp.Body.Close()
	openPost(t, ctx, url, session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`).Body.Close()
	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	defer scancel()
	resp = openPost(t, sctx, url, session, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"block","arguments":{},"_meta":{"progressToken":"p2"}}}`)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sseUntil(t, sc, "notifications/progress")
	cancelEndsStream(t, sc, func() *http.Response {
		return openPost(t, ctx, url, session, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"changed my mind"}}`)
	})
	r := openPost(t, ctx, url, session, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"quick","arguments":{}}}`)
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if !strings.Contains(string(b), `"quick"`) {
		t.Fatalf("after a cancellation: %s", b)
	}
}

// On 2026-07-28 closing a request's stream is the cancellation: a go-sdk
// client that only closes it (no notifications/cancelled) has its call
// recorded cancelled and the server told; a notifications/cancelled that
// names the client's own id (guard made it unique) ends that call's
// stream too.
func TestHTTPClosingTheStreamCancelsOn20260728(t *testing.T) {
	e, url := serveSlowHTTP(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cancelBlock(t, ctx, url, "2026-07-28", withoutCancelNotifications())
	e.waitRecords(ctx, "the call cancelled, its late answer dropped", cancelledAndDropped, nil)

	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	defer scancel()
	post := func(ctx context.Context, method, name, body string) *http.Response {
		t.Helper()
		h := http.Header{"Mcp-Protocol-Version": {"2026-07-28"}}
		if method != "" {
			h.Set("Mcp-Method", method)
		}
		if name != "" {
			h.Set("Mcp-Name", name)
		}
		return openPostWith(t, ctx, url, h, body)
	}
	const meta = `"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"}`
	resp := post(sctx, "tools/call", "block", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"block","arguments":{},"_meta":{"progressToken":"p5",`+meta+`}}}`)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sseUntil(t, sc, "notifications/progress")
	cancelEndsStream(t, sc, func() *http.Response {
		return post(ctx, "", "", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}`)
	})
	e.waitRecords(ctx, "both calls cancelled", func(recs []*guard.Record) bool {
		n := 0
		for _, r := range recs {
			if r.Kind == guard.KindOutcome && r.Tool == "block" && r.Outcome == guard.OutcomeCancelled {
				n++
			}
		}
		return n == 2
	}, nil)
}

// On 2026-07-28 a held call whose client closes its stream is withdrawn:
// nobody is asked any more, and it is recorded cancelled.
func TestHTTPHeldCallWithdrawnWhenItsStreamClosesOn20260728(t *testing.T) {
	e, url := serveExample(t, "approval: {wait: 30s}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "http", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: withoutCancelNotifications()}, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	cctx, hangUp := context.WithCancel(ctx)
	got := goCall(func() (*mcp.CallToolResult, error) {
		return cs.CallTool(cctx, &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"title": "welcome"}})
	})
	e.pendingFor(ctx, "delete_note")
	hangUp()
	if res := <-got; !errors.Is(res.err, context.Canceled) {
		t.Fatalf("the cancelled call returned %v, %v", res.r, res.err)
	}
	e.outcomeFor(ctx, "delete_note", guard.OutcomeCancelled)
	if p := e.pendingApproval("delete_note"); p != nil {
		t.Fatalf("the hold outlived its cancelled call: %+v", p)
	}
}

// On 2026-07-28 guard passes a cancellation on to an HTTP upstream of that
// revision as it expects one: the upstream request's stream is closed (a
// go-sdk server then cancels the tool's context), and no
// notifications/cancelled is sent.
func TestHTTPUpstreamOn20260728IsCancelledByClosingItsStream(t *testing.T) {
	cancelled := make(chan struct{})
	s := mcp.NewServer(&mcp.Implementation{Name: "slow-http", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "block", InputSchema: map[string]any{"type": "object"}, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if tok := req.Params.GetProgressToken(); tok != nil {
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1, Message: "started"})
			}
			<-ctx.Done()
			close(cancelled)
			return nil, ctx.Err()
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true, PropagateRequestCancellation: true})
	notified := make(chan string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if bytes.Contains(b, []byte(`"notifications/cancelled"`)) {
			select {
			case notified <- string(b):
			default:
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(up.Close) // after guard serve has stopped (cleanups run last first)
	e := newEnv(t, "policy: {default: allow}\nservers:\n  up:\n    url: "+up.URL+"\n")
	url := e.serve() + "/mcp/up"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cancelBlock(t, ctx, url, "2026-07-28", withoutCancelNotifications())
	select {
	case <-cancelled:
	case <-ctx.Done():
		out, _ := e.guard("audit", "query", "--format", "jsonl")
		t.Fatalf("the upstream tool was never cancelled; the audit says:\n%s", out)
	}
	e.outcomeFor(ctx, "block", guard.OutcomeCancelled)
	select {
	case b := <-notified:
		t.Fatalf("the 2026-07-28 upstream was sent %s", b)
	default:
	}
}
