package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/exampleserver"
)

// A listen is served by guard's when its notifications name list changes
// and resources only, at least one of them asked for.
func TestHubRequest(t *testing.T) {
	for _, tc := range []struct {
		params string
		kinds  []string
		uris   []string
		ok     bool
	}{
		{`{"notifications":{"toolsListChanged":true}}`, []string{"toolsListChanged"}, nil, true},
		{`{"notifications":{"promptsListChanged":true,"resourcesListChanged":false}}`, []string{"promptsListChanged"}, nil, true},
		{`{"notifications":{"toolsListChanged":true,"resourceSubscriptions":["file:///a","file:///b","file:///a"]}}`, []string{"toolsListChanged"}, []string{"file:///a", "file:///b"}, true},
		{`{"notifications":{"resourceSubscriptions":["file:///a"]}}`, nil, []string{"file:///a"}, true},
		{`{"notifications":{"resourceSubscriptions":[]}}`, nil, nil, false},
		{`{"notifications":{"resourceSubscriptions":[""]}}`, nil, nil, false},
		{`{"notifications":{"resourceSubscriptions":"file:///a"}}`, nil, nil, false},
		{`{"notifications":{"resourceSubscriptions":[1]}}`, nil, nil, false},
		{`{"notifications":{"toolsListChanged":true,"somethingNew":true}}`, nil, nil, false},
		{`{"notifications":{"toolsListChanged":false}}`, nil, nil, false},
		{`{"notifications":{"toolsListChanged":"yes"}}`, nil, nil, false},
		{`{"notifications":{}}`, nil, nil, false},
		{`{}`, nil, nil, false},
	} {
		kinds, uris, ok := hubRequest([]byte(tc.params))
		want := map[string]bool{}
		for _, k := range tc.kinds {
			want[k] = true
		}
		if ok != tc.ok || ok && (!maps.Equal(kinds, want) || !slices.Equal(uris, tc.uris)) {
			t.Errorf("%s: %v %v %v, want %v %v %v", tc.params, kinds, uris, ok, tc.kinds, tc.uris, tc.ok)
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
	return listenServerOf(exampleserver.New(nil), refuse)
}

// newResourceServer is a server whose resources test://a and test://b
// may be subscribed to.
func newResourceServer() *listenServer {
	ok := func(context.Context, *mcp.SubscribeRequest) error { return nil }
	srv := mcp.NewServer(&mcp.Implementation{Name: "resources", Version: "1"}, &mcp.ServerOptions{
		SubscribeHandler:   ok,
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
	})
	for _, uri := range []string{"test://a", "test://b"} {
		srv.AddResource(&mcp.Resource{URI: uri, Name: uri}, func(_ context.Context, r *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: r.Params.URI, Text: "x"}}}, nil
		})
	}
	return listenServerOf(srv, nil)
}

func listenServerOf(srv *mcp.Server, refuse func(int) bool) *listenServer {
	ls := &listenServer{srv: srv, seen: make(chan string, 100), quit: make(chan struct{}), refuse: refuse}
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

// When the server refuses guard's listen, for list changes or for a
// resource, the client's goes to the server as it is, and the server
// acknowledges it.
func TestASharedListenGoesToTheServerWhenItRefusesGuards(t *testing.T) {
	for _, line := range []string{listenLine("a"), resourceListenLine("a", []string{"test://a"})} {
		ls := newResourceServer()
		ls.refuse = func(n int) bool { return n == 1 }
		h := newHarness(t, harnessOpts{raw: true, share: true, config: "policy:\n  default: allow\n", server: ls.run})
		h.send(line)
		if m := h.next(); m["method"] != "notifications/subscriptions/acknowledged" || subscription(m) != "a" {
			t.Fatalf("%s: %v", line, m)
		}
		if n := ls.listens(); n != 2 {
			t.Fatalf("%s: the server received %d listens, want guard's, then the client's", line, n)
		}
	}
}

// A listen that would take guard past the resources it listens to at once
// on a connection goes to the server as it is.
func TestASharedListenPastTheResourcesBoundGoesToTheServer(t *testing.T) {
	ls := newResourceServer()
	h := newHarness(t, harnessOpts{raw: true, share: true, quiet: true, config: "policy:\n  default: allow\n", server: ls.run})
	uris := make([]string, maxHubResources+1)
	for i := range uris {
		uris[i] = fmt.Sprintf("test://%d", i)
	}
	h.send(resourceListenLine("a", uris))
	if n := h.acknowledged("a"); len(n["resourceSubscriptions"].([]any)) != len(uris) {
		t.Fatalf("a was agreed %d resources, want %d", len(n["resourceSubscriptions"].([]any)), len(uris))
	}
	if n := ls.listens(); n != 1 {
		t.Fatalf("the server received %d listens, want the client's only", n)
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

// resourceListenLine is a client listen for the resources named, and the
// list changes named, as a raw 2026-07-28 client sends it.
func resourceListenLine(id string, uris []string, kinds ...string) string {
	n := map[string]any{}
	if uris != nil {
		n["resourceSubscriptions"] = uris
	}
	for _, k := range kinds {
		n[k] = true
	}
	b, _ := json.Marshal(n)
	return `{"jsonrpc":"2.0","id":"` + id + `","method":"subscriptions/listen","params":{` + modernMeta + `,"notifications":` + string(b) + `}}`
}

// acknowledged reads a listen's acknowledgement and returns what it agreed to.
func (h *harness) acknowledged(id string) map[string]any {
	h.t.Helper()
	m := h.next()
	if m["method"] != "notifications/subscriptions/acknowledged" || subscription(m) != id {
		h.t.Fatalf("listen %s: %v, not its acknowledgement", id, m)
	}
	n, _ := m["params"].(map[string]any)["notifications"].(map[string]any)
	return n
}

// updated makes the server tell of uri's change, and returns the listens
// that heard it once each of want did.
func (h *harness) updated(ls *listenServer, uri string, want ...string) map[any]bool {
	h.t.Helper()
	if err := ls.srv.ResourceUpdated(context.Background(), &mcp.ResourceUpdatedNotificationParams{URI: uri}); err != nil {
		h.t.Fatal(err)
	}
	heard := map[any]bool{}
	for !func() bool {
		for _, id := range want {
			if !heard[id] {
				return false
			}
		}
		return true
	}() {
		m := h.next()
		if m["method"] != "notifications/resources/updated" {
			h.t.Fatalf("%v, while waiting for %s's update", m, uri)
		}
		if p, _ := m["params"].(map[string]any); p["uri"] != uri {
			h.t.Fatalf("%v, while waiting for %s's update", m, uri)
		}
		if heard[subscription(m)] {
			h.t.Fatalf("listen %v heard %s's update twice", subscription(m), uri)
		}
		heard[subscription(m)] = true
	}
	return heard
}

// listensCancelled waits until n client listens are recorded cancelled,
// and fails the test if they are not after a long while.
func (h *harness) listensCancelled(n int) {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		cancelled := 0
		for _, c := range h.calls() {
			if c.Method == "subscriptions/listen" && c.Outcome == guard.OutcomeCancelled {
				cancelled++
			}
		}
		if cancelled == n {
			return
		}
		if cancelled > n || time.Now().After(deadline) {
			h.t.Fatalf("%d listens recorded cancelled, want %d", cancelled, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// On a shared connection two client listens subscribed to one resource
// both hear of its change, each under its own id: guard holds one listen
// of its own for each resource (the go-sdk server keeps one subscription
// per resource per connection, so the second client's would replace the
// first's). One that ends leaves the other subscribed, and a resource
// no client listens to any more can be subscribed to again.
func TestSharedResourceSubscriptionsEachHearTheirUpdates(t *testing.T) {
	ls := newResourceServer()
	h := newHarness(t, harnessOpts{raw: true, share: true, config: "policy:\n  default: allow\n", server: ls.run})
	h.send(resourceListenLine("a", []string{"test://a"}))
	if n := h.acknowledged("a"); fmt.Sprint(n) != "map[resourceSubscriptions:[test://a]]" {
		t.Fatalf("a was agreed %v", n)
	}
	h.send(resourceListenLine("b", []string{"test://a", "test://b"}, "resourcesListChanged"))
	if n := h.acknowledged("b"); fmt.Sprint(n) != "map[resourceSubscriptions:[test://a test://b] resourcesListChanged:true]" {
		t.Fatalf("b was agreed %v", n)
	}
	if n := ls.listens(); n != 3 {
		t.Fatalf("the server received %d listens, want guard's three (list changes, test://a, test://b)", n)
	}
	h.updated(ls, "test://a", "a", "b")
	if heard := h.updated(ls, "test://b", "b"); heard["a"] {
		t.Fatalf("a heard of test://b: %v", heard)
	}

	// a ends: once guard has recorded it so, b still hears of test://a.
	h.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"a"}}`)
	h.listensCancelled(1)
	h.updated(ls, "test://a", "b")

	// b ends: guard's listens for the resources are cancelled; a new
	// client listen to test://a is served by a new one of guard's, sent
	// once the server ended the old.
	h.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"b"}}`)
	h.send(resourceListenLine("c", []string{"test://a"}))
	if n := h.acknowledged("c"); fmt.Sprint(n) != "map[resourceSubscriptions:[test://a]]" {
		t.Fatalf("c was agreed %v", n)
	}
	h.updated(ls, "test://a", "c")
	if n := ls.listens(); n != 1 {
		t.Fatalf("the server received %d more listens, want guard's new one for test://a", n)
	}
	h.listensCancelled(2)
}

// A listen the server agrees nothing of is acknowledged so and answered
// at once, as the server would: here a subscription to a server that
// offers none.
func TestASharedListenAgreedNothingEndsAtOnce(t *testing.T) {
	ls := newListenServer(nil)
	h := newHarness(t, harnessOpts{raw: true, share: true, config: "policy:\n  default: allow\n", server: ls.run})
	h.send(resourceListenLine("a", []string{"test://a"}))
	if n := h.acknowledged("a"); len(n) != 0 {
		t.Fatalf("a was agreed %v", n)
	}
	m := h.next()
	if m["id"] != "a" || m["result"] == nil || subscription(m) != "a" {
		t.Fatalf("got %v, want a's result", m)
	}
}
