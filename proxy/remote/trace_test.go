package remote

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/guard-mcp/guard/internal/relaytest"
	"github.com/guard-mcp/guard/proxy"
)

// With TraceHeaders, a request's trace context in _meta goes as the W3C
// headers too; without it, no header is added.
func TestTraceHeadersUpstream(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, on := range []bool{true, false} {
		got := make(chan string, 1)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if r.Method != http.MethodPost || !strings.Contains(string(body), `"initialize"`) {
				w.WriteHeader(http.StatusAccepted)
				return
			}
			got <- r.Header.Get("Traceparent") + " " + r.Header.Get("Tracestate")
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"s","version":"1"}}}`)
		}))
		cr, cw := io.Pipe()
		ar, aw := io.Pipe()
		opts, _, _ := relaytest.Options(t, context.Background(), "policy: {default: allow}\n", time.Second)
		done := make(chan error, 1)
		go func() {
			done <- Run(context.Background(), opts, Remote{URL: srv.URL, TraceHeaders: on}, proxy.NewStreamConn(cr, aw, 0))
			aw.Close()
		}()
		go io.Copy(io.Discard, ar)
		io.WriteString(cw, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"_meta":{"traceparent":"`+tp+`","tracestate":"k=v"},"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`+"\n")
		want := " "
		if on {
			want = tp + " k=v"
		}
		if g := <-got; g != want {
			t.Errorf("TraceHeaders %v: the server got headers %q, want %q", on, g, want)
		}
		cw.Close()
		<-done
		srv.Close()
	}
}
