package streamable

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// Sessions are bounded, in all and per client (max_sessions): past a
// bound, initialize is answered 503 saying which; a session that ends
// gives its place back. One token opening sessions without end used to
// start a server process for each.
func TestSessionsAreBounded(t *testing.T) {
	h, url := callerFront(t, Options{Sessions: NewSessionLimit(3, 2), Run: holdingRun("", nil)})
	ctx := context.Background()
	open := func(client string, want int, says string) string {
		t.Helper()
		status, body, session := postAs(t, ctx, url, client, initialize, nil)
		if status != want {
			t.Fatalf("%s's session: %d %s, want %d", client, status, body, want)
		}
		if want != http.StatusOK {
			id, code, msg := errorOf(t, body)
			if id != `"init-1"` || code != codeBusy || !strings.Contains(msg, says) {
				t.Fatalf("%s's session refused with %s", client, body)
			}
		}
		return session
	}
	first := open("alice", http.StatusOK, "")
	open("alice", http.StatusOK, "")
	open("alice", http.StatusServiceUnavailable, "Too many sessions of this client: at most 2 at once (max_sessions.per_client)")
	open("bob", http.StatusOK, "")
	open("bob", http.StatusServiceUnavailable, "Too many sessions: guard serves at most 3 at once (max_sessions.total)")

	h.mu.Lock()
	s := h.sessions[first]
	h.mu.Unlock()
	req, _ := http.NewRequest(http.MethodDelete, url, nil)
	req.Header.Set("Mcp-Session-Id", first)
	req.Header.Set("X-Client", "alice")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	<-s.done // its place is given back before
	open("bob", http.StatusOK, "")
}

// On 2026-07-28, where there are no sessions, per_client bounds a
// client's requests in flight.
func TestRequestsInFlightAreBoundedOn20260728(t *testing.T) {
	received := make(chan string, 8)
	_, url := callerFront(t, Options{Sessions: NewSessionLimit(10, 2), Run: holdingRun("tools/list", received)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"}}`
	headers := map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"}
	list := func(id string) string {
		return `{"jsonrpc":"2.0","id":"` + id + `","method":"tools/list","params":{` + meta + `}}`
	}
	for _, id := range []string{"a", "b"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(list(id)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json")
		req.Header.Set("X-Client", "carol")
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		go func() { // held: never answered, until the test ends
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		if m := <-received; m != "tools/list" {
			t.Fatalf("the session read %s", m)
		}
	}
	status, body, _ := postAs(t, ctx, url, "carol", list("c"), headers)
	if id, code, msg := errorOf(t, body); status != http.StatusServiceUnavailable || id != `"c"` || code != codeBusy ||
		!strings.Contains(msg, "Too many requests of this client in flight: at most 2 at once (max_sessions.per_client)") {
		t.Fatalf("a third request in flight: %d %s", status, body)
	}
	headers["Mcp-Method"] = "ping"
	if status, body, _ := postAs(t, ctx, url, "dave", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{`+meta+`}}`, headers); status != http.StatusOK {
		t.Fatalf("another client's request: %d %s", status, body)
	}
}
