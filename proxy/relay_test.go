package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/approvals"
	"github.com/guard-mcp/guard/config"
	"github.com/guard-mcp/guard/exampleserver"
	"github.com/guard-mcp/guard/policy"
	"github.com/guard-mcp/guard/store"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"
)

// harness runs one session in-process between a client the test drives and
// a real go-sdk server, over pipes, with a real store and real policy.
type harness struct {
	t       testing.TB
	db      *store.DB
	holds   *approvals.Manager
	sess    *Session
	toGuard io.WriteCloser // the client's side: what guard reads
	fromG   io.ReadCloser  // the client's side: what guard writes
	lines   chan []byte    // lines guard wrote to the client, for raw tests
	done    chan struct{}  // the server's output ended and the session closed
}

type harnessOpts struct {
	config   string
	server   func(ctx context.Context, in io.ReadCloser, out io.WriteCloser) // default: the example server
	recorder Recorder                                                        // default: the store
	wait     time.Duration
	raw      bool          // read guard's output as lines (no go-sdk client)
	pending  int           // MaxPending
	ignore   bool          // IgnoreBadSchemas
	quiet    bool          // discard guard's log
	refresh  time.Duration // RefreshTimeout
	maxReq   int           // MaxRequest
	maxMsg   int           // MaxMessage, when not 1 MiB

	tracer trace.Tracer   // Options.Tracer
	hashed bool           // Options.HashAtCommit
	caller guard.Identity // Caller: who the front authenticated
	scope  string         // approval.scope (default: session)
	watch  ListingWatch   // Options.Watch
	share  bool           // Options.ShareListens
}

// testOptions are relay options over a new database in t's temporary
// directory, with config's policy (default: annotations) and holds that
// wait at most wait.
func testOptions(t testing.TB, ctx context.Context, conf string, wait time.Duration) (Options, *store.DB, *approvals.Manager) {
	t.Helper()
	db, err := store.Open(ctx, store.Options{Path: filepath.Join(t.TempDir(), "guard.db"), Durability: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if conf == "" {
		conf = "policy:\n  default: annotations\n"
	}
	cfg, err := config.Parse([]byte(conf), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	engine, err := config.NewEngine("", cfg, policy.EngineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	holds := approvals.New(db.Holds(), approvals.Options{Timeout: time.Minute, Wait: wait, ProgressEvery: 50 * time.Millisecond})
	return Options{
		Server: "notes", Recorder: db, Catalog: db.Catalog(), Decider: engine, Holds: holds,
		Redactor: cfg.Redactor(), MaxMessage: 1 << 20, ProgressEvery: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil)), Contracts: policy.NewContracts(false),
		Listing:    func() string { return engine.Config().Listing("notes") },
		HideDenied: func() bool { return engine.Config().Policy.HideDenied },
	}, db, holds
}

func newHarness(t testing.TB, ho harnessOpts) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if ho.wait == 0 {
		ho.wait = 10 * time.Second
	}
	opts, db, holds := testOptions(t, ctx, ho.config, ho.wait)
	if ho.scope != "" {
		holds = approvals.New(db.Holds(), approvals.Options{Timeout: time.Minute, Wait: ho.wait, ProgressEvery: 50 * time.Millisecond, Scope: ho.scope})
		opts.Holds = holds
	}
	if ho.quiet {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if ho.recorder != nil {
		opts.Recorder = ho.recorder
	}
	opts.MaxPending, opts.IgnoreBadSchemas, opts.RefreshTimeout, opts.MaxRequest = ho.pending, ho.ignore, ho.refresh, ho.maxReq
	if ho.maxMsg > 0 {
		opts.MaxMessage = ho.maxMsg
	}
	opts.Caller, opts.Watch, opts.Tracer, opts.HashAtCommit = ho.caller, ho.watch, ho.tracer, ho.hashed
	opts.ShareListens = ho.share
	sess := NewSession(ctx, opts)
	g2sR, g2sW := io.Pipe()
	s2gR, s2gW := io.Pipe()
	c2gR, c2gW := io.Pipe()
	g2cR, g2cW := io.Pipe()
	if ho.server == nil {
		ho.server = func(ctx context.Context, in io.ReadCloser, out io.WriteCloser) {
			_ = exampleserver.Run(ctx, in, out)
			out.Close()
		}
	}
	go ho.server(ctx, g2sR, s2gW)
	server := NewStreamConn(s2gR, g2sW, opts.MaxMessage)
	h := &harness{t: t, db: db, holds: holds, sess: sess, toGuard: c2gW, fromG: g2cR, done: make(chan struct{})}
	go func() {
		_ = Run(ctx, NewStreamConn(c2gR, g2cW, opts.MaxMessage), server, sess)
		g2cW.Close()
		close(h.done)
	}()
	if ho.raw {
		h.lines = make(chan []byte, 100)
		go func() {
			sc := bufio.NewScanner(g2cR)
			sc.Buffer(nil, 4<<20)
			for sc.Scan() {
				h.lines <- append([]byte(nil), sc.Bytes()...)
			}
			close(h.lines)
		}()
	}
	t.Cleanup(func() {
		c2gW.Close()
		select {
		case <-h.done:
		case <-time.After(10 * time.Second):
			t.Error("the session did not end after the client closed its input")
		}
	})
	return h
}

// client connects a go-sdk client through guard.
func (h *harness) client(opts *mcp.ClientOptions, version string) *mcp.ClientSession {
	h.t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1.2"}, opts)
	var so *mcp.ClientSessionOptions
	if version != "" {
		so = &mcp.ClientSessionOptions{ProtocolVersion: version}
	}
	cs, err := c.Connect(context.Background(), &mcp.IOTransport{Reader: h.fromG, Writer: h.toGuard}, so)
	if err != nil {
		h.t.Fatalf("connect through guard: %v", err)
	}
	return cs
}

// send writes one raw line as the client.
func (h *harness) send(line string) {
	h.t.Helper()
	if _, err := io.WriteString(h.toGuard, line+"\n"); err != nil {
		h.t.Fatal(err)
	}
}

// next reads guard's next line to the client as a JSON object.
func (h *harness) next() map[string]any {
	h.t.Helper()
	select {
	case l, ok := <-h.lines:
		if !ok {
			h.t.Fatal("guard closed the client's output")
		}
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			h.t.Fatalf("guard wrote a line that is not a JSON object: %q", l)
		}
		return m
	case <-time.After(10 * time.Second):
		h.t.Fatal("no answer from guard within 10s")
	}
	return nil
}

// initialize performs the handshake as a raw client.
func (h *harness) initialize(version string) {
	h.t.Helper()
	h.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"` + version + `","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`)
	m := h.next()
	if m["result"] == nil {
		h.t.Fatalf("initialize failed: %v", m)
	}
	h.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
}

func (h *harness) calls() []*store.Call {
	h.t.Helper()
	var out []*store.Call
	err := h.db.Reader().Query(context.Background(), store.Filter{}, func(c *store.Call) error {
		out = append(out, c)
		return nil
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

func textOf(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestRelayAllowsReadOnlyAndRecordsEverything(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	cs := h.client(nil, "")
	defer cs.Close()
	ctx := context.Background()
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || !strings.Contains(textOf(t, res), "hi") {
		t.Fatalf("echo through guard: %+v", res)
	}
	var found bool
	for _, c := range h.calls() {
		if c.Method == "tools/call" && c.Tool == "echo" {
			found = true
			if c.Decision != guard.DecisionAllowed || c.Outcome != guard.OutcomeOK || c.Client != "test-client/1.2" || c.Pin == "" {
				t.Fatalf("echo's record: %+v", c)
			}
		}
	}
	if !found {
		t.Fatal("no record of the echo call")
	}
}

func TestRelayDeniesByRuleWithTheContractText(t *testing.T) {
	h := newHarness(t, harnessOpts{config: `
policy:
  default: allow
  rules:
    - {name: no-delete, tool: "delete_*", action: deny, reason: "notes are kept"}
`})
	cs := h.client(nil, "")
	defer cs.Close()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"title": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `Denied by policy rule "no-delete": notes are kept`; !res.IsError || textOf(t, res) != want {
		t.Fatalf("got %+v, want isError %q", res, want)
	}
}

func TestRelayHoldsUntilAPersonDecides(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	cs := h.client(nil, "")
	defer cs.Close()
	ctx := context.Background()
	type out struct {
		res *mcp.CallToolResult
		err error
	}
	got := make(chan out, 1)
	go func() {
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"title": "groceries"}})
		got <- out{r, err}
	}()
	id := waitPending(t, h, "delete_note")
	// The relay goes on while the call is held.
	if err := cs.Ping(ctx, nil); err != nil {
		t.Fatalf("ping while a call is held: %v", err)
	}
	if _, err := h.holds.Decide(ctx, id, false, "alice", "not today"); err != nil {
		t.Fatal(err)
	}
	o := <-got
	if o.err != nil {
		t.Fatal(o.err)
	}
	if want := "Denied by alice: not today"; !o.res.IsError || textOf(t, o.res) != want {
		t.Fatalf("got %q, want %q", textOf(t, o.res), want)
	}
	for _, c := range h.calls() {
		if c.ID == id && (c.Outcome != guard.OutcomeDenied || c.DecidedBy != "alice") {
			t.Fatalf("record of the denied call: %+v", c)
		}
	}
}

// A session cannot have more than MaxPending calls waiting for approval:
// the next is refused at once, and a slot frees when a call is decided.
func TestRelayCapsPendingApprovalsPerSession(t *testing.T) {
	h := newHarness(t, harnessOpts{pending: 2})
	cs := h.client(nil, "")
	defer cs.Close()
	ctx := context.Background()
	type result struct {
		r   *mcp.CallToolResult
		err error
	}
	held := make(chan result, 3) // no t in the callers: they may outlive a failed test
	call := func(title string) {
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"title": title}})
		held <- result{r, err}
	}
	pending := func(want int) []*guard.Approval {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			list, _ := h.db.Holds().Approvals(ctx, guard.ApprovalPending)
			if len(list) == want {
				return list
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d pending, want %d", len(list), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	go call("a")
	go call("b")
	list := pending(2)
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"title": "c"}})
	if err != nil || !r.IsError || !strings.Contains(textOf(t, r), "2 calls of this session are already waiting for approval") {
		t.Fatalf("the third held call: %v %v", r, err)
	}
	if _, err := h.holds.Decide(ctx, list[0].ID, false, "alice", "no"); err != nil {
		t.Fatal(err)
	}
	if got := <-held; got.err != nil || !got.r.IsError {
		t.Fatalf("the denied call: %+v", got)
	}
	// The slot is free again: a new call is held, not refused.
	go call("d")
	for _, a := range pending(2) {
		if _, err := h.holds.Decide(ctx, a.ID, false, "alice", "no"); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if got := <-held; got.err != nil || !got.r.IsError || !strings.Contains(textOf(t, got.r), "no") {
			t.Fatalf("a held call denied: %+v", got)
		}
	}
}

func waitPending(t *testing.T, h *harness, tool string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		list, err := h.db.Holds().Approvals(context.Background(), guard.ApprovalPending)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range list {
			if a.Tool == tool {
				return a.ID
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no pending approval for %s", tool)
	return ""
}

func TestRelayRefusesBadInputAndGoesOn(t *testing.T) {
	h := newHarness(t, harnessOpts{raw: true, config: "policy:\n  default: allow\n"})
	h.initialize(guard.Rev20250618)
	for _, tc := range []struct {
		name, line string
		code       float64
		id         any
	}{
		{"malformed", `{"jsonrpc":"2.0","id":1,"method":`, -32700, nil},
		{"not jsonrpc", `{"id":2,"method":"ping"}`, -32600, 2.0},
		{"duplicate method", `{"jsonrpc":"2.0","id":3,"method":"ping","method":"tools/call"}`, -32600, nil},
		{"case variant", `{"jsonrpc":"2.0","id":4,"method":"ping","Method":"tools/call"}`, -32600, nil},
		{"duplicate argument", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo","arguments":{"text":"a","text":"b"}}}`, -32600, 5.0},
		{"case argument", `{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"echo","Name":"delete_note","arguments":{"text":"a"}}}`, -32600, 6.0},
		{"bad utf-8", "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\",\"arguments\":{\"text\":\"\xff\"}}}", -32600, 7.0},
		{"batch outside 2025-03-26", `[{"jsonrpc":"2.0","id":8,"method":"ping"}]`, -32600, nil},
		{"too long", `{"jsonrpc":"2.0","id":9,"method":"ping","params":{"x":"` + strings.Repeat("a", 2<<20) + `"}}`, -32600, nil},
	} {
		h.send(tc.line)
		m := h.next()
		e, _ := m["error"].(map[string]any)
		if e == nil || e["code"] != tc.code || m["id"] != tc.id {
			t.Errorf("%s: got %v, want code %v id %v", tc.name, m, tc.code, tc.id)
		}
		// and the session goes on
		h.send(`{"jsonrpc":"2.0","id":"after","method":"ping"}`)
		if m := h.next(); m["id"] != "after" || m["result"] == nil {
			t.Fatalf("%s: the session did not go on: %v", tc.name, m)
		}
	}
}

func TestRelayKeepsIDTypesAndSeparatesDuplicateIDs(t *testing.T) {
	h := newHarness(t, harnessOpts{raw: true, config: "policy:\n  default: allow\n"})
	h.initialize(guard.Rev20250618)
	// The same id twice in flight, as some hosts do, and a string id that
	// looks like a number.
	h.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"first"}}}`)
	h.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"second"}}}`)
	h.send(`{"jsonrpc":"2.0","id":"1","method":"ping"}`)
	seen := map[string]bool{}
	for range 3 {
		m := h.next()
		switch id := m["id"].(type) {
		case float64:
			b, _ := json.Marshal(m["result"])
			if strings.Contains(string(b), "first") {
				seen["first"] = true
			}
			if strings.Contains(string(b), "second") {
				seen["second"] = true
			}
		case string:
			if id != "1" {
				t.Fatalf("a rewritten id reached the client: %v", m)
			}
			seen["ping"] = true
		default:
			t.Fatalf("unexpected answer %v", m)
		}
	}
	if len(seen) != 3 {
		t.Fatalf("answers seen: %v", seen)
	}
}

func TestRelayAnswersBatchesUnder20250326(t *testing.T) {
	h := newHarness(t, harnessOpts{raw: true, config: "policy:\n  default: allow\n"})
	h.initialize(guard.Rev20250326)
	h.send(`[{"jsonrpc":"2.0","id":"a","method":"ping"},{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"x","progress":1}},{"jsonrpc":"2.0","id":"b","method":"tools/call","params":{"name":"echo","arguments":{"text":"in a batch"}}}]`)
	select {
	case l := <-h.lines:
		var arr []map[string]any
		if err := json.Unmarshal(l, &arr); err != nil {
			t.Fatalf("batch answer is not an array: %s", l)
		}
		if len(arr) != 2 {
			t.Fatalf("batch answer has %d members, want 2: %s", len(arr), l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no batch answer")
	}
}

// failingRecorder stands for a disk that fails: no real part produces
// that on demand.
type failingRecorder struct {
	mu   sync.Mutex
	fail bool
	Recorder
}

func (f *failingRecorder) AppendAsync(recs ...*guard.Record) <-chan error {
	f.mu.Lock()
	fail := f.fail
	f.mu.Unlock()
	if fail {
		ch := make(chan error, 1)
		ch <- guard.ErrAuditWrite
		return ch
	}
	return f.Recorder.AppendAsync(recs...)
}

func TestRelayFailsClosedWhenTheAuditCannotBeWritten(t *testing.T) {
	fr := &failingRecorder{}
	var served sync.WaitGroup
	calls := make(chan string, 10)
	h := newHarness(t, harnessOpts{raw: true, config: "policy:\n  default: allow\n", recorder: fr,
		server: func(ctx context.Context, in io.ReadCloser, out io.WriteCloser) {
			served.Add(1)
			defer served.Done()
			s := exampleserver.New(nil)
			s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
				return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
					calls <- method
					return next(ctx, method, req)
				}
			})
			_ = s.Run(ctx, &mcp.IOTransport{Reader: in, Writer: out})
			out.Close()
		}})
	fr.Recorder = h.db
	h.initialize(guard.Rev20250618)
	h.send(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	h.next()
	<-calls // initialize
	<-calls // initialized
	<-calls // tools/list
	fr.mu.Lock()
	fr.fail = true
	fr.mu.Unlock()
	h.send(`{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`)
	m := h.next()
	e, _ := m["error"].(map[string]any)
	if e == nil || e["code"] != -32603.0 || e["message"] != "Refused: the audit log could not be written" || m["id"] != 42.0 {
		t.Fatalf("got %v", m)
	}
	select {
	case method := <-calls:
		t.Fatalf("the server saw %s although it could not be recorded", method)
	case <-time.After(200 * time.Millisecond):
	}
}

// testWriter sends guard's log to the test's log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func TestRelayProgressWhileHeldThenTheServersOwn(t *testing.T) {
	h := newHarness(t, harnessOpts{raw: true})
	h.initialize(guard.Rev20250618)
	h.send(`{"jsonrpc":"2.0","id":"list","method":"tools/list"}`)
	h.next()
	h.send(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"run_task","arguments":{"task":"sync","seconds":1},"_meta":{"progressToken":"tok"}}}`)
	first := h.next()
	params, _ := first["params"].(map[string]any)
	if first["method"] != "notifications/progress" || params["progressToken"] != "tok" ||
		!strings.HasPrefix(params["message"].(string), "waiting for approval at the guard UI; approval id ") {
		t.Fatalf("first message while held: %v", first)
	}
	id := waitPending(t, h, "run_task")
	if _, err := h.holds.Decide(context.Background(), id, true, "dana", ""); err != nil {
		t.Fatal(err)
	}
	last := params["progress"].(float64)
	for {
		m := h.next()
		if m["id"] == 5.0 {
			if text := fmt.Sprint(m["result"]); !strings.Contains(text, "done: sync") {
				t.Fatalf("result: %v", m)
			}
			break
		}
		p := m["params"].(map[string]any)
		if p["progress"].(float64) <= last {
			t.Fatalf("progress went from %v to %v", last, p["progress"])
		}
		last = p["progress"].(float64)
	}
	if last < 4 {
		t.Fatalf("the server's own progress did not come through (last %v)", last)
	}
}

func TestRelayUnknownToolAfterRefresh(t *testing.T) {
	h := newHarness(t, harnessOpts{raw: true, config: "policy:\n  default: allow\n"})
	h.initialize(guard.Rev20250618)
	h.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"format_disk","arguments":{}}}`)
	m := h.next()
	e, _ := m["error"].(map[string]any)
	if e == nil || e["code"] != -32602.0 || e["message"] != "Unknown tool: format_disk" {
		t.Fatalf("got %v", m)
	}
}

func TestRelayDropsWhatTheServerShouldNotSay(t *testing.T) {
	h := newHarness(t, harnessOpts{raw: true, config: "policy:\n  default: allow\n",
		server: func(ctx context.Context, in io.ReadCloser, out io.WriteCloser) {
			// A server that prints a log line and a stray response on
			// stdout before it serves.
			io.WriteString(out, "Server starting on stdio...\n")
			io.WriteString(out, `{"jsonrpc":"2.0","id":"never-asked","result":{}}`+"\n")
			io.WriteString(out, `{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"`+strings.Repeat("x", 2<<20)+`"}}`+"\n")
			_ = exampleserver.Run(ctx, in, out)
			out.Close()
		}})
	h.initialize(guard.Rev20250618)
	h.send(`{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	if m := h.next(); m["id"] != 2.0 {
		t.Fatalf("got %v", m)
	}
	var events []string
	err := h.db.Reader().Records(context.Background(), func(r *guard.Record) error {
		if r.Kind == guard.KindEvent {
			events = append(events, r.Method+" "+r.Detail)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(events, "\n")
	if !strings.Contains(joined, "not JSON-RPC") || !strings.Contains(joined, "unknown id") ||
		!strings.Contains(joined, "server line over max_message") {
		t.Fatalf("events: %s", joined)
	}
}

func TestRelayRecordsArgumentsWithSecretsMasked(t *testing.T) {
	h := newHarness(t, harnessOpts{raw: true, config: "policy:\n  default: allow\n"})
	h.initialize(guard.Rev20250618)
	h.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi","auth":{"API_KEY":"sk-live-123"}}}}`)
	h.next()
	var args string
	for _, c := range h.calls() {
		if c.Tool == "echo" {
			args = c.Arguments
		}
	}
	if strings.Contains(args, "sk-live-123") || !strings.Contains(args, `"API_KEY":"[REDACTED]"`) {
		t.Fatalf("recorded arguments: %s", args)
	}
}

// A tool whose inputSchema does not compile is refused by default, naming
// the server and tool; with bad_schema: ignore its calls go on.
func TestRelayBadSchemaFailsClosed(t *testing.T) {
	server := func(ctx context.Context, in io.ReadCloser, out io.WriteCloser) {
		s := mcp.NewServer(&mcp.Implementation{Name: "bad", Version: "1"}, nil)
		s.AddTool(&mcp.Tool{Name: "odd", InputSchema: map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"minimum": "ten"}}},
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ran"}}}, nil
			})
		_ = s.Run(ctx, &mcp.IOTransport{Reader: in, Writer: out})
		out.Close()
	}
	for _, ignore := range []bool{false, true} {
		h := newHarness(t, harnessOpts{server: server, ignore: ignore, config: "policy: {default: allow}\n"})
		cs := h.client(nil, "")
		r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "odd", Arguments: map[string]any{"a": 1}})
		if err != nil {
			t.Fatal(err)
		}
		text := textOf(t, r)
		if ignore && (r.IsError || text != "ran") {
			t.Errorf("bad_schema: ignore: %q", text)
		}
		if !ignore && (!r.IsError || !strings.Contains(text, `the inputSchema of tool "odd" on server "notes" cannot be used`)) {
			t.Errorf("a schema that does not compile must fail closed: %q", text)
		}
		cs.Close()
	}
}
