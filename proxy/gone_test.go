package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/exampleserver"
	"github.com/guard-mcp/guard/store"
)

// holdDelete makes the example server's delete_note call, which the
// default policy holds, and returns its pending approval.
func (h *harness) holdDelete(id string) *guard.Approval {
	h.t.Helper()
	h.send(`{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"delete_note","arguments":{"title":"welcome"}}}`)
	return pendingIn(h.t, h.db)
}

// pendingIn waits for the one pending approval of a database.
func pendingIn(t testing.TB, db *store.DB) *guard.Approval {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		list, err := db.Holds().Approvals(context.Background(), guard.ApprovalPending)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 1 {
			return list[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d pending approvals, want 1", len(list))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// settledWithin waits, at most d (well below the hold's approval.wait, so
// that only the client's going settles it), until an approval is no longer
// pending or, with scope any, is marked as its client gone.
func settledWithin(t testing.TB, db *store.DB, id string, d time.Duration) *guard.Approval {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		a, err := db.Holds().Approval(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if a.State != guard.ApprovalPending || !a.SessionEnded.IsZero() {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("approval %s still pending, its client not marked gone, after %v", id, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// withdrawalReason is the reason of the decision record that withdrew an
// approval ("" when there is none).
func withdrawalReason(t testing.TB, db *store.DB, id string) string {
	t.Helper()
	reason := ""
	if err := db.Reader().Records(context.Background(), func(r *guard.Record) error {
		if r.Kind == guard.KindDecision && r.Approval == id && r.Decision == guard.ApprovalWithdrawn {
			reason = r.Reason
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return reason
}

// outcomeOf waits for the outcome recorded for the call of an approval.
func outcomeOf(t testing.TB, h *harness, callID string) *store.Call {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, c := range h.calls() {
			if c.ID == callID && c.Outcome != "" {
				return c
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no outcome recorded for call %s", callID)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// When its client's input ends, a held call is withdrawn at once, not
// after approval.wait (a minute here), the withdrawal names why, and no
// approval can release it afterwards.
func TestAHeldCallIsWithdrawnWhenItsClientsInputEnds(t *testing.T) {
	h := newHarness(t, harnessOpts{raw: true, wait: time.Minute})
	h.initialize(guard.Rev20250618)
	a := h.holdDelete("1")
	h.toGuard.Close()
	got := settledWithin(t, h.db, a.ID, 5*time.Second)
	if got.State != guard.ApprovalWithdrawn {
		t.Fatalf("the hold of a client whose input ended: %s", got.State)
	}
	if why := withdrawalReason(t, h.db, a.ID); !strings.HasPrefix(why, guard.ClientGoneReason) {
		t.Fatalf("the withdrawal's reason: %q", why)
	}
	if _, err := h.holds.Decide(context.Background(), a.ID, true, "erin", ""); !errors.Is(err, guard.ErrAlreadyDecided) {
		t.Fatalf("approving the call of a client that is gone: %v", err)
	}
	c := outcomeOf(t, h, a.CallID)
	if c.Outcome != guard.OutcomeCancelled || !strings.Contains(c.Detail, "client_gone") {
		t.Fatalf("the call's outcome: %s %s", c.Outcome, c.Detail)
	}
	<-h.done
	for _, c := range h.calls() {
		if c.Tool == "delete_note" && c.Outcome == guard.OutcomeOK {
			t.Fatal("the call of a client that is gone reached the server")
		}
	}
}

// A call told to retry leaves its approval open while its client is
// there; once the client's input ends, it is withdrawn too.
func TestACallToldToRetryIsWithdrawnWhenItsClientsInputEnds(t *testing.T) {
	h := newHarness(t, harnessOpts{raw: true, wait: 200 * time.Millisecond})
	h.initialize(guard.Rev20250618)
	a := h.holdDelete("1")
	if m := h.next(); !strings.Contains(resultText(m), "Waiting for approval") {
		t.Fatalf("the call was not told to retry: %v", m)
	}
	if got, _ := h.db.Holds().Approval(context.Background(), a.ID); got.State != guard.ApprovalPending {
		t.Fatalf("the approval of a call told to retry, its client still there: %s", got.State)
	}
	h.toGuard.Close()
	if got := settledWithin(t, h.db, a.ID, 5*time.Second); got.State != guard.ApprovalWithdrawn {
		t.Fatalf("the approval of a call told to retry, its client gone: %s", got.State)
	}
	if why := withdrawalReason(t, h.db, a.ID); !strings.HasPrefix(why, guard.ClientGoneReason) {
		t.Fatalf("the withdrawal's reason: %q", why)
	}
}

// Under approval.scope: any the hold of a client that went away stays
// decidable, marked as its client gone.
func TestAHoldScopedAnyOutlivesItsClientMarkedGone(t *testing.T) {
	h := newHarness(t, harnessOpts{raw: true, wait: time.Minute, scope: guard.ScopeAny})
	h.initialize(guard.Rev20250618)
	a := h.holdDelete("1")
	h.toGuard.Close()
	got := settledWithin(t, h.db, a.ID, 5*time.Second)
	if got.State != guard.ApprovalPending || got.SessionEnded.IsZero() {
		t.Fatalf("a hold scoped any, its client gone: %s, client gone at %v", got.State, got.SessionEnded)
	}
	if c := outcomeOf(t, h, a.CallID); c.Outcome != guard.OutcomeCancelled {
		t.Fatalf("the call's outcome: %s", c.Outcome)
	}
}

// A write to the client that fails means the client is gone, although its
// input is still open.
func TestAHeldCallIsWithdrawnWhenAWriteToItsClientFails(t *testing.T) {
	h := newHarness(t, harnessOpts{raw: true, wait: time.Minute})
	h.initialize(guard.Rev20250618)
	a := h.holdDelete("1")
	h.fromG.Close() // the client reads no more
	h.send(`{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	if got := settledWithin(t, h.db, a.ID, 5*time.Second); got.State != guard.ApprovalWithdrawn {
		t.Fatalf("the hold of a client guard can no longer write to: %s", got.State)
	}
	if why := withdrawalReason(t, h.db, a.ID); why != goneWriteFailed {
		t.Fatalf("the withdrawal's reason: %q", why)
	}
}

// resultText is the text of a tools/call result guard wrote.
func resultText(m map[string]any) string {
	res, _ := m["result"].(map[string]any)
	content, _ := res["content"].([]any)
	var b strings.Builder
	for _, c := range content {
		if cm, ok := c.(map[string]any); ok {
			s, _ := cm["text"].(string)
			b.WriteString(s)
		}
	}
	return b.String()
}

// httpFront serves the example server (in process, over pipes, one per
// session) through guard's HTTP front, with holds that wait a minute.
type httpFront struct {
	url string
	db  *store.DB
}

// exampleChild runs a session's example server in process, over pipes, as
// a child's stdin and stdout.
func exampleChild(ctx context.Context, opts Options, conn Conn, started chan<- error) (int, error) {
	return watchedChild(io.Discard)(ctx, opts, conn, started)
}

// watchedChild is exampleChild whose server's input is copied to seen.
func watchedChild(seen io.Writer) func(ctx context.Context, opts Options, conn Conn, started chan<- error) (int, error) {
	return func(ctx context.Context, opts Options, conn Conn, started chan<- error) (int, error) {
		if started != nil {
			started <- nil
		}
		toR, toW := io.Pipe()
		fromR, fromW := io.Pipe()
		go func() {
			_ = exampleserver.Run(ctx, io.NopCloser(io.TeeReader(toR, seen)), fromW)
			fromW.Close()
		}()
		return 0, Run(ctx, conn, NewStreamConn(fromR, toW, opts.MaxMessage), NewSession(ctx, opts))
	}
}

func newHTTPFront(t *testing.T, set func(*HTTPOptions)) *httpFront {
	t.Helper()
	ctx := context.Background()
	opts, db, _ := testOptions(t, ctx, "", time.Minute)
	front := httptest.NewUnstartedServer(nil)
	ho := HTTPOptions{Name: "notes", AllowedHosts: []string{front.Listener.Addr().String()},
		Child: exampleChild, Session: func(Caller) Options { return opts }}
	if set != nil {
		set(&ho)
	}
	h := NewHTTPServer(ho)
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
	a := pendingIn(t, f.db)
	req, _ := http.NewRequest(http.MethodDelete, f.url, nil)
	req.Header.Set("Mcp-Session-Id", session)
	dr, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	dr.Body.Close()
	if got := settledWithin(t, f.db, a.ID, 5*time.Second); got.State != guard.ApprovalWithdrawn {
		t.Fatalf("the hold of a deleted session: %s", got.State)
	}
}

// A held call whose response stream dropped and was not resumed in time
// counts as its client gone; one resumed in time goes on waiting.
func TestHTTPAStreamNotResumedInTimeWithdrawsItsHold(t *testing.T) {
	f := newHTTPFront(t, func(o *HTTPOptions) { o.ResumeWithin = 300 * time.Millisecond })
	session := f.start(t)

	// Resumed in time: the hold stays.
	ctx, hangUp := context.WithCancel(context.Background())
	resp := f.post(t, ctx, session, heldCall)
	id := firstEventID(t, resp)
	a := pendingIn(t, f.db)
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
	got := settledWithin(t, f.db, a.ID, 5*time.Second)
	if got.State != guard.ApprovalWithdrawn {
		t.Fatalf("the hold of a stream not resumed: %s", got.State)
	}
	if why := withdrawalReason(t, f.db, a.ID); !strings.Contains(why, "not resumed within 300ms") {
		t.Fatalf("the withdrawal's reason: %q", why)
	}
}

// The idle clock of a session runs while none of its streams is read, a
// held call pending or not: the session then ends, and its hold with it.
func TestHTTPAnIdleSessionWithAHeldCallIsEnded(t *testing.T) {
	f := newHTTPFront(t, func(o *HTTPOptions) {
		o.SessionIdle = 400 * time.Millisecond
		o.ResumeWithin = time.Hour // only the idle clock ends it
	})
	session := f.start(t)
	ctx, hangUp := context.WithCancel(context.Background())
	resp := f.post(t, ctx, session, heldCall)
	firstEventID(t, resp)
	a := pendingIn(t, f.db)
	hangUp()
	resp.Body.Close()
	if got := settledWithin(t, f.db, a.ID, 10*time.Second); got.State != guard.ApprovalWithdrawn {
		t.Fatalf("the hold of an idle session: %s", got.State)
	}
	r := f.post(t, context.Background(), session, `{"jsonrpc":"2.0","id":9,"method":"ping"}`)
	r.Body.Close()
	if r.StatusCode != http.StatusNotFound {
		t.Fatalf("the idle session still answers: %s", r.Status)
	}
}
