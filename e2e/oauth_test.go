package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/guard-mcp/guard/auth"
	"github.com/guard-mcp/guard/auth/oidctest"
	"github.com/guard-mcp/guard/e2e/guardtest"
)

// The people and clients of the tests' identity provider.
var (
	oidcAlice = oidctest.User{Subject: "alice", Email: "alice@example.com", Groups: []string{"sre", "staff"}}
	oidcBob   = oidctest.User{Subject: "bob", Email: "bob@example.com", Groups: []string{"contractors"}}
	// An MCP client on a desktop: public, PKCE, a loopback redirect on
	// any port.
	tsPublic = oidctest.Client{ID: "ts-public", RedirectURIs: []string{"http://127.0.0.1/callback"}}
	// A confidential client (a hosted agent).
	tsConfidential = oidctest.Client{ID: "ts-confidential", Secret: "conf-secret", RedirectURIs: []string{"http://127.0.0.1:33418/callback"}}
	// guard's own registration: introspection and token exchange.
	guardClient = oidctest.Client{ID: "guard", Secret: "guard-secret", RedirectURIs: []string{"http://127.0.0.1:1/unused"}}
)

const guardAudience = "https://guard.test/mcp"

func startProvider(t *testing.T, o oidctest.Options) *oidctest.Provider {
	o.Users = append(o.Users, oidcAlice, oidcBob)
	o.Clients = append(o.Clients, tsPublic, tsConfidential, guardClient)
	return oidctest.Start(t, o)
}

// serveOAuth runs guard serve with the example server as "notes" behind
// access tokens of p's, and returns guard's base URL.
func serveOAuth(t *testing.T, p *oidctest.Provider, config string, flags ...string) (*env, string) {
	t.Helper()
	e := newEnv(t, fmt.Sprintf("auth:\n  issuer: %s\n  audience: %s\n  scopes: [mcp]\n  introspection: {client_id: guard, client_secret: \"${INTRO_SECRET}\"}\n", p.Issuer, guardAudience)+
		config+"servers:\n  notes:\n    command: ["+guardBin+", example-server]\n")
	e.environ = append(e.environ, "INTRO_SECRET="+guardClient.Secret)
	return e, e.serve(flags...)
}

// oauthTranscript is what testdata/node/oauth-client.mjs prints.
type oauthTranscript struct {
	Fetched       []string `json:"fetched"`
	Authorization struct {
		Resource            string `json:"resource"`
		Scope               string `json:"scope"`
		CodeChallengeMethod string `json:"code_challenge_method"`
	} `json:"authorization"`
	Tools []string `json:"tools"`
	Call  *struct {
		IsError bool   `json:"isError"`
		Text    string `json:"text"`
	} `json:"call"`
	TokenType string `json:"tokenType"`
}

// tsOAuth runs the TypeScript SDK's client through the whole OAuth flow
// as client, logging in as user, and calls tool.
func tsOAuth(t *testing.T, url string, c oidctest.Client, user, tool, args string) oauthTranscript {
	t.Helper()
	guardtest.Peer(t, "", "testdata/node/node_modules/@modelcontextprotocol/sdk")
	cmdArgs := []string{filepath.Join(guardtest.RepoRoot(), "testdata/node/oauth-client.mjs"), "--url", url,
		"--client-id", c.ID, "--redirect", "http://127.0.0.1:33418/callback", "--user", user, "--tool", tool, "--args", args}
	if c.Secret != "" {
		cmdArgs = append(cmdArgs, "--client-secret", c.Secret)
	}
	cmd := exec.Command(guardtest.Node(t), cmdArgs...)
	cmd.Dir = filepath.Join(guardtest.RepoRoot(), "testdata/node")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("TypeScript OAuth client: %v\n%s", err, stderr.String())
	}
	var tr oauthTranscript
	if err := json.Unmarshal(out, &tr); err != nil {
		t.Fatalf("TypeScript OAuth client output: %v\n%s", err, out)
	}
	return tr
}

// The official TypeScript SDK client, knowing only guard's URL and its
// pre-registered client id, finds the identity provider through guard's
// 401 and Protected Resource Metadata, logs in with authorization code and
// PKCE, asks for guard's endpoint as the resource, and calls a tool; the
// caller's groups reach policy, and the record names the OAuth client.
func TestOAuthTypeScriptClientLogsInAndCallsATool(t *testing.T) {
	p := startProvider(t, oidctest.Options{})
	e, base := serveOAuth(t, p, `policy:
  default: allow
  rules:
    - {name: sre-deletes, tool: delete_note, when: "!('sre' in user.groups)", action: deny, reason: "only sre may delete notes"}
`)
	url := base + "/mcp/notes"
	tr := tsOAuth(t, url, tsPublic, "alice", "delete_note", `{"title":"welcome"}`)
	if tr.Call == nil || tr.Call.IsError || tr.Call.Text != "deleted welcome" {
		t.Fatalf("alice's call: %+v", tr.Call)
	}
	for _, want := range []string{
		"POST /mcp/notes 401", // the first try, without a token
		"GET /.well-known/oauth-protected-resource/mcp/notes 200",
		"GET /.well-known/openid-configuration 200",
		"POST /oauth/token 200",
		"POST /mcp/notes 200",
	} {
		if !slices.Contains(tr.Fetched, want) {
			t.Errorf("the client never did %q: %q", want, tr.Fetched)
		}
	}
	if tr.Authorization.Resource != url || tr.Authorization.Scope != "mcp" || tr.Authorization.CodeChallengeMethod != "S256" {
		t.Errorf("the authorization request: %+v", tr.Authorization)
	}
	if !slices.Contains(tr.Tools, "delete_note") {
		t.Errorf("tools: %v", tr.Tools)
	}
	// bob, a contractor, through a confidential client: the rule on
	// groups denies him.
	tr = tsOAuth(t, url, tsConfidential, "bob", "delete_note", `{"title":"welcome"}`)
	if tr.Call == nil || !tr.Call.IsError || !strings.Contains(tr.Call.Text, `Denied by policy rule "sre-deletes": only sre may delete notes`) {
		t.Fatalf("bob's call: %+v", tr.Call)
	}
	out, code := e.guard("audit", "query", "--format", "jsonl", "--tool", "delete_note")
	if code != 0 {
		t.Fatal(out)
	}
	var rows []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		rows = append(rows, m)
	}
	if len(rows) != 2 {
		t.Fatalf("%d calls of delete_note recorded:\n%s", len(rows), out)
	}
	// Newest first: bob's, then alice's.
	if rows[0]["client"] != "ts-confidential" || rows[0]["decision"] != "denied" || rows[0]["decided_by"] != "sre-deletes" {
		t.Errorf("bob's call: %v", rows[0])
	}
	if rows[1]["client"] != "ts-public" || rows[1]["decision"] != "allowed" || rows[1]["outcome"] != "ok" {
		t.Errorf("alice's call: %v", rows[1])
	}
}

// post sends one JSON-RPC message to url with an Authorization header
// (none for ""), in session when not "".
func postAs(t *testing.T, url, token, session, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// Tokens guard must refuse are refused with the status and the
// WWW-Authenticate that say why; the metadata names the provider; an
// opaque token is checked by introspection; a static token still works,
// for a caller without a user; a session is its caller's alone.
func TestOAuthRefusalsAndMetadata(t *testing.T) {
	p := startProvider(t, oidctest.Options{})
	other := startProvider(t, oidctest.Options{})
	tok, line := newToken(t, "ci-bot")
	_, base := serveOAuth(t, p, "clients:\n  "+line+"\naggregate: {enabled: true}\npolicy:\n  default: allow\n  rules:\n    - {name: alice-reads, tool: read_note, users: [alice@example.com], action: allow}\n    - {name: others-no, tool: read_note, action: deny, reason: alice only}\n")
	url := base + "/mcp/notes"
	meta := base + "/.well-known/oauth-protected-resource/mcp/notes"

	// The metadata, for each endpoint.
	for path, resource := range map[string]string{"/mcp/notes": url, "/mcp": base + "/mcp"} {
		resp, err := http.Get(base + auth.MetadataPath(path))
		if err != nil {
			t.Fatal(err)
		}
		var m auth.ResourceMetadata
		err = json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || m.Resource != resource || !slices.Equal(m.AuthorizationServers, []string{p.Issuer}) ||
			!slices.Equal(m.ScopesSupported, []string{"mcp"}) || !slices.Equal(m.BearerMethodsSupported, []string{"header"}) {
			t.Errorf("%s's metadata: %d %+v %v", path, resp.StatusCode, m, err)
		}
	}

	good := oidctest.Mint{Subject: "alice", ClientID: "ts-public", Audience: []string{guardAudience}, Scopes: []string{"mcp"}}
	with := func(f func(*oidctest.Mint)) string {
		m := good
		f(&m)
		return p.Mint(t, m)
	}
	parts := strings.Split(p.Mint(t, good), ".")
	parts[1] = strings.Split(with(func(m *oidctest.Mint) { m.Subject = "bob" }), ".")[1]
	tampered := strings.Join(parts, ".")
	challenge := func(code, desc string) string {
		return `Bearer error="` + code + `", error_description="` + desc + `", resource_metadata="` + meta + `", scope="mcp"`
	}
	for _, tc := range []struct {
		name, token string
		status      int
		challenge   string // a prefix of it
	}{
		{"no token", "", 401, `Bearer resource_metadata="` + meta + `", scope="mcp"`},
		{"wrong audience", with(func(m *oidctest.Mint) { m.Audience = []string{"https://elsewhere.test/api"} }), 401,
			challenge("invalid_token", `the token is for 'https://elsewhere.test/api', not for 'https://guard.test/mcp', '`+url+`'`)},
		{"expired", with(func(m *oidctest.Mint) { m.Lifetime = -time.Hour }), 401, `Bearer error="invalid_token", error_description="the token expired at `},
		{"another issuer", other.Mint(t, good), 401, challenge("invalid_token", `the token was issued by '`+other.Issuer+`', not by '`+p.Issuer+`'`)},
		{"tampered", tampered, 401, challenge("invalid_token", "the token's signature does not verify with the issuer's keys")},
		{"missing scope", with(func(m *oidctest.Mint) { m.Scopes = []string{"openid"} }), 403, challenge("insufficient_scope", "the token lacks the scope mcp")},
		{"an unknown opaque token", "0123456789abcdef", 401, challenge("invalid_token", "the identity provider says the token is not active (expired, revoked or unknown to it)")},
		{"a wrong static token", strings.Repeat("0", 64), 401, `Bearer error="invalid_token"`},
	} {
		resp := postAs(t, url, tc.token, "", initialize)
		got := resp.Header.Get("WWW-Authenticate")
		if resp.StatusCode != tc.status || !strings.HasPrefix(got, tc.challenge) {
			b, _ := io.ReadAll(resp.Body)
			t.Errorf("%s: %d %q (%s), want %d %q", tc.name, resp.StatusCode, got, b, tc.status, tc.challenge)
		}
	}

	// Accepted: a JWT for guard's audience, an opaque token checked by
	// introspection, a static token. Each starts a session of its own.
	sessions := map[string]string{}
	for name, token := range map[string]string{
		"alice": p.Mint(t, good),
		"bob":   p.Mint(t, oidctest.Mint{Subject: "bob", ClientID: "ts-public", Audience: []string{guardAudience}, Scopes: []string{"mcp"}, Opaque: true}),
		"ci":    tok,
	} {
		resp := postAs(t, url, token, "", initialize)
		if resp.StatusCode != 200 || resp.Header.Get("Mcp-Session-Id") == "" {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("%s: %d %s", name, resp.StatusCode, b)
		}
		sessions[name] = resp.Header.Get("Mcp-Session-Id")
		postAs(t, url, token, sessions[name], `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		// users: [alice@example.com] matches alice alone: bob, and the
		// static token's caller (no user), are denied.
		resp = postAs(t, url, token, sessions[name], `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"read_note","arguments":{"title":"welcome"}}}`)
		b, _ := io.ReadAll(resp.Body)
		denied := strings.Contains(string(b), `Denied by policy rule \"others-no\": alice only`)
		if denied != (name != "alice") {
			t.Errorf("%s's read_note: %s", name, b)
		}
	}
	// A session belongs to the caller that started it: bob's token, even
	// fresh and valid, does not reach alice's session.
	bobJWT := p.Mint(t, oidctest.Mint{Subject: "bob", ClientID: "ts-public", Audience: []string{guardAudience}, Scopes: []string{"mcp"}})
	if resp := postAs(t, url, bobJWT, sessions["alice"], `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`); resp.StatusCode != 404 {
		t.Errorf("bob in alice's session: %d", resp.StatusCode)
	}
	// alice with a new token (refreshed) goes on in her session.
	if resp := postAs(t, url, p.Mint(t, good), sessions["alice"], `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`); resp.StatusCode != 200 {
		t.Errorf("alice's refreshed token in her session: %d", resp.StatusCode)
	}
	// /metrics takes either kind of token.
	for _, token := range []string{tok, p.Mint(t, good), ""} {
		req, _ := http.NewRequest("GET", base+"/metrics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if (resp.StatusCode == 200) != (token != "") {
			t.Errorf("/metrics with %q: %d", token, resp.StatusCode)
		}
	}
}

// upstream is a real go-sdk Streamable HTTP server that notes the
// Authorization header of every request it receives.
type upstream struct {
	URL  string
	mu   sync.Mutex
	seen []string
}

func startUpstream(t *testing.T) *upstream {
	s := mcp.NewServer(&mcp.Implementation{Name: "upstream", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "hello", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello from upstream"}}}, nil, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	u := &upstream{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, r.Header.Get("Authorization"))
		u.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	u.URL = srv.URL
	return u
}

func (u *upstream) authorizations() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.seen)
}

// The caller's access token never reaches an upstream server: one with
// configured credentials receives those; one with a token exchange
// receives a token the provider issued for it, on the caller's behalf,
// obtained once and kept.
func TestOAuthCallerTokenNeverTravelsUpstream(t *testing.T) {
	p := startProvider(t, oidctest.Options{})
	static, exchanged := startUpstream(t), startUpstream(t)
	ciToken, ciLine := newToken(t, "ci-bot")
	e := newEnv(t, fmt.Sprintf(`auth: {issuer: %s, audience: %s, scopes: [mcp]}
clients:
  `+ciLine+`
policy: {default: allow}
servers:
  static:
    url: %s/mcp
    headers: {Authorization: "Bearer ${UPSTREAM_TOKEN}"}
  exchanged:
    url: %s/mcp
    token_exchange: {client_id: guard, client_secret: "${EXCHANGE_SECRET}", audience: https://upstream.test, scope: hello}
`, p.Issuer, guardAudience, static.URL, exchanged.URL))
	e.environ = []string{"UPSTREAM_TOKEN=configured-upstream-credential", "EXCHANGE_SECRET=" + guardClient.Secret}
	base := e.serve()
	aliceToken := p.Mint(t, oidctest.Mint{Subject: "alice", ClientID: "ts-public", Audience: []string{guardAudience}, Scopes: []string{"mcp"}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	call := func(server string) {
		t.Helper()
		hc := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
			r = r.Clone(r.Context())
			r.Header.Set("Authorization", "Bearer "+aliceToken)
			return http.DefaultTransport.RoundTrip(r)
		})}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "go", Version: "1"}, nil).
			Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + "/mcp/" + server, HTTPClient: hc}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "hello", Arguments: map[string]any{}})
		if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "hello from upstream" {
			t.Fatalf("%s: %v %v", server, res, err)
		}
	}
	call("static")
	call("exchanged")
	call("exchanged")
	for _, a := range static.authorizations() {
		if a != "Bearer configured-upstream-credential" {
			t.Errorf("the static upstream received %q", a)
		}
	}
	seen := exchanged.authorizations()
	if len(seen) == 0 {
		t.Fatal("the exchanged upstream saw no request")
	}
	upstreamVerifier, _ := auth.New(auth.Config{Issuer: p.Issuer, Audience: "https://upstream.test", Scopes: []string{"hello"}})
	for _, a := range seen {
		if strings.Contains(a, aliceToken) || !strings.HasPrefix(a, "Bearer ") {
			t.Fatalf("the exchanged upstream received %q", a)
		}
		got, err := upstreamVerifier.Verify(ctx, strings.TrimPrefix(a, "Bearer "), "")
		if err != nil || got.User.Subject != "alice" {
			t.Fatalf("the exchanged token: %+v %v", got, err)
		}
		if a != seen[0] {
			t.Errorf("another token for the same subject: the first was not kept")
		}
	}
	if x := p.Exchanges(); len(x) != 1 || x[0].ClientID != "guard" || x[0].Subject != "alice" || !slices.Equal(x[0].Audience, []string{"https://upstream.test"}) {
		t.Errorf("exchanges: %+v", x)
	}
	// A static token's caller has no token to exchange: the upstream is
	// not called, and the client is told why.
	n := len(exchanged.authorizations())
	resp := postAs(t, base+"/mcp/exchanged", ciToken, "", initialize)
	b, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(b), "no credentials for the remote server: token exchange: the caller did not authenticate with an access token") {
		t.Errorf("a static token's caller at the exchanged upstream: %d %s", resp.StatusCode, b)
	}
	// (The earlier sessions' ends may still reach the upstream meanwhile,
	// with alice's exchanged token: a request of the static caller would
	// carry none.)
	for _, a := range exchanged.authorizations()[n:] {
		if a != seen[0] {
			t.Errorf("the upstream was called without credentials: %q", a)
		}
	}
}

// guard policy check shows the rules' users and groups and who the front
// accepts; guard policy test decides a call as a given user would make it.
func TestOAuthPolicyCheckAndTest(t *testing.T) {
	e := newEnv(t, `auth: {issuer: "https://login.example.com", audience: "https://guard.example.com/mcp", scopes: [mcp]}
policy:
  default: allow
  rules:
    - {name: sre-deletes, tool: delete_note, groups: [sre], action: allow}
    - {name: alice-writes, tool: write_note, users: [alice@example.com], when: "size(user.groups) > 0", action: allow}
    - {name: nobody-else, tool: "*_note", action: deny}
servers:
  notes:
    command: [`+guardBin+`, example-server]
`)
	out, code := e.guard("policy", "check")
	if code != 0 {
		t.Fatal(out)
	}
	for _, want := range []string{
		"groups: sre",
		"users: alice@example.com; size(user.groups) > 0",
		"guard serve's clients: access tokens of https://login.example.com for https://guard.example.com/mcp with the scopes mcp",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("policy check lacks %q:\n%s", want, out)
		}
	}
	for call, want := range map[string]string{
		`{"server":"notes","tool":"delete_note","args":{},"user":{"sub":"u1","groups":["sre"]}}`:                              "rule:     sre-deletes",
		`{"server":"notes","tool":"delete_note","args":{},"user":{"sub":"u2","groups":["dev"]}}`:                              "rule:     nobody-else",
		`{"server":"notes","tool":"delete_note","args":{}}`:                                                                   "rule:     nobody-else",
		`{"server":"notes","tool":"write_note","args":{},"user":{"sub":"u1","email":"alice@example.com","groups":["staff"]}}`: "rule:     alice-writes",
	} {
		out, code := e.guard("policy", "test", "--call", call)
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("policy test %s: %d\n%s", call, code, out)
		}
	}
}
