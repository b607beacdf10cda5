package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// nopWriteCloser lets a member's output writer be an IOTransport's Writer.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// goServer is a member that runs a go-sdk server in-process: tool "who"
// answers the server's name, "wait" blocks until cancelled (and says so on
// cancelled), "die" ends the server's session mid-call.
func goServer(name string, cancelled chan<- string) Member {
	return Member{Name: name, Run: func(ctx context.Context, in io.Reader, out io.Writer) error {
		crash := make(chan struct{})
		s := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"}, nil)
		type none struct{}
		mcp.AddTool(s, &mcp.Tool{Name: "who"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name}}}, nil, nil
		})
		mcp.AddTool(s, &mcp.Tool{Name: "wait"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
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
	}}
}

// connectAggregate runs RunAggregate over pipes and connects a go-sdk
// client to it.
func connectAggregate(t *testing.T, ag Aggregate) *mcp.ClientSession {
	t.Helper()
	cr, cw := io.Pipe() // client → aggregate
	ar, aw := io.Pipe() // aggregate → client
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = RunAggregate(context.Background(), ag, cr, aw)
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
			t.Error("RunAggregate did not return after the client went")
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
	cs := connectAggregate(t, Aggregate{Members: []Member{goServer("a", cancelled), goServer("a__b", cancelled)}})
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
	time.Sleep(200 * time.Millisecond)
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
