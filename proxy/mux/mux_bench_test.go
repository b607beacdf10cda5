package mux

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/approvals"
	"github.com/guard-mcp/guard/config"
	"github.com/guard-mcp/guard/exampleserver"
	"github.com/guard-mcp/guard/policy"
	"github.com/guard-mcp/guard/proxy"
	"github.com/guard-mcp/guard/store"
	"github.com/guard-mcp/guard/wire"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// memberOptions are the options of a member's relay session in these
// benchmarks: server name, policy "default: allow" over a database of its
// own in b's temporary directory, nothing logged.
func memberOptions(b *testing.B, ctx context.Context, name string) proxy.Options {
	db, err := store.Open(ctx, store.Options{Path: filepath.Join(b.TempDir(), "guard.db"), Durability: "normal"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	cfg, err := config.Parse([]byte("policy:\n  default: allow\n"), "test.yaml")
	if err != nil {
		b.Fatal(err)
	}
	engine, err := config.NewEngine("", cfg, policy.EngineOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return proxy.Options{
		Server: name, Recorder: db, Catalog: db.Catalog(), Decider: engine,
		Holds:    approvals.New(db.Holds(), approvals.Options{Timeout: time.Minute, ProgressEvery: 50 * time.Millisecond}),
		Redactor: cfg.Redactor(), MaxMessage: 1 << 20, ProgressEvery: 50 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler), Contracts: policy.NewContracts(false),
		Listing:    func() string { return engine.Config().Listing(name) },
		HideDenied: func() bool { return engine.Config().Policy.HideDenied },
	}
}

// nopRecorder commits nothing: the aggregate's cost without the audit log.
type nopRecorder struct{}

func (nopRecorder) AppendAsync(...*guard.Record) <-chan error {
	ch := make(chan error, 1)
	ch <- nil
	return ch
}

// sessionMember is a member server reached through a relay session of its
// own (policy, a real store), as guard serve's aggregate has them: the
// example server, in-process, over pipes.
func sessionMember(b *testing.B, name string, rec proxy.Recorder) Member {
	return Member{Name: name, Run: func(ctx context.Context, conn proxy.Conn) error {
		opts := memberOptions(b, ctx, name)
		if rec != nil {
			opts.Recorder = rec
		}
		g2sR, g2sW := io.Pipe()
		s2gR, s2gW := io.Pipe()
		go func() {
			_ = exampleserver.Run(ctx, g2sR, s2gW)
			s2gW.Close()
		}()
		return proxy.Run(ctx, conn, proxy.NewStreamConn(s2gR, g2sW, opts.MaxMessage), proxy.NewSession(ctx, opts))
	}}
}

// BenchmarkAggregateCall measures one allowed tools/call through the
// aggregate endpoint to the member its name routes to, through that
// member's relay session (both audit records durable), with a go-sdk
// client: BenchmarkRelayCall plus the aggregate.
func BenchmarkAggregateCall(b *testing.B) { benchAggregate(b, nil) }

// BenchmarkAggregateCallWithoutAudit is the aggregate's cost besides the
// audit log's: BenchmarkRelayCallWithoutAudit plus the aggregate.
func BenchmarkAggregateCallWithoutAudit(b *testing.B) { benchAggregate(b, nopRecorder{}) }

func benchAggregate(b *testing.B, rec proxy.Recorder) {
	cr, cw := io.Pipe()
	ar, aw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = Run(context.Background(), Options{Members: []Member{sessionMember(b, "notes", rec), sessionMember(b, "more", rec)}}, proxy.NewStreamConn(cr, aw, 0))
		aw.Close()
	}()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).
		Connect(context.Background(), &mcp.IOTransport{Reader: ar, Writer: cw}, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	args := &mcp.CallToolParams{Name: "notes__echo", Arguments: map[string]any{"text": "hello"}}
	if _, err := cs.CallTool(ctx, args); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := cs.CallTool(ctx, args); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	cs.Close()
	cw.Close()
	<-done
}

// rawMember is a member through a relay session of its own (policy, no
// audit log) to a server that answers at once, without go-sdk: what
// remains is guard's work and its hand-offs.
func rawMember(b *testing.B, name string) Member {
	return Member{Name: name, Run: func(ctx context.Context, conn proxy.Conn) error {
		opts := memberOptions(b, ctx, name)
		opts.Recorder, opts.Catalog = nopRecorder{}, nil
		g2sR, g2sW := io.Pipe()
		s2gR, s2gW := io.Pipe()
		go answerAtOnce(g2sR, s2gW)
		return proxy.Run(ctx, conn, proxy.NewStreamConn(s2gR, g2sW, opts.MaxMessage), proxy.NewSession(ctx, opts))
	}}
}

// answerAtOnce is a server that answers each request with a fixed result
// for its method, until its input ends.
func answerAtOnce(in io.Reader, out io.WriteCloser) {
	defer out.Close()
	results := map[string]string{
		"initialize": `{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"raw","version":"1"}}`,
		"tools/list": `{"tools":[{"name":"echo","description":"Returns the text it is given.","inputSchema":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]},"annotations":{"readOnlyHint":true}}]}`,
		"tools/call": `{"content":[{"type":"text","text":"hello"}]}`,
	}
	r := wire.NewReader(in, 1<<20)
	for {
		line, err := r.Next()
		if err != nil {
			return
		}
		m, err := wire.Parse(line)
		if err != nil || m.Kind != wire.KindRequest {
			continue
		}
		res, ok := results[m.Method]
		if !ok {
			res = "{}"
		}
		b, _ := wire.Response(m.ID, json.RawMessage(res))
		if _, err := out.Write(append(b, '\n')); err != nil {
			return
		}
	}
}

// BenchmarkAggregateRawCall measures guard's work for one allowed
// tools/call through the aggregate and its member's relay session, with
// raw JSON lines on both ends and no audit log.
func BenchmarkAggregateRawCall(b *testing.B) {
	cr, cw := io.Pipe()
	ar, aw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = Run(context.Background(), Options{Members: []Member{rawMember(b, "notes"), rawMember(b, "more")}}, proxy.NewStreamConn(cr, aw, 0))
		aw.Close()
	}()
	answers := bufio.NewScanner(ar)
	ask := func(line string) string {
		if _, err := io.WriteString(cw, line+"\n"); err != nil {
			b.Fatal(err)
		}
		if !answers.Scan() {
			b.Fatal("no answer")
		}
		return answers.Text()
	}
	ask(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	io.WriteString(cw, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"notes__echo","arguments":{"text":"hello"}}}`
	if got := ask(call); !strings.Contains(got, `"hello"`) {
		b.Fatalf("first call: %s", got)
	}
	b.ReportAllocs()
	for b.Loop() {
		ask(call)
	}
	b.StopTimer()
	cw.Close()
	<-done
}
