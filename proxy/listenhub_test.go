package proxy

import (
	"context"
	"io"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/exampleserver"
)

// A listen asks for list changes only when its notifications name list
// changes, at least one of them true, and nothing else.
func TestListChangesOnly(t *testing.T) {
	for _, tc := range []struct {
		params string
		want   []string
	}{
		{`{"notifications":{"toolsListChanged":true}}`, []string{"toolsListChanged"}},
		{`{"notifications":{"promptsListChanged":true,"resourcesListChanged":false}}`, []string{"promptsListChanged"}},
		{`{"notifications":{"toolsListChanged":true,"resourceSubscriptions":["file:///a"]}}`, nil},
		{`{"notifications":{"toolsListChanged":true,"somethingNew":true}}`, nil},
		{`{"notifications":{"toolsListChanged":false}}`, nil},
		{`{"notifications":{"toolsListChanged":"yes"}}`, nil},
		{`{"notifications":{}}`, nil},
		{`{}`, nil},
	} {
		got := listChangesOnly([]byte(tc.params))
		want := map[string]bool{}
		for _, k := range tc.want {
			want[k] = true
		}
		if (got == nil) != (tc.want == nil) || got != nil && !maps.Equal(got, want) {
			t.Errorf("%s: %v, want %v", tc.params, got, tc.want)
		}
	}
}

// listenServer is the example server with a hook on the requests it
// receives; it stops when quit is closed.
type listenServer struct {
	srv  *mcp.Server
	seen chan string // the methods it received
	quit chan struct{}
	// refuse says whether the server answers a subscriptions/listen with
	// an error, by its order among them (1 for the first).
	refuse func(n int) bool
}

func newListenServer(refuse func(int) bool) *listenServer {
	ls := &listenServer{srv: exampleserver.New(nil), seen: make(chan string, 100), quit: make(chan struct{}), refuse: refuse}
	var mu sync.Mutex
	listens := 0
	ls.srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			ls.seen <- method
			if method == "subscriptions/listen" {
				mu.Lock()
				listens++
				n := listens
				mu.Unlock()
				if ls.refuse != nil && ls.refuse(n) {
					return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "listens refused here"}
				}
			}
			return next(ctx, method, req)
		}
	})
	return ls
}

func (ls *listenServer) run(ctx context.Context, in io.ReadCloser, out io.WriteCloser) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-ls.quit:
			cancel()
		case <-ctx.Done():
		}
	}()
	_ = ls.srv.Run(ctx, &mcp.IOTransport{Reader: in, Writer: out})
	out.Close()
}

// listens counts the subscriptions/listen the server has received so far.
func (ls *listenServer) listens() int {
	n := 0
	for {
		select {
		case m := <-ls.seen:
			if m == "subscriptions/listen" {
				n++
			}
		default:
			return n
		}
	}
}

const modernMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"}}`

func listenLine(id string) string {
	return `{"jsonrpc":"2.0","id":"` + id + `","method":"subscriptions/listen","params":{` + modernMeta + `,"notifications":{"toolsListChanged":true}}}`
}

// subscription is the subscription id a listen stream's message names.
func subscription(m map[string]any) any {
	params, _ := m["params"].(map[string]any)
	if params == nil {
		params, _ = m["result"].(map[string]any)
	}
	meta, _ := params["_meta"].(map[string]any)
	return meta[MetaSubscription]
}

// addTool changes the server's tool list.
func (ls *listenServer) addTool(name string) {
	ls.srv.AddTool(&mcp.Tool{Name: name, InputSchema: map[string]any{"type": "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{}, nil
	})
}

// On a shared connection two client listens are served by one listen of
// guard's: the server receives one, each client is acknowledged under its
// own id, and each hears the server's tool list change under its own id.
func TestSharedListensAreServedByOneListenOfGuards(t *testing.T) {
	ls := newListenServer(nil)
	h := newHarness(t, harnessOpts{raw: true, share: true, config: "policy:\n  default: allow\n", server: ls.run})
	for _, id := range []string{"a", "b"} {
		h.send(listenLine(id))
		if m := h.next(); m["method"] != "notifications/subscriptions/acknowledged" || subscription(m) != id {
			t.Fatalf("listen %s: %v", id, m)
		}
	}
	if n := ls.listens(); n != 1 {
		t.Fatalf("the server received %d listens, want guard's one", n)
	}
	ls.addTool("added")
	heard := map[any]bool{}
	for len(heard) < 2 {
		m := h.next()
		if m["method"] != "notifications/tools/list_changed" {
			continue // guard's own, once its refresh sees the change
		}
		heard[subscription(m)] = true
	}
	if !heard["a"] || !heard["b"] {
		t.Fatalf("the change reached %v, want a and b", heard)
	}
}

// When the server refuses guard's listen, the client's goes to the server
// as it is, and the server acknowledges it.
func TestASharedListenGoesToTheServerWhenItRefusesGuards(t *testing.T) {
	ls := newListenServer(func(n int) bool { return n == 1 })
	h := newHarness(t, harnessOpts{raw: true, share: true, config: "policy:\n  default: allow\n", server: ls.run})
	h.send(listenLine("a"))
	if m := h.next(); m["method"] != "notifications/subscriptions/acknowledged" || subscription(m) != "a" {
		t.Fatalf("listen a: %v", m)
	}
	if n := ls.listens(); n != 2 {
		t.Fatalf("the server received %d listens, want guard's, then the client's", n)
	}
}

// A listen guard cannot record is refused, and never acknowledged.
func TestASharedListenIsRefusedWhenItCannotBeRecorded(t *testing.T) {
	ls := newListenServer(nil)
	fr := &failingRecorder{}
	h := newHarness(t, harnessOpts{raw: true, share: true, quiet: true, config: "policy:\n  default: allow\n", server: ls.run, recorder: fr})
	fr.Recorder = h.db
	fr.mu.Lock()
	fr.fail = true
	fr.mu.Unlock()
	h.send(listenLine("a"))
	m := h.next()
	e, _ := m["error"].(map[string]any)
	if e == nil || e["message"] != "Refused: the audit log could not be written" || m["id"] != "a" {
		t.Fatalf("got %v", m)
	}
}

// When the server exits, each listen guard served is answered so, and
// recorded upstream_failed.
func TestSharedListensEndWithTheirServer(t *testing.T) {
	ls := newListenServer(nil)
	h := newHarness(t, harnessOpts{raw: true, share: true, quiet: true, config: "policy:\n  default: allow\n", server: ls.run})
	h.send(listenLine("a"))
	if m := h.next(); m["method"] != "notifications/subscriptions/acknowledged" {
		t.Fatalf("listen a: %v", m)
	}
	close(ls.quit)
	m := h.next()
	e, _ := m["error"].(map[string]any)
	if m["id"] != "a" || e == nil || !strings.HasPrefix(e["message"].(string), "The server exited") {
		t.Fatalf("got %v", m)
	}
	<-h.done
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, c := range h.calls() {
			if c.Method == "subscriptions/listen" && c.Outcome == guard.OutcomeUpstreamFailed {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the listen is not recorded upstream_failed: %v", h.calls())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
