package proxy

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/internal/pgtest"
	"github.com/guard-mcp/guard/store"
	"github.com/guard-mcp/guard/stream/streamtest"
	"github.com/guard-mcp/guard/telemetry"
	"github.com/guard-mcp/guard/wire"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// tracedServer is a go-sdk server whose tools echo (read-only) and
// archive (held by the default policy) send the trace context they
// received in _meta on got.
func tracedServer(got chan<- string) func(ctx context.Context, in io.ReadCloser, out io.WriteCloser) {
	return func(ctx context.Context, in io.ReadCloser, out io.WriteCloser) {
		srv := mcp.NewServer(&mcp.Implementation{Name: "traced", Version: "1"}, nil)
		type args struct {
			Text string `json:"text"`
		}
		mcp.AddTool(srv, &mcp.Tool{Name: "echo", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
			func(_ context.Context, req *mcp.CallToolRequest, a args) (*mcp.CallToolResult, any, error) {
				tp, _ := req.Params.Meta["traceparent"].(string)
				got <- tp
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: a.Text}}}, nil, nil
			})
		mcp.AddTool(srv, &mcp.Tool{Name: "archive"},
			func(_ context.Context, req *mcp.CallToolRequest, a args) (*mcp.CallToolResult, any, error) {
				tp, _ := req.Params.Meta["traceparent"].(string)
				got <- tp
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "archived " + a.Text}}}, nil, nil
			})
		_ = srv.Run(ctx, &mcp.IOTransport{Reader: in, Writer: out})
		out.Close()
	}
}

const clientParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// A call from a client that sends a traceparent arrives at a real
// collector as spans of the client's trace: guard's span under the
// client's, with the conventions' attributes and the call's records, and
// guard's stages under it; the server receives the context of guard's
// request to it, in the same trace. On PostgreSQL the outcome record's
// chain hash, known at commit, is on guard's span too.
func TestTraceContinuesThroughGuard(t *testing.T) {
	traceThroughGuard(t, nil)
}

func TestTraceCarriesTheHashOnPostgres(t *testing.T) {
	if !pgtest.Postgres() {
		t.Skip("PostgreSQL only (" + pgtest.EngineEnv + "=postgres)")
	}
	c := pgtest.Start(t)
	url, err := c.CreateDatabase("traces")
	if err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(context.Background(), store.Options{Path: url, KeyPath: filepath.Join(t.TempDir(), "audit.key")})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	traceThroughGuard(t, db)
}

// traceThroughGuard runs the call, its records in pg when not nil.
func traceThroughGuard(t *testing.T, pg *store.DB) {
	oc := streamtest.NewOtelcol(t, nil)
	tr, err := telemetry.New(telemetry.Config{OTLP: oc.TracesURL(), Sample: 1},
		telemetry.Options{Getenv: func(string) string { return "" }, BatchTimeout: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	got := make(chan string, 1)
	ho := harnessOpts{tracer: tr.Tracer(), server: tracedServer(got)}
	if pg != nil {
		ho.recorder, ho.hashed = pg, true
	}
	h := newHarness(t, ho)
	cs := h.client(nil, "2025-06-18")
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"},
		Meta: mcp.Meta{"traceparent": clientParent}})
	if err != nil || res.IsError {
		t.Fatalf("call: %v %+v", err, res)
	}
	serverParent := <-got
	parts := strings.Split(serverParent, "-")
	if len(parts) != 4 || parts[1] != "4bf92f3577b34da6a3ce929d0e0e4736" || parts[2] == "00f067aa0ba902b7" || parts[3] != "01" {
		t.Fatalf("the server received traceparent %q", serverParent)
	}
	spans := oc.WaitSpans(4, func(s *streamtest.Span) bool { return s.TraceID == "4bf92f3577b34da6a3ce929d0e0e4736" })
	byName := map[string][]streamtest.Span{}
	for _, s := range spans {
		byName[s.Name] = append(byName[s.Name], s)
	}
	calls := byName["tools/call echo"]
	if len(calls) != 2 {
		t.Fatalf("spans: %v", byName)
	}
	root, fwd := calls[0], calls[1]
	if root.Kind != 2 {
		root, fwd = fwd, root
	}
	var call *callRecord
	recs := h.db
	if pg != nil {
		recs = pg
	}
	if err := recs.Reader().Records(context.Background(), func(r *guard.Record) error {
		if r.Tool == "echo" && r.Kind == guard.KindOutcome {
			call = &callRecord{id: r.CallID, record: r.ID, hash: r.Hash}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	switch {
	case root.ParentSpanID != "00f067aa0ba902b7" || root.Kind != 2:
		t.Errorf("guard's span: parent %s kind %d", root.ParentSpanID, root.Kind)
	case fwd.ParentSpanID != root.SpanID || fwd.Kind != 3 || parts[2] != fwd.SpanID:
		t.Errorf("the request at the server: %+v; the server's parent %s", fwd, parts[2])
	case call == nil || root.Attr("guard.call_id") != call.id || root.Attr("guard.record.id") != call.record:
		t.Errorf("guard.call_id %q, guard.record.id %q, the call %+v", root.Attr("guard.call_id"), root.Attr("guard.record.id"), call)
	case pg != nil && (call.hash == "" || root.Attr("guard.record.hash") != call.hash):
		t.Errorf("guard.record.hash %q, the record's %q", root.Attr("guard.record.hash"), call.hash)
	case pg == nil && root.Attr("guard.record.hash") != "":
		t.Errorf("guard.record.hash %q on SQLite, where it is not known at commit", root.Attr("guard.record.hash"))
	}
	for k, want := range map[string]string{"mcp.method.name": "tools/call", "gen_ai.tool.name": "echo", "gen_ai.operation.name": "execute_tool",
		"mcp.protocol.version": "2025-06-18", "mcp.session.id": h.sess.ID(), "guard.server": "notes", "guard.decision": "allowed",
		"guard.outcome": "ok", "guard.decided_by": "default"} {
		if v := root.Attr(k); v != want {
			t.Errorf("%s = %q, want %q", k, v, want)
		}
	}
	if root.Attr("jsonrpc.request.id") == "" || root.Attr("error.type") != "" {
		t.Errorf("attributes: %+v", root.Attributes)
	}
	for _, name := range []string{"guard.decide", "guard.record"} {
		if len(byName[name]) == 0 || byName[name][0].ParentSpanID != root.SpanID {
			t.Errorf("%s: %+v", name, byName[name])
		}
	}
	if len(byName["guard.record"]) != 2 {
		t.Errorf("record spans: %+v", byName["guard.record"])
	}
	heldCall(t, h, cs, oc, got)
	if out := os.Getenv("GUARD_TRACE_OUT"); out != "" {
		// The collector's file, for the README's picture (docs/tracetree).
		b, err := os.ReadFile(oc.TracesFile())
		if err == nil {
			err = os.WriteFile(out, b, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// heldCall makes a call the policy holds, which alice approves: its trace
// has the hold, with who decided.
func heldCall(t *testing.T, h *harness, cs *mcp.ClientSession, oc *streamtest.Otelcol, got <-chan string) {
	const parent = "00-5af7183fb1d4cf5f05a3a1b4a2c0d2e1-0102030405060708-01"
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "archive", Arguments: map[string]any{"text": "q3 report"},
			Meta: mcp.Meta{"traceparent": parent}})
		done <- err
	}()
	id := waitPending(t, h, "archive")
	if _, err := h.holds.Decide(context.Background(), id, true, "alice", "fine"); err != nil {
		t.Fatal(err)
	}
	<-got
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	spans := oc.WaitSpans(1, func(s *streamtest.Span) bool { return s.Name == "guard.hold" })
	if s := spans[0]; s.TraceID != "5af7183fb1d4cf5f05a3a1b4a2c0d2e1" || s.Attr("guard.decided_by") != "alice" ||
		s.Attr("guard.approval.id") != id || s.Attr("guard.approval.state") != guard.ApprovalUsed {
		t.Errorf("the hold's span: %+v", s)
	}
}

// callRecord is what the audit log has of the call: its id, its outcome
// record's id and hash.
type callRecord struct{ id, record, hash string }

// Without a tracer nothing changes on the wire: the server receives the
// client's own traceparent, or none.
func TestNoTracerChangesNothing(t *testing.T) {
	got := make(chan string, 1)
	h := newHarness(t, harnessOpts{server: tracedServer(got)})
	cs := h.client(nil, "2025-06-18")
	for _, tp := range []string{clientParent, ""} {
		p := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}}
		if tp != "" {
			p.Meta = mcp.Meta{"traceparent": tp}
		}
		if _, err := cs.CallTool(context.Background(), p); err != nil {
			t.Fatal(err)
		}
		if g := <-got; g != tp {
			t.Errorf("the server received %q, the client sent %q", g, tp)
		}
	}
}

// WithTraceMeta sets the members in _meta and keeps every other byte; a
// request without params gets them.
func TestWithTraceMeta(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":1,"_meta":{"traceparent":"old","k":2}}}`,
			`{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":1,"_meta":{"traceparent":"tp","k":2,"tracestate":"s=1"}}}`},
		{`{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":1}}`,
			`{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":1,"_meta":{"traceparent":"tp","tracestate":"s=1"}}}`},
		{`{"jsonrpc":"2.0","id":1,"method":"x"}`,
			`{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":{"traceparent":"tp","tracestate":"s=1"}}}`},
		{`{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":7}}`, `{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":7}}`},
	} {
		m, err := wire.Parse([]byte(c.in))
		if err != nil {
			t.Fatal(err)
		}
		out := WithTraceMeta(m, "tp", "s=1")
		if string(out.Raw) != c.want {
			t.Errorf("%s\n got %s\nwant %s", c.in, out.Raw, c.want)
		}
		if p, err := wire.Parse(out.Raw); err != nil || string(p.Params) != string(out.Params) || string(p.ID) != string(out.ID) {
			t.Errorf("%s: parsed %q %q, kept %q %q", out.Raw, p.Params, p.ID, out.Params, out.ID)
		}
	}
}

// A traceparent is read as W3C Trace Context has it, and written back the
// same; a malformed tracestate is left out, not the parent.
func TestRemoteParent(t *testing.T) {
	const tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for _, c := range []struct {
		parent, state string
		want          string // traceparent written back, "" for none
		wantState     string
	}{
		{"00-" + tid + "-" + sid + "-01", "a=1,b=2", "00-" + tid + "-" + sid + "-01", "a=1,b=2"},
		{"00-" + tid + "-" + sid + "-00", "", "00-" + tid + "-" + sid + "-00", ""},
		{"00-" + tid + "-" + sid + "-03", "not a state", "00-" + tid + "-" + sid + "-03", ""},
		{"01-" + tid + "-" + sid + "-09-more", "", "00-" + tid + "-" + sid + "-01", ""}, // a later version: its flags' unknown bits go
		{"01-" + tid + "-" + sid + "-01x", "", "", ""},
		{"00-" + tid + "-" + sid + "-01-more", "", "", ""},
		{"00-" + tid + "-" + sid + "-04", "", "", ""},
		{"ff-" + tid + "-" + sid + "-01", "", "", ""},
		{"00-" + strings.ToUpper(tid) + "-" + sid + "-01", "", "", ""},
		{"00-00000000000000000000000000000000-" + sid + "-01", "", "", ""},
		{"00-" + tid + "-0000000000000000-01", "", "", ""},
		{"00-" + tid + "_" + sid + "-01", "", "", ""},
		{"00-" + tid + "-" + sid, "", "", ""},
		{"", "a=1", "", ""},
	} {
		sc := remoteParent(c.parent, c.state)
		if c.want == "" {
			if sc.IsValid() {
				t.Errorf("%q: read as %v", c.parent, sc)
			}
			continue
		}
		if p, s := traceparent(sc); p != c.want || s != c.wantState || !sc.IsRemote() {
			t.Errorf("%q %q: written back as %q %q (remote %v)", c.parent, c.state, p, s, sc.IsRemote())
		}
	}
}
