package remote

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/exampleserver"
	"github.com/guard-mcp/guard/internal/relaytest"
	"github.com/guard-mcp/guard/proxy"
	"github.com/guard-mcp/guard/proxy/streamable"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkHTTPRemoteCall measures one allowed tools/call from a go-sdk
// client over Streamable HTTP through guard's endpoint to the example
// server, itself reached over Streamable HTTP: guard's HTTP front and its
// upstream client, on loopback, without the audit log.
func BenchmarkHTTPRemoteCall(b *testing.B) {
	for _, n := range []int{1, 16} {
		b.Run(map[int]string{1: "clients=1", 16: "clients=16"}[n], func(b *testing.B) {
			benchHTTPCalls(b, n)
		})
	}
}

// nopRecorder commits nothing: the relay's cost without the audit log.
type nopRecorder struct{}

func (nopRecorder) AppendAsync(...*guard.Record) <-chan error {
	ch := make(chan error, 1)
	ch <- nil
	return ch
}

func benchHTTPCalls(b *testing.B, clients int) {
	ctx := context.Background()
	srv := exampleserver.New(nil)
	up := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	defer up.Close()
	opts, _, _ := relaytest.Options(b, ctx, "policy:\n  default: allow\n", time.Second)
	opts.Logger = slog.New(slog.DiscardHandler)
	opts.Recorder = nopRecorder{}
	front := httptest.NewUnstartedServer(nil)
	rm := Remote{URL: up.URL, Client: NewClient()}
	h := streamable.NewServer(streamable.Options{Name: "notes", AllowedHosts: []string{front.Listener.Addr().String()},
		Remote: func(ctx context.Context, opts proxy.Options, _ streamable.Caller, conn proxy.Conn) error {
			return Run(ctx, opts, rm, conn)
		},
		Session: func(streamable.Caller) proxy.Options { return opts }})
	front.Config.Handler = h
	front.Start()
	defer front.Close()
	defer h.Close()
	sessions := make([]*mcp.ClientSession, clients)
	for i := range sessions {
		hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
		defer hc.CloseIdleConnections()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).
			Connect(ctx, &mcp.StreamableClientTransport{Endpoint: front.URL, HTTPClient: hc}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			b.Fatal(err)
		}
		defer cs.Close()
		sessions[i] = cs
	}
	args := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hello"}}
	call := func(cs *mcp.ClientSession) {
		res, err := cs.CallTool(ctx, args)
		if err != nil {
			b.Error(err)
			return
		}
		if res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "hello") {
			b.Errorf("echo: %+v", res)
		}
	}
	for _, cs := range sessions {
		call(cs)
	}
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for i, cs := range sessions {
		calls := b.N / clients
		if i < b.N%clients {
			calls++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range calls {
				call(cs)
			}
		}()
	}
	wg.Wait()
}
