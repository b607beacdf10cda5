package streamable

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/exampleserver"
	"github.com/guard-mcp/guard/internal/relaytest"
	"github.com/guard-mcp/guard/internal/storetest"
	"github.com/guard-mcp/guard/proxy"
	"github.com/guard-mcp/guard/proxy/remote"
	"github.com/guard-mcp/guard/store"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// httpFront serves the example server (over Streamable HTTP, in process)
// through guard's HTTP front, with holds that wait a minute.
type httpFront struct {
	url string
	db  *store.DB
}

// remoteAt is the Options.Remote of a server reached at url.
func remoteAt(url string) func(ctx context.Context, opts proxy.Options, c Caller, conn proxy.Conn) error {
	return func(ctx context.Context, opts proxy.Options, _ Caller, conn proxy.Conn) error {
		return remote.Run(ctx, opts, remote.Remote{URL: url}, conn)
	}
}

// newHTTPFront serves the example server; set, when given, changes the
// front's options, which reach the server at upstream.
func newHTTPFront(t *testing.T, set func(o *Options, upstream string)) *httpFront {
	t.Helper()
	ctx := context.Background()
	srv := exampleserver.New(nil)
	up := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(up.Close)
	opts, db, _ := relaytest.Options(t, ctx, "", time.Minute)
	front := httptest.NewUnstartedServer(nil)
	ho := Options{Name: "notes", AllowedHosts: []string{front.Listener.Addr().String()},
		Remote: remoteAt(up.URL), Session: func(Caller) proxy.Options { return opts }}
	if set != nil {
		set(&ho, up.URL)
	}
	h := NewServer(ho)
	front.Config.Handler = h
	front.Start()
	t.Cleanup(func() { h.Close(); front.Close() })
	return &httpFront{url: front.URL, db: db}
}

// post sends one message of a session; the caller reads and closes the
// response.
func (f *httpFront) post(t *testing.T, ctx context.Context, session, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// start initializes a session of revision 2025-06-18 and returns its id.
func (f *httpFront) start(t *testing.T) string {
	t.Helper()
	return f.startAt(t, guard.Rev20250618)
}

// startAt initializes a session of revision rev and returns its id.
func (f *httpFront) startAt(t *testing.T, rev string) string {
	t.Helper()
	ctx := context.Background()
	resp := f.post(t, ctx, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+rev+`","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	session := resp.Header.Get("Mcp-Session-Id")
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if session == "" {
		t.Fatal("no Mcp-Session-Id")
	}
	f.post(t, ctx, session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`).Body.Close()
	return session
}

// heldCall is the example server's delete_note, with a progress token so
// that guard's progress gives its stream an event id.
const heldCall = `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"delete_note","arguments":{"title":"welcome"},"_meta":{"progressToken":"p"}}}`

// firstEventID reads a response stream up to its first event's id.
func firstEventID(t *testing.T, resp *http.Response) string {
	t.Helper()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if id, ok := strings.CutPrefix(sc.Text(), "id: "); ok {
			return id
		}
	}
	t.Fatal("the stream ended without an event")
	return ""
}

// A session deleted while one of its calls is held withdraws the hold.
func TestHTTPADeletedSessionWithdrawsItsHolds(t *testing.T) {
	f := newHTTPFront(t, nil)
	session := f.start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := f.post(t, ctx, session, heldCall)
	defer resp.Body.Close()
	a := storetest.PendingIn(t, f.db)
	req, _ := http.NewRequest(http.MethodDelete, f.url, nil)
	req.Header.Set("Mcp-Session-Id", session)
	dr, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	dr.Body.Close()
	if got := storetest.SettledWithin(t, f.db, a.ID, 5*time.Second); got.State != guard.ApprovalWithdrawn {
		t.Fatalf("the hold of a deleted session: %s", got.State)
	}
}

// A held call whose response stream dropped and was not resumed in time
// counts as its client gone; one resumed in time goes on waiting.
func TestHTTPAStreamNotResumedInTimeWithdrawsItsHold(t *testing.T) {
	f := newHTTPFront(t, func(o *Options, _ string) { o.ResumeWithin = 300 * time.Millisecond })
	session := f.start(t)

	// Resumed in time: the hold stays.
	ctx, hangUp := context.WithCancel(context.Background())
	resp := f.post(t, ctx, session, heldCall)
	id := firstEventID(t, resp)
	a := storetest.PendingIn(t, f.db)
	hangUp()
	resp.Body.Close()
	rctx, stop := context.WithCancel(context.Background())
	defer stop()
	req, _ := http.NewRequestWithContext(rctx, http.MethodGet, f.url, nil)
	req.Header.Set("Mcp-Session-Id", session)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", id)
	resumed, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resumed.StatusCode != http.StatusOK {
		t.Fatalf("resuming the stream: %s", resumed.Status)
	}
	// Read on: the progress guard sends every 50ms proves the stream is
	// read for longer than ResumeWithin.
	br := bufio.NewScanner(resumed.Body)
	events := 0
	for events < 20 && br.Scan() {
		if strings.HasPrefix(br.Text(), "id: ") {
			events++
		}
	}
	if got, _ := f.db.Holds().Approval(context.Background(), a.ID); got.State != guard.ApprovalPending {
		t.Fatalf("the hold of a stream resumed in time: %s", got.State)
	}
	// Dropped again, and not resumed: the client is gone.
	stop()
	resumed.Body.Close()
	got := storetest.SettledWithin(t, f.db, a.ID, 5*time.Second)
	if got.State != guard.ApprovalWithdrawn {
		t.Fatalf("the hold of a stream not resumed: %s", got.State)
	}
	if why := storetest.WithdrawalReason(t, f.db, a.ID); !strings.Contains(why, "not resumed within 300ms") {
		t.Fatalf("the withdrawal's reason: %q", why)
	}
}

// The idle clock of a session runs while none of its streams is read, a
// held call pending or not: the session then ends, and its hold with it.
func TestHTTPAnIdleSessionWithAHeldCallIsEnded(t *testing.T) {
	f := newHTTPFront(t, func(o *Options, _ string) {
		o.SessionIdle = 400 * time.Millisecond
		o.ResumeWithin = time.Hour // only the idle clock ends it
	})
	session := f.start(t)
	ctx, hangUp := context.WithCancel(context.Background())
	resp := f.post(t, ctx, session, heldCall)
	firstEventID(t, resp)
	a := storetest.PendingIn(t, f.db)
	hangUp()
	resp.Body.Close()
	if got := storetest.SettledWithin(t, f.db, a.ID, 10*time.Second); got.State != guard.ApprovalWithdrawn {
		t.Fatalf("the hold of an idle session: %s", got.State)
	}
	r := f.post(t, context.Background(), session, `{"jsonrpc":"2.0","id":9,"method":"ping"}`)
	r.Body.Close()
	if r.StatusCode != http.StatusNotFound {
		t.Fatalf("the idle session still answers: %s", r.Status)
	}
}
