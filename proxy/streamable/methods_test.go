package streamable

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/internal/storetest"
	"github.com/guard-mcp/guard/proxy"
)

// Over HTTP a tools/call without an id is answered 202, as any
// notification, and never reaches the server (a go-sdk server over
// Streamable HTTP, whose requests are watched on their way).
func TestHTTPDropsNotificationsWithRequestMethods(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	f := newHTTPFront(t, func(o *Options, upstream string) {
		target, err := url.Parse(upstream)
		if err != nil {
			t.Fatal(err)
		}
		rp := httputil.NewSingleHostReverseProxy(target)
		watch := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			bodies = append(bodies, string(b))
			mu.Unlock()
			r.Body = io.NopCloser(strings.NewReader(string(b)))
			rp.ServeHTTP(w, r)
		}))
		t.Cleanup(watch.Close)
		o.Remote = remoteAt(watch.URL)
	})
	session := f.start(t)
	resp := f.post(t, context.Background(), session, `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"delete_note","arguments":{"title":"welcome"}}}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d, want 202", resp.StatusCode)
	}
	storetest.WaitRecord(t, f.db.Reader(), func(r *guard.Record) bool {
		return r.Method == "guard/dropped" && strings.Contains(r.Detail, `"method":"tools/call"`)
	})
	resp = f.post(t, context.Background(), session, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	for _, b := range bodies {
		if strings.Contains(b, "tools/call") {
			t.Fatalf("the server read %s", b)
		}
	}
	if !strings.Contains(strings.Join(bodies, "\n"), `"ping"`) {
		t.Fatalf("the watch saw nothing: %q", bodies)
	}
}

// JSON-RPC batches are refused over HTTP as on stdio, except in sessions
// of 2025-03-26, the one revision that allows them; 2025-06-18 accepted
// them over HTTP.
func TestHTTPBatchesOnlyUnder20250326(t *testing.T) {
	f := newHTTPFront(t, nil)
	ctx := context.Background()
	batch := `[{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"in a batch"}}},{"jsonrpc":"2.0","id":3,"method":"ping"}]`
	read := func(resp *http.Response) (int, string) {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	for _, session := range []string{"", f.startAt(t, guard.Rev20250618)} {
		body := batch
		if session == "" {
			body = `[{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}]`
		}
		if status, b := read(f.post(t, ctx, session, body)); status != http.StatusBadRequest || !strings.Contains(b, "-32600") || !strings.Contains(b, proxy.BatchRefused().Text) {
			t.Fatalf("session %q: %d %s", session, status, b)
		}
	}
	session := f.startAt(t, guard.Rev20250326)
	// The answers come as an event stream (the client accepts one).
	status, b := read(f.post(t, ctx, session, batch))
	if status != http.StatusOK || !strings.Contains(b, `"id":2,"result":{"content":[{"type":"text","text":"in a batch"}]}`) || !strings.Contains(b, `"id":3,"result":{}`) {
		t.Fatalf("2025-03-26: %d %s", status, b)
	}
}
