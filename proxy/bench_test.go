package proxy

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/exampleserver"
	"github.com/guard-mcp/guard/policy"
	"github.com/guard-mcp/guard/telemetry"
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

// BenchmarkSessionToolCall measures the relay's own work for one allowed
// tools/call and its result, without a peer, a pipe or the audit log: the
// client's request and the server's answer (the lines a go-sdk client on
// 2026-07-28 and the example server exchange) are read from in-memory
// streams, decided, recorded to nowhere and written to io.Discard, all on
// the benchmark's goroutine.
func BenchmarkSessionToolCall(b *testing.B) { benchSessionToolCall(b, nil) }

// BenchmarkSessionToolCallTraced is BenchmarkSessionToolCall with every
// call traced (five spans) by guard's tracer, its spans sent to a receiver
// in the process that discards them. cpu-ns/op is the process's CPU per
// call, the tracer's goroutine (batching, encoding, sending) and the
// receiver's included; the loop lets the queue drain when it fills, so
// that no span is dropped (ns/op counts those pauses).
func BenchmarkSessionToolCallTraced(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) }))
	defer srv.Close()
	tr, err := telemetry.New(telemetry.Config{OTLP: srv.URL, Sample: 1}, telemetry.Options{Getenv: func(string) string { return "" }, BatchTimeout: 10 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	benchSessionToolCall(b, tr)
	if st := tr.Stats(); st.Dropped > 0 || st.Failed > 0 || st.Exported != st.Ended {
		b.Errorf("spans %+v", st)
	}
}

// benchSessionToolCall is BenchmarkSessionToolCall, traced by tr when not
// nil.
func benchSessionToolCall(b *testing.B, tr *telemetry.Tracing) {
	opts, _, _ := testOptions(b, context.Background(), "policy:\n  default: allow\n", time.Second)
	opts.Logger = slog.New(slog.DiscardHandler)
	opts.Recorder, opts.Catalog = nopRecorder{}, nil
	if tr != nil {
		opts.Tracer = tr.Tracer()
	}
	redactor := opts.Redactor.(*policy.Redactor).WithOwnSecrets([]string{"guard-own-secret-value"})
	opts.Redactor, opts.MaskResults = redactor, redactor.MaskOwnSecrets
	s := NewSession(context.Background(), opts)
	s.toServer.w = NewStreamConn(nil, io.Discard, 0)
	s.toClient.w = NewStreamConn(nil, io.Discard, 0)
	const meta = `"_meta":{"io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":true}},"io.modelcontextprotocol/clientInfo":{"name":"test-client","version":"1.2"},"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`
	relay := func(client, server *loopConn) {
		msg, err := client.Read(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		s.clientMessage(msg, nil)
		msg, err = server.Read(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		s.fromServer(msg, nil)
	}
	relay(newLoopConn(`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{`+meta+`}}`),
		newLoopConn(`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"description":"Returns the text it is given.","inputSchema":{"type":"object","properties":{"text":{"type":"string","description":"the text to send back"},"times":{"type":"integer","description":"how many times to repeat it (default once)"}},"required":["text"],"additionalProperties":false},"name":"echo"}]}}`))
	client := newLoopConn(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{` + meta + `,"name":"echo","arguments":{"text":"hello"}}}`)
	server := newLoopConn(`{"jsonrpc":"2.0","id":2,"result":{"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"guard-example","version":"1.0.0"}},"content":[{"type":"text","text":"hello"}],"resultType":"complete"}}`)
	b.ReportAllocs()
	cpu := processCPU()
	for b.Loop() {
		relay(client, server)
		for tr != nil && queued(tr.Stats()) > 1500 {
			time.Sleep(time.Millisecond)
		}
	}
	if tr != nil {
		if err := tr.Shutdown(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	if cpu > 0 {
		b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkSessionNotifications measures what the relay does for the
// messages it passes on without deciding: a client's progress notification
// and a server's log message, read, classified and written on.
func BenchmarkSessionNotifications(b *testing.B) {
	opts, _, _ := testOptions(b, context.Background(), "policy:\n  default: allow\n", time.Second)
	opts.Logger = slog.New(slog.DiscardHandler)
	opts.Recorder, opts.Catalog = nopRecorder{}, nil
	s := NewSession(context.Background(), opts)
	s.toServer.w = NewStreamConn(nil, io.Discard, 0)
	s.toClient.w = NewStreamConn(nil, io.Discard, 0)
	client := newLoopConn(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t-1","progress":3,"total":10}}`)
	server := newLoopConn(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","logger":"files","data":{"event":"read","path":"/home/me/projects/notes/todo.md","bytes":2048}}}`)
	b.ReportAllocs()
	for b.Loop() {
		msg, err := client.Read(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		s.clientMessage(msg, nil)
		if msg, err = server.Read(context.Background()); err != nil {
			b.Fatal(err)
		}
		s.fromServer(msg, nil)
	}
}

// queued are the spans waiting to be sent.
func queued(s telemetry.Stats) int64 { return s.Ended - s.Exported - s.Failed - s.Dropped }

// loopConn reads the same line over and over, as a Conn over a stream.
type loopConn struct{ Conn }

func newLoopConn(line string) *loopConn {
	return &loopConn{NewStreamConn(&loopReader{line: []byte(line + "\n")}, io.Discard, 0)}
}

type loopReader struct {
	line []byte
	at   int
}

func (r *loopReader) Read(p []byte) (int, error) {
	n := copy(p, r.line[r.at:])
	r.at = (r.at + n) % len(r.line)
	return n, nil
}
