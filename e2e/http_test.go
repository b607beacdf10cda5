package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/e2e/guardtest"
	"github.com/guard-mcp/guard/stream/streamtest"
)

// serveExample runs guard serve with the example server as "notes".
func serveExample(t *testing.T, config string, flags ...string) (*env, string) {
	t.Helper()
	return serveExampleLogging(t, os.Stderr, config, flags...)
}

// serveExampleLogging is serveExample with guard serve's log written to log.
func serveExampleLogging(t *testing.T, log io.Writer, config string, flags ...string) (*env, string) {
	t.Helper()
	e := newEnv(t, config+"servers:\n  notes:\n    command: ["+guardBin+", example-server]\n")
	return e, e.serveLogging(log, flags...) + "/mcp/notes"
}

// A call held over HTTP is approved from the command line and the client
// receives the server's real result; go-sdk clients of each revision with
// sessions work through guard serve.
func TestHTTPHeldCallApprovedFromTheCommandLine(t *testing.T) {
	e, url := serveExample(t, "approval: {wait: 30s}\n")
	for _, v := range []string{"2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"} {
		t.Run(v, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "http", Version: "1"}, nil).
				Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, &mcp.ClientSessionOptions{ProtocolVersion: v})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "write_note", Arguments: map[string]any{"title": "t" + v, "body": "x"}}); err != nil {
				t.Fatal(err)
			}
			got := goCall(func() (*mcp.CallToolResult, error) {
				return cs.CallTool(ctx, &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"title": "t" + v}})
			})
			a := e.pendingFor(ctx, "delete_note")
			if out, code := e.guard("approvals", "approve", a.ID, "--by", "erin"); code != 0 {
				t.Fatalf("approve: %s", out)
			}
			if r := awaitCall(t, got); r == nil || r.IsError || r.Content[0].(*mcp.TextContent).Text != "deleted t"+v {
				t.Fatalf("the approved call: %v", r)
			}
		})
	}
}

// A client that disconnects while its call is held does not cancel it (a
// disconnect is not a cancellation): approved later, the call runs.
func TestHTTPDisconnectDuringAHoldIsNotACancellation(t *testing.T) {
	e, url := serveExample(t, "approval: {wait: 30s}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	post := func(ctx context.Context, session, body string) *http.Response {
		return openPost(t, ctx, url, session, body)
	}
	resp := post(ctx, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	session := resp.Header.Get("Mcp-Session-Id")
	resp.Body.Close()
	if session == "" {
		t.Fatal("no Mcp-Session-Id")
	}
	post(ctx, session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`).Body.Close()
	// The held call, on a connection of its own; then the client goes
	// away: it stops sending, which guard's server takes for the client
	// gone, as it takes a close. The call's stream ends once guard has
	// done what a client's going does, and a ping answered after it has
	// been through the session after all that: a cancellation would have
	// ended the hold's wait by then, and the hold must still be there
	// (approved below, the call must run).
	req, _ := http.NewRequest("POST", url, strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"delete_note","arguments":{"title":"welcome"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", session)
	conn, err := net.Dial("tcp", req.URL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	a := e.pendingFor(ctx, "delete_note")
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	if resp, err = http.ReadResponse(bufio.NewReader(conn), req); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatalf("the held call's stream did not end once its client went: %v", err)
	}
	resp.Body.Close()
	if _, m := rawPost(t, url, session, `{"jsonrpc":"2.0","id":"after","method":"ping"}`); m["id"] != "after" {
		t.Fatalf("a ping after the client went: %v", m)
	}
	if p := e.pendingApproval("delete_note"); p == nil || p.ID != a.ID {
		t.Fatalf("the hold did not outlive its client's connection: %+v", p)
	}
	if out, code := e.guard("approvals", "approve", a.ID, "--by", "erin"); code != 0 {
		t.Fatalf("approve after the client left: %s", out)
	}
	// The released call runs on its own, after the approval is seen: wait
	// for its outcome before looking at what it did.
	e.outcomeFor(ctx, "delete_note", "ok")
	// The call ran: the note is gone.
	resp = post(ctx, session, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"read_note","arguments":{"title":"welcome"}}}`)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var body strings.Builder
	for sc.Scan() {
		body.WriteString(sc.Text() + "\n")
	}
	if !strings.Contains(body.String(), `no note titled`) {
		t.Fatalf("the held call did not run after its client disconnected:\n%s", body.String())
	}
	// The decision given after the client left is a record of the call.
	if out, _ := e.guard("audit", "query", "--format", "jsonl", "--tool", "delete_note"); !strings.Contains(out, `"decided_by":"erin"`) {
		t.Fatalf("the audit of the call decided after its client left:\n%s", out)
	}
	db := e.openReadOnly(ctx)
	defer db.Close()
	found := false
	_ = db.Reader().Records(ctx, func(r *guard.Record) error {
		found = found || r.Kind == guard.KindDecision && r.Approval == a.ID && r.CallID == a.ID && r.DecidedBy == "erin" && r.Decision == guard.ApprovalApproved
		return nil
	})
	if !found {
		t.Fatal("no decision record of the call approved after its client left")
	}
}

// The front door refuses a foreign Origin or Host, and a slow client that
// never finishes its headers is cut off.
func TestHTTPFrontDoor(t *testing.T) {
	_, url := serveExample(t, "", "--header-timeout", "500ms")
	for _, h := range []map[string]string{{"Origin": "http://evil.example.com"}, {"Host": "evil.example.com"}} {
		req, _ := http.NewRequest("POST", url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		for k, v := range h {
			if k == "Host" {
				req.Host = v
			} else {
				req.Header.Set(k, v)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%v: %d, want 403", h, resp.StatusCode)
		}
	}
	// A slow client: headers never finished.
	host := strings.TrimPrefix(strings.TrimSuffix(url, "/mcp/notes"), "http://")
	conn, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("POST /mcp/notes HTTP/1.1\r\nHost: " + host + "\r\n")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 512)
	for {
		if _, err := conn.Read(buf); err != nil {
			break // closed by guard (or our deadline)
		}
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("a client that never finished its headers was kept for %v", d)
	}
}

// /metrics counts calls by server, tool, decision and outcome, with
// latency histograms, pending approvals and the audit's append latency.
func TestHTTPMetrics(t *testing.T) {
	_, url := serveExample(t, "approval: {wait: 1s}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs := connectHTTP(ctx, t, url)
	for range 3 {
		cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}})
	}
	cs.CallTool(ctx, &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"title": "welcome"}}) // held, then "retry"
	body := scrape(ctx, t, url, "")
	for _, want := range []string{
		// Labels in the order client_golang writes them: by name.
		`guard_calls_total{decision="allowed",outcome="ok",server="notes",tool="echo"} 3`,
		`guard_calls_total{decision="held",outcome="awaiting_approval",server="notes",tool="delete_note"} 1`,
		`guard_call_duration_seconds_count{server="notes"} 4`,
		`guard_pending_approvals 1`,
		`# TYPE guard_audit_append_seconds histogram`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
}

// connectHTTP connects a go-sdk client to url, closed when t ends.
func connectHTTP(ctx context.Context, t *testing.T, url string) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "m", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// scrape reads /metrics of the guard serve whose endpoint url is (the
// notes server's), asking for the format accept names ("": the default).
func scrape(ctx context.Context, t *testing.T, url, accept string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", strings.TrimSuffix(url, "/mcp/notes")+"/metrics", nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// newToken makes a client token with guard token: the token, and its
// line for the configuration's clients:.
func newToken(t *testing.T, name string) (token, line string) {
	t.Helper()
	out, err := exec.Command(guardBin, "token", name).Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(out), "\n")
	return strings.TrimSpace(lines[1]), strings.TrimSpace(lines[len(lines)-2])
}

// With bearer tokens configured, guard serve answers only their holders,
// records the token's name as the client, and a session belongs to the
// token that started it.
func TestHTTPBearerTokens(t *testing.T) {
	mk := func(name string) (token, line string) { return newToken(t, name) }
	aliceTok, aliceLine := mk("alice-laptop")
	bobTok, bobLine := mk("bob-ci")
	e, url := serveExample(t, "policy: {default: allow}\nclients:\n  "+aliceLine+"\n  "+bobLine+"\n")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	withToken := func(tok string) *http.Client {
		return &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
			r = r.Clone(r.Context())
			if tok != "" {
				r.Header.Set("Authorization", "Bearer "+tok)
			}
			return http.DefaultTransport.RoundTrip(r)
		})}
	}
	connect := func(tok string) (*mcp.ClientSession, error) {
		// A revision with sessions: the last check is about them.
		return mcp.NewClient(&mcp.Implementation{Name: "claims-to-be-someone", Version: "9"}, nil).
			Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: withToken(tok)}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	}
	if _, err := connect(""); err == nil {
		t.Fatal("no token: connected")
	}
	if _, err := connect("not-a-token"); err == nil {
		t.Fatal("a wrong token: connected")
	}
	cs, err := connect(aliceTok)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}}); err != nil {
		t.Fatal(err)
	}
	out, _ := e.guard("audit", "query", "--format", "jsonl", "--tool", "echo")
	if !strings.Contains(out, `"client":"alice-laptop"`) || strings.Contains(out, "claims-to-be-someone") {
		t.Fatalf("the audit must name the token, not the client's claim:\n%s", out)
	}
	// Bob cannot use Alice's session.
	req, _ := http.NewRequest("POST", url, strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"ping"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", cs.ID())
	resp, err := withToken(bobTok).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("another token's session: %d, want 404", resp.StatusCode)
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// everythingHTTP runs @modelcontextprotocol/server-everything in its
// streamableHttp mode and returns its endpoint.
func everythingHTTP(t *testing.T) string {
	t.Helper()
	addr := freePort(t)
	_, port, _ := strings.Cut(addr, ":")
	cmd := exec.Command(guardtest.Node(t), filepath.Join(guardtest.NodeModules(t), "@modelcontextprotocol/server-everything/dist/index.js"), "streamableHttp")
	cmd.Env = append(os.Environ(), "PORT="+port)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	guardtest.WaitHTTP(t, "http://"+addr+"/mcp")
	return "http://" + addr + "/mcp"
}

// The official TypeScript SDK client over Streamable HTTP sees the npm
// reference server the same directly, through guard serve (the server an
// HTTP upstream), and through the aggregate endpoint beside guard's example
// server (tools and prompts named everything__NAME, otherwise the same).
func TestTypeScriptClientOverHTTPThroughGuardServe(t *testing.T) {
	url := everythingHTTP(t)
	sc := tsScenario("everything", "")
	direct := sc(t, []string{"url", url})
	e := newEnv(t, "policy: {default: allow}\naggregate: {enabled: true}\nservers:\n  everything: {url: \""+url+"\", new_tools: allow}\n"+
		"  notes: {command: ["+guardBin+", example-server]}\n")
	base := e.serve()
	sameTranscript(t, "through guard serve", direct, sc(t, []string{"url", base + "/mcp/everything"}))
	aggregate := tsScenario("everything", "", "--prefix", "everything__")(t, []string{"url", base + "/mcp"})
	if aggregate["server"] != "guard" {
		t.Fatalf("the aggregate endpoint's serverInfo: %v", aggregate["server"])
	}
	delete(aggregate, "server")
	delete(direct, "server")
	sameTranscript(t, "through the aggregate endpoint", direct, aggregate)
}

// everythingSSE runs server-everything in its legacy sse mode.
func everythingSSE(t *testing.T) string {
	t.Helper()
	addr := freePort(t)
	_, port, _ := strings.Cut(addr, ":")
	cmd := exec.Command(guardtest.Node(t), filepath.Join(guardtest.NodeModules(t), "@modelcontextprotocol/server-everything/dist/index.js"), "sse")
	cmd.Env = append(os.Environ(), "PORT="+port)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("server-everything (sse) did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "http://" + addr + "/sse"
}

// A legacy HTTP+SSE server (2024-11-05) behind guard: the TypeScript SDK
// client sees server-everything's sse mode the same directly (over SSE)
// and through guard serve (over Streamable HTTP, guard speaking SSE
// upstream).
func TestTypeScriptClientThroughGuardToALegacySSEServer(t *testing.T) {
	url := everythingSSE(t)
	sc := tsScenario("everything", "")
	direct := sc(t, []string{"sse", url})
	e := newEnv(t, "policy: {default: allow}\nservers:\n  everything: {url: \""+url+"\", transport: sse, new_tools: allow}\n")
	sameTranscript(t, "through guard serve", direct, sc(t, []string{"url", e.serve() + "/mcp/everything"}))
}

// sameTranscript fails unless the direct run made calls and got is the
// same transcript.
func sameTranscript(t *testing.T, how string, direct, got transcript) {
	t.Helper()
	if calls, _ := direct["calls"].(map[string]any); len(calls) < 5 {
		t.Fatalf("the direct run made few calls: %v", direct)
	}
	if !reflect.DeepEqual(direct, got) {
		a, _ := json.MarshalIndent(direct, "", " ")
		b, _ := json.MarshalIndent(got, "", " ")
		t.Fatalf("%s differs from direct:\ndirect: %s\n%s: %s", how, a, how, b)
	}
}

// A session no request uses for --session-idle ends, and its server
// process with it; a request naming it then gets 404.
func TestHTTPIdleSessionsEnd(t *testing.T) {
	var log lockedLog
	_, url := serveExampleLogging(t, &log, "", "--session-idle", "1s")
	post := func(session, body string) *http.Response {
		resp, _ := rawPost(t, url, session, body)
		return resp
	}
	resp := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	id := resp.Header.Get("Mcp-Session-Id")
	if r := post(id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); r.StatusCode != http.StatusAccepted {
		t.Fatalf("initialized: %d", r.StatusCode)
	}
	// Idle for the second, the session ends, and its server with it:
	// guard says so, and then a request naming it gets 404.
	ended := `msg="session ended: idle" server=notes session=` + id
	exited := `msg="session's server exited" server=notes session=` + id
	if l := log.waitFor(20*time.Second, ended, exited); !strings.Contains(l, ended) || !strings.Contains(l, exited) {
		t.Fatalf("the idle session or its server did not end; guard's log:\n%s", l)
	}
	if r := post(id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); r.StatusCode != http.StatusNotFound {
		t.Fatalf("an idle session was kept: %d", r.StatusCode)
	}
}

// openPost posts one body as a client that takes JSON or SSE, in the
// session named (none: ""); the caller reads and closes the response.
func openPost(t *testing.T, ctx context.Context, url, session, body string) *http.Response {
	t.Helper()
	h := http.Header{}
	if session != "" {
		h.Set("Mcp-Session-Id", session)
	}
	return openPostWith(t, ctx, url, h, body)
}

// openPostWith posts one body as a client that takes JSON or SSE, with
// the headers given added; the caller reads and closes the response.
func openPostWith(t *testing.T, ctx context.Context, url string, header http.Header, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// rawPost posts one body to a guard serve endpoint as a client that takes
// JSON or SSE, in the session named (none: ""), and returns the response
// and its first message (the body, or an SSE answer's first event).
func rawPost(t *testing.T, url, session, body string) (*http.Response, map[string]any) {
	t.Helper()
	resp := openPost(t, context.Background(), url, session, body)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	s := string(b)
	if i := strings.Index(s, "data: "); i >= 0 {
		s = s[i+6:]
		s = s[:strings.IndexByte(s, '\n')]
	}
	var m map[string]any
	_ = json.Unmarshal([]byte(s), &m)
	return resp, m
}

// A pretty-printed body (newlines between tokens, a batch across lines) is
// one message per element, answered like a compact one (in a session of
// 2025-03-26, the revision that allows batches).
func TestHTTPPrettyPrintedBodies(t *testing.T) {
	_, url := serveExample(t, "policy: {default: allow}\n")
	post := func(session, body string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("MCP-Protocol-Version", "2025-03-26")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := http.DefaultClient.Do(req.WithContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(b)
	}
	resp, body := post("", "{\n  \"jsonrpc\": \"2.0\",\n  \"id\": 1,\n  \"method\": \"initialize\",\n  \"params\": {\n    \"protocolVersion\": \"2025-03-26\",\n"+
		"    \"capabilities\": {},\n    \"clientInfo\": {\"name\": \"pretty\", \"version\": \"1\"}\n  }\n}\n")
	session := resp.Header.Get("Mcp-Session-Id")
	if session == "" || !strings.Contains(body, `"protocolVersion":"2025-03-26"`) {
		t.Fatalf("pretty-printed initialize: %d %s", resp.StatusCode, body)
	}
	if resp, body := post(session, "{\n\"jsonrpc\": \"2.0\",\r\n\"method\": \"notifications/initialized\"\n}"); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("initialized: %d %s", resp.StatusCode, body)
	}
	_, body = post(session, "[\n {\"jsonrpc\": \"2.0\", \"id\": 2, \"method\": \"tools/call\",\n  \"params\": {\"name\": \"echo\", \"arguments\": {\"text\": \"two\\nlines\"}}},\n"+
		" {\"jsonrpc\": \"2.0\", \"id\": 3,\n  \"method\": \"ping\"}\n]\n")
	var answers []map[string]any
	if err := json.Unmarshal([]byte(body), &answers); err != nil || len(answers) != 2 {
		t.Fatalf("pretty-printed batch: %v %s", err, body)
	}
	if !strings.Contains(body, `two\nlines`) {
		t.Fatalf("the echo's answer: %s", body)
	}
	// A batch of one is answered with a batch of one.
	_, body = post(session, "[\n {\"jsonrpc\": \"2.0\", \"id\": 4, \"method\": \"ping\"}\n]")
	if err := json.Unmarshal([]byte(body), &answers); err != nil || len(answers) != 1 {
		t.Fatalf("a batch of one: %v %s", err, body)
	}
}

// callResult is what a call made in its own goroutine returned.
type callResult struct {
	r   *mcp.CallToolResult
	err error
}

// goCall makes a call in its own goroutine, which does not use t: it may
// outlive a test that fails meanwhile.
func goCall(call func() (*mcp.CallToolResult, error)) <-chan callResult {
	got := make(chan callResult, 1)
	go func() {
		r, err := call()
		got <- callResult{r, err}
	}()
	return got
}

// awaitCall returns the result of goCall, failing the test on an error or
// after a minute.
func awaitCall(t *testing.T, got <-chan callResult) *mcp.CallToolResult {
	t.Helper()
	select {
	case res := <-got:
		if res.err != nil {
			t.Fatalf("the call: %v", res.err)
		}
		return res.r
	case <-time.After(time.Minute):
		t.Fatal("the call never ended")
	}
	return nil
}

// A traced call through guard serve: its count and duration carry the
// client's trace id as their exemplar in OpenMetrics, guard's spans reach
// the collector in that trace, and the tracer's own counts are series.
func TestHTTPTracedCallExemplar(t *testing.T) {
	oc := streamtest.NewOtelcol(t, nil)
	_, url := serveExample(t, "telemetry: {otlp: \""+oc.TracesURL()+"\"}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs := connectHTTP(ctx, t, url)
	const tid = "4bf92f3577b34da6a3ce929d0e0e4736"
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"},
		Meta: mcp.Meta{"traceparent": "00-" + tid + "-00f067aa0ba902b7-01"}}); err != nil {
		t.Fatal(err)
	}
	oc.WaitSpans(1, func(s *streamtest.Span) bool { return s.TraceID == tid && s.Attr("gen_ai.tool.name") == "echo" })
	body := scrape(ctx, t, url, "application/openmetrics-text; version=1.0.0")
	for _, want := range []string{
		`guard_calls_total{decision="allowed",outcome="ok",server="notes",tool="echo"} 1.0 # {trace_id="` + tid + `"} 1.0`,
		`guard_call_duration_seconds_bucket{server="notes",le="`, `# {trace_id="` + tid + `"}`,
		"# TYPE guard_trace_spans_ended counter", "# TYPE guard_trace_spans_exported counter",
		"# TYPE guard_trace_spans_failed counter", "# TYPE guard_trace_spans_dropped counter",
		"guard_trace_spans_dropped_total 0",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
}
