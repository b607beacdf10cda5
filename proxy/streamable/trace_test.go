package streamable

import (
	"context"
	"testing"

	"github.com/guard-mcp/guard/proxy"
	"github.com/guard-mcp/guard/wire"
)

// metaRun is a session (Options.Run) that answers each request and sends
// the traceparent of its _meta on got.
func metaRun(got chan<- string) func(ctx context.Context, c Caller, conn proxy.Conn) error {
	return readingRun("", func(m wire.Message) {
		tp, _ := proxy.TraceMeta(m.Params)
		got <- tp
	})
}

// With TraceContext (guard traces), a request's traceparent header is put
// in its _meta, unless the _meta carries one already; without it, the
// request reaches the relay as the client sent it.
func TestTraceHeadersReachTheRelay(t *testing.T) {
	const header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	const own = "00-11111111111111111111111111111111-2222222222222222-01"
	withOwn := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"_meta":{"traceparent":"` + own + `"},"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	for _, c := range []struct {
		on         bool
		body, want string
	}{
		{true, initialize, header},
		{true, withOwn, own},
		{false, initialize, ""},
	} {
		got := make(chan string, 1)
		_, url := callerFront(t, Options{Run: metaRun(got), TraceContext: c.on})
		postAs(t, context.Background(), url, "alice", c.body, map[string]string{"Traceparent": header})
		if g := <-got; g != c.want {
			t.Errorf("TraceContext %v: the relay read traceparent %q, want %q", c.on, g, c.want)
		}
	}
}
