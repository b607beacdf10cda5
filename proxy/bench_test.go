package proxy

import (
	"context"
	"testing"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/exampleserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkRelayCall measures one allowed tools/call through an in-process
// session (policy, both audit records made durable with durability normal)
// to the example server, with a go-sdk client.
func BenchmarkRelayCall(b *testing.B) {
	benchCalls(b, newHarness(b, harnessOpts{config: "policy:\n  default: allow\n", quiet: true}).client(nil, ""))
}

// nopRecorder commits nothing: the relay's cost without the audit log.
type nopRecorder struct{}

func (nopRecorder) AppendAsync(...*guard.Record) <-chan error {
	ch := make(chan error, 1)
	ch <- nil
	return ch
}

func BenchmarkRelayCallWithoutAudit(b *testing.B) {
	benchCalls(b, newHarness(b, harnessOpts{config: "policy:\n  default: allow\n", quiet: true, recorder: nopRecorder{}}).client(nil, ""))
}

// benchCalls makes echo calls on a session, after one that fills caches.
func benchCalls(b *testing.B, cs *mcp.ClientSession) {
	defer cs.Close()
	ctx := context.Background()
	args := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hello"}}
	if _, err := cs.CallTool(ctx, args); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := cs.CallTool(ctx, args); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDirectCall is the same client and server without guard.
func BenchmarkDirectCall(b *testing.B) {
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	go exampleserver.New(nil).Run(ctx, st)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		b.Fatal(err)
	}
	benchCalls(b, cs)
}
