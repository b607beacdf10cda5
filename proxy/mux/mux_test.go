package mux

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/guard-mcp/guard/proxy"
	"github.com/guard-mcp/guard/wire"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// overStreams serves conn with a peer that speaks newline-delimited
// JSON-RPC on in and out (a go-sdk server on an IOTransport), until run
// returns; run's out is closed then.
func overStreams(ctx context.Context, conn proxy.Conn, run func(in io.Reader, out io.WriteCloser) error) error {
	toPeerR, toPeerW := io.Pipe()
	fromPeerR, fromPeerW := io.Pipe()
	peer := proxy.NewStreamConn(fromPeerR, toPeerW, 0)
	go func() {
		for {
			m, err := conn.Read(ctx)
			if err != nil && !isMessageError(err) {
				toPeerW.Close()
				return
			}
			if err == nil && peer.Write(ctx, m) == nil {
				_ = peer.(proxy.Flusher).Flush()
			}
		}
	}()
	go func() {
		for {
			m, err := peer.Read(ctx)
			if err != nil && !isMessageError(err) {
				return
			}
			if err == nil {
				_ = conn.Write(ctx, m)
			}
		}
	}()
	err := run(toPeerR, fromPeerW)
	fromPeerW.Close()
	toPeerR.Close()
	return err
}

func isMessageError(err error) bool {
	var bad *proxy.BadMessage
	var tl *wire.TooLongError
	return errors.As(err, &bad) || errors.As(err, &tl)
}

// nopWriteCloser lets a member's output writer be an IOTransport's Writer.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// goServer is a member that runs a go-sdk server in-process: tool "who"
// answers the server's name, "wait" says "started NAME" on cancelled,
// blocks until cancelled and then says NAME, "die" ends the server's session mid-call.
func goServer(name string, cancelled chan<- string) Member {
	return Member{Name: name, Run: func(ctx context.Context, conn proxy.Conn) error {
		return overStreams(ctx, conn, func(in io.Reader, out io.WriteCloser) error { return runGoServer(ctx, name, cancelled, in, out) })
	}}
}

func runGoServer(ctx context.Context, name string, cancelled chan<- string, in io.Reader, out io.WriteCloser) error {
	{
		crash := make(chan struct{})
		s := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"}, nil)
		type none struct{}
		mcp.AddTool(s, &mcp.Tool{Name: "who"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name}}}, nil, nil
		})
		mcp.AddTool(s, &mcp.Tool{Name: "wait"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
			cancelled <- "started " + name
			<-ctx.Done()
			cancelled <- name
			return nil, nil, ctx.Err()
		})
		mcp.AddTool(s, &mcp.Tool{Name: "die"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
			close(crash) // the session ends under the call
			<-ctx.Done()
			return nil, nil, ctx.Err()
		})
		ctx, stop := context.WithCancel(ctx)
		defer stop()
		ran := make(chan error, 1)
		go func() { ran <- s.Run(ctx, &mcp.IOTransport{Reader: io.NopCloser(in), Writer: nopWriteCloser{out}}) }()
		select {
		case err := <-ran:
			return err
		case <-crash:
			return errors.New("crashed")
		}
	}
}

// connectAggregate runs Run over pipes and connects a go-sdk
// client to it.
func connectAggregate(t *testing.T, ag Options) *mcp.ClientSession {
	t.Helper()
	cr, cw := io.Pipe() // client → aggregate
	ar, aw := io.Pipe() // aggregate → client
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = Run(context.Background(), ag, proxy.NewStreamConn(cr, aw, 0))
		aw.Close()
	}()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).
		Connect(context.Background(), &mcp.IOTransport{Reader: ar, Writer: cw}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		cw.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("Run did not return after the client went")
		}
	})
	return cs
}

// A name goes to the server with the longest matching prefix; a
// cancellation reaches the server of the request it names, under the id
// that server knows; a server whose session ends mid-call answers its
// caller with an error, and the other servers go on.
func TestAggregateRoutesCancelsAndSurvivesAServer(t *testing.T) {
	cancelled := make(chan string, 4)
	cs := connectAggregate(t, Options{Members: []Member{goServer("a", cancelled), goServer("a__b", cancelled)}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	if got := strings.Join(names, " "); !strings.Contains(got, "a__who") || !strings.Contains(got, "a__b__who") || len(names) != 6 {
		t.Fatalf("tools: %s", got)
	}
	for name, want := range map[string]string{"a__who": "a", "a__b__who": "a__b"} {
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name})
		if err != nil || r.Content[0].(*mcp.TextContent).Text != want {
			t.Fatalf("%s: %v %+v", name, err, r)
		}
	}

	cctx, ccancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: "a__b__wait"})
		errc <- err
	}()
	if got := <-cancelled; got != "started a__b" {
		t.Fatalf("the call reached %q", got)
	}
	ccancel()
	select {
	case who := <-cancelled:
		if who != "a__b" {
			t.Fatalf("the cancellation reached %s", who)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the cancellation never reached the server")
	}
	<-errc

	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "a__die"})
	if err == nil || !strings.Contains(err.Error(), "session ended before answering") {
		t.Fatalf("a call whose server went: %v", err)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "a__who"}); err == nil || !strings.Contains(err.Error(), "not available") {
		t.Fatalf("a call to a server that is gone: %v", err)
	}
	if r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "a__b__who"}); err != nil || r.Content[0].(*mcp.TextContent).Text != "a__b" {
		t.Fatalf("the other server after one went: %v %+v", err, r)
	}
}

// Capabilities are the union, a flag set when any server sets it; the
// versions of server/discover are those every server supports.
func TestMergeCapsAndVersions(t *testing.T) {
	into := map[string]any{}
	mergeCaps(into, json.RawMessage(`{"tools":{"listChanged":false},"logging":{}}`))
	mergeCaps(into, json.RawMessage(`{"tools":{"listChanged":true},"resources":{"subscribe":true}}`))
	mergeCaps(into, json.RawMessage(`{"tools":{"listChanged":false}}`))
	b, _ := json.Marshal(into)
	if want := `{"logging":{},"resources":{"subscribe":true},"tools":{"listChanged":true}}`; string(b) != want {
		t.Fatalf("merged %s, want %s", b, want)
	}
	got := commonVersions([][]string{{"2026-07-28", "2025-11-25", "2025-06-18"}, {"2025-06-18", "2026-07-28"}, {"2026-07-28", "2025-06-18", "2024-11-05"}})
	if strings.Join(got, ",") != "2026-07-28,2025-06-18" {
		t.Fatalf("common versions: %v", got)
	}
}

// silent is a member that reads what it is sent and never answers.
func silent(name string) Member {
	return Member{Name: name, Run: func(ctx context.Context, conn proxy.Conn) error {
		for {
			if _, err := conn.Read(ctx); err != nil && !isMessageError(err) {
				return err
			}
		}
	}}
}

// rawAggregate runs Run over pipes; ask writes a line and
// returns the next line of the answer.
func rawAggregate(t *testing.T, ag Options) (ask func(string) string, send func(string)) {
	cr, cw := io.Pipe()
	ar, aw := io.Pipe()
	go func() {
		_ = Run(context.Background(), ag, proxy.NewStreamConn(cr, aw, 0))
		aw.Close()
	}()
	t.Cleanup(func() { cw.Close() })
	lines := bufio.NewScanner(ar)
	send = func(line string) { io.WriteString(cw, line+"\n") }
	ask = func(line string) string {
		t.Helper()
		send(line)
		if !lines.Scan() {
			t.Fatal("no answer")
		}
		return lines.Text()
	}
	return ask, send
}

const rawInitialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`

// Servers that never answer are left out once the timeout has passed, each
// of them (the time is up for every wait at once), and named.
func TestAggregateTimeoutLeavesOutEveryServerThatIsSilent(t *testing.T) {
	start := time.Now()
	ask, send := rawAggregate(t, Options{Timeout: 300 * time.Millisecond,
		Members: []Member{silent("s1"), goServer("a", make(chan string, 1)), silent("s2")}})
	if got := ask(rawInitialize); !strings.Contains(got, `"guard/unavailable":["s1","s2"]`) || !strings.Contains(got, `"protocolVersion":"2025-06-18"`) {
		t.Fatalf("initialize: %s", got)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	if got := ask(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`); strings.Count(got, `"name":"a__`) != 3 {
		t.Fatalf("tools/list: %s", got)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("initialize and a listing took %v with a 300ms timeout", d)
	}
}

// What the aggregate refuses itself gets a precise error: an ambiguous
// message, a name no server's prefix matches, a method it does not offer,
// a resource nobody listed.
func TestAggregateRefusals(t *testing.T) {
	ask, send := rawAggregate(t, Options{Members: []Member{goServer("a", make(chan string, 1)), goServer("b", make(chan string, 1))}})
	if got := ask(rawInitialize); !strings.Contains(got, `"protocolVersion":"2025-06-18"`) {
		t.Fatalf("initialize: %s", got)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for line, want := range map[string]string{
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"a__who","name":"b__who"}}`: `"code":-32600,"message":"Invalid request: params: duplicate key \"name\""`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"c__who"}}`:                 `"code":-32602,"message":"Unknown tool: c__who`,
		`{"jsonrpc":"2.0","id":4,"method":"prompts/get","params":{"name":"who"}}`:                   `"code":-32602,"message":"Unknown prompt: who`,
		`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{}}`:                                `"code":-32602,"message":"Invalid params: tools/call needs a name"`,
		`{"jsonrpc":"2.0","id":6,"method":"tasks/list"}`:                                            `"code":-32601,"message":"Method not found: tasks/list`,
		`{"jsonrpc":"2.0","id":7,"method":"resources/read","params":{"uri":"file:///x"}}`:           `"code":-32002,"message":"Resource not found`,
		`{"jsonrpc":"2.0","id":8,"method":"ping"}`:                                                  `"result":{}`,
		`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"a__who"}}`:                 `"text":"a"`,
	} {
		if got := ask(line); !strings.Contains(got, want) {
			t.Errorf("%s\n got %s\nwant %s", line, got, want)
		}
	}
}
