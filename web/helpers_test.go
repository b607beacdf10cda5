package web_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/approvals"
	"github.com/guard-mcp/guard/policy"
	"github.com/guard-mcp/guard/store"
	"github.com/guard-mcp/guard/web"
)

const testToken = "5f0c6a1e9d2b4c7a8e3f1b0d6c9a2e4f7b1d3c5a8e0f2b4d6c8a1e3f5b7d9c0a"

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// clock is a settable time for session expiry.
type clock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

type allowCall struct{ server, tool, by string }

// env is a UI over a real store and approvals manager, served by httptest.
type env struct {
	t      testing.TB
	db     *store.DB
	m      *approvals.Manager
	ui     *web.Server
	ts     *httptest.Server
	host   string // the allowed Host, 127.0.0.1:PORT
	logs   *syncBuffer
	clock  *clock
	mu     sync.Mutex
	allows []allowCall
}

func newEnv(t testing.TB) *env {
	t.Helper()
	return newEnvAt(t, filepath.Join(t.TempDir(), "g.db"))
}

// pgKeys holds the checkpoint key file of each PostgreSQL database a test
// opens, so that every UI on it (every replica) signs with one key.
var pgKeys sync.Map

// keyPath is the checkpoint key's file for a database: the default beside
// an SQLite file, one per PostgreSQL database (which needs one given).
func keyPath(t testing.TB, path string) string {
	if !store.IsPostgres(path) {
		return ""
	}
	k, _ := pgKeys.LoadOrStore(path, filepath.Join(t.TempDir(), "audit.key"))
	return k.(string)
}

// newEnvAt is newEnv over the database at path (a file, or a PostgreSQL
// database's URL, for each of its replicas); configure, when given,
// changes the UI's options before it starts.
func newEnvAt(t testing.TB, path string, configure ...func(*web.Options)) *env {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, store.Options{Path: path, Durability: "normal", KeyPath: keyPath(t, path)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	e := &env{t: t, db: db, m: approvals.New(db.Holds(), approvals.Options{Timeout: time.Minute}), logs: &syncBuffer{}, clock: &clock{}}
	e.ts = httptest.NewUnstartedServer(nil)
	e.host = e.ts.Listener.Addr().String()
	_, port, _ := strings.Cut(e.host, ":")
	o := web.Options{
		Store:        db,
		Calls:        db.Reader(),
		Holds:        db.Holds(),
		Tools:        db.Catalog(),
		Decider:      e.m,
		Token:        testToken,
		AllowedHosts: []string{e.host, "localhost:" + port},
		AllowAlways: func(a *guard.Approval, by string) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.allows = append(e.allows, allowCall{a.Server, a.Tool, by})
			return nil
		},
		// What the default policy does with each tool, as guard run says.
		Explain: func(t guard.Tool, r *guard.Review) string {
			v := policy.Compile(policy.Default(), nil, nil).Decide(&guard.Call{Server: t.Server, Method: "tools/call",
				ToolName: t.Name, Arguments: []byte("{}"), Tool: &t, Review: r})
			return v.Action + " by " + v.Rule + ": " + v.Reason
		},
		Logger: slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Now:    e.clock.now,
	}
	for _, c := range configure {
		c(&o)
	}
	e.ui, err = web.New(o)
	if err != nil {
		t.Fatal(err)
	}
	e.ts.Config.Handler = e.ui
	e.ts.Start()
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); e.ui.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done; e.ts.Close() })
	return e
}

func (e *env) allowCalls() []allowCall {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]allowCall(nil), e.allows...)
}

// hold creates a pending approval.
func (e *env) hold(server, tool, args string) *guard.Approval {
	e.t.Helper()
	return e.holdWith(&guard.Approval{Server: server, Tool: tool, Arguments: args, Rule: "default",
		HeldReason: "destructive tool", Client: "claude-ai/0.1.0"})
}

func (e *env) holdWith(a *guard.Approval) *guard.Approval {
	e.t.Helper()
	if a.ID == "" {
		a.ID = newID()
	}
	if a.Digest == "" {
		a.Digest = "d-" + a.ID
	}
	got, _, err := e.m.Hold(context.Background(), a)
	if err != nil {
		e.t.Fatal(err)
	}
	return got
}

func (e *env) approval(id string) *guard.Approval {
	e.t.Helper()
	a, err := e.db.Holds().Approval(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return a
}

// tool makes a tool definition with a pin over its text.
func tool(server, name, def string) guard.Tool {
	var head struct {
		Annotations guard.Annotations `json:"annotations"`
	}
	_ = json.Unmarshal([]byte(def), &head)
	return guard.Tool{Server: server, Name: name, Def: json.RawMessage(def), Pin: fmt.Sprintf("sha256:%x", sha(def)),
		Annotations: head.Annotations}
}

// browser is an HTTP client with a cookie jar, that does not follow
// redirects.
type browser struct {
	t      testing.TB
	e      *env
	c      *http.Client
	csrf   string
	origin string
}

func (e *env) client() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: e.t, e: e, origin: "http://" + e.host, c: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// login logs in and gives a name, as a person would.
func (e *env) login(name string) *browser {
	e.t.Helper()
	b := e.client()
	res, _ := b.get("/login?token=" + testToken)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/" {
		e.t.Fatalf("login: %d %s", res.StatusCode, res.Header.Get("Location"))
	}
	_, body := b.get("/name")
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		e.t.Fatalf("no CSRF token on the name page: %s", body)
	}
	b.csrf = m[1]
	if name != "" {
		res, _ = b.post("/name", url.Values{"name": {name}, "next": {"/"}})
		if res.StatusCode != http.StatusSeeOther {
			e.t.Fatalf("name: %d", res.StatusCode)
		}
	}
	return b
}

func (b *browser) do(req *http.Request) (*http.Response, string) {
	b.t.Helper()
	res, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res, string(body)
}

func (b *browser) get(path string) (*http.Response, string) {
	b.t.Helper()
	req, _ := http.NewRequest("GET", b.e.ts.URL+path, nil)
	return b.do(req)
}

// post sends a form with the session's CSRF token and the page's Origin.
func (b *browser) post(path string, form url.Values) (*http.Response, string) {
	b.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	if _, ok := form["csrf"]; !ok {
		form.Set("csrf", b.csrf)
	}
	req, _ := http.NewRequest("POST", b.e.ts.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if b.origin != "" {
		req.Header.Set("Origin", b.origin)
	}
	return b.do(req)
}

func sha(s string) [32]byte { return sha256.Sum256([]byte(s)) }

func newID() string {
	id, _ := uuid.NewV7()
	return id.String()
}
