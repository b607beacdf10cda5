package proxy

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
)

// lateServer is a scripted server that answers tools/call and
// resources/read only when it is pinged, the cancelled ones too (late
// answers, as go-sdk servers send them), before the ping's own answer.
func lateServer(got chan<- []byte) harnessOpts {
	var open []string
	return harnessOpts{raw: true, config: "policy:\n  default: allow\n", server: scriptedServer(got, func(m map[string]any, _ []byte) []string {
		id, _ := json.Marshal(m["id"])
		switch m["method"] {
		case "initialize":
			return []string{initResult(m)}
		case "tools/list":
			return []string{`{"jsonrpc":"2.0","id":` + string(id) + `,"result":{"tools":[{"name":"slow","inputSchema":{"type":"object"}}]}}`}
		case "tools/call", "resources/read":
			open = append(open, string(id))
		case "ping":
			var out []string
			for _, o := range open {
				out = append(out, `{"jsonrpc":"2.0","id":`+o+`,"result":{"content":[{"type":"text","text":"late"}],"contents":[]}}`)
			}
			open = nil
			return append(out, `{"jsonrpc":"2.0","id":`+string(id)+`,"result":{}}`)
		}
		return nil
	})}
}

// serverGot waits for the server to read a message of method, and returns it.
func serverGot(t *testing.T, got <-chan []byte, method string) map[string]any {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case l := <-got:
			var m map[string]any
			if json.Unmarshal(l, &m) == nil && m["method"] == method {
				return m
			}
		case <-deadline:
			t.Fatalf("the server never read %s", method)
		}
	}
}

// A forwarded call the client cancels: the server is told under the id it
// knows (guard's own when guard rewrote it), the outcome is recorded as
// cancelled, and the server's late answer never reaches the client.
func TestRelayCancelledCallIsRecordedAndItsLateAnswerDropped(t *testing.T) {
	got := make(chan []byte, 100)
	h := newHarness(t, lateServer(got))
	h.initialize(guard.Rev20250618)
	h.send(`{"jsonrpc":"2.0","id":"l","method":"tools/list"}`)
	h.next()

	h.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow","arguments":{"n":"A"}}}`)
	if m := serverGot(t, got, "tools/call"); m["id"] != 1.0 {
		t.Fatalf("first call reached the server as %v", m["id"])
	}
	h.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"user stopped it"}}`)
	if m := serverGot(t, got, "notifications/cancelled"); m["params"].(map[string]any)["requestId"] != 1.0 {
		t.Fatalf("cancellation reached the server as %v", m)
	}
	// The same id again: the server may still answer the cancelled call,
	// so this one goes under guard's id, and so does its cancellation.
	h.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow","arguments":{"n":"C"}}}`)
	second, _ := serverGot(t, got, "tools/call")["id"].(string)
	if !strings.HasPrefix(second, "guard-") {
		t.Fatalf("a reused id of a cancelled call was not rewritten: %q", second)
	}
	h.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`)
	if m := serverGot(t, got, "notifications/cancelled"); m["params"].(map[string]any)["requestId"] != second {
		t.Fatalf("cancellation of a rewritten id reached the server as %v", m)
	}
	// A resources/read, cancelled too.
	h.send(`{"jsonrpc":"2.0","id":"r","method":"resources/read","params":{"uri":"file:///x"}}`)
	serverGot(t, got, "resources/read")
	h.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"r"}}`)
	serverGot(t, got, "notifications/cancelled")

	// The server wrote its late answers before the ping's: had any
	// reached the client, it would come first.
	h.send(`{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	if m := h.next(); m["id"] != 2.0 {
		t.Fatalf("the client got an answer to a request it cancelled: %v", m)
	}

	want := map[string]bool{`{"n":"A"}`: true, `{"n":"C"}`: true, "resources/read": true}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var cancelled []*store.Call
		for _, c := range h.calls() {
			if c.Outcome == guard.OutcomeCancelled {
				cancelled = append(cancelled, c)
			}
		}
		dropped := 0
		if err := h.db.Reader().Records(context.Background(), func(r *guard.Record) error {
			if r.Kind == guard.KindEvent && r.Method == "guard/dropped" && strings.Contains(r.Detail, "the client cancelled") {
				dropped++
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(cancelled) == 3 && dropped == 3 {
			for _, c := range cancelled {
				key := c.Arguments
				if c.Method == "resources/read" {
					key = c.Method
				}
				if !want[key] || c.Decision == guard.DecisionDenied {
					t.Fatalf("unexpected cancelled record: %+v", c)
				}
				delete(want, key)
			}
			if !strings.Contains(cancelled[len(cancelled)-1].Detail, "user stopped it") {
				t.Fatalf("the client's reason is not recorded: %s", cancelled[len(cancelled)-1].Detail)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("records: %d cancelled, %d dropped answers", len(cancelled), dropped)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
