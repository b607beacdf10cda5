package proxy

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/internal/storetest"
	"github.com/guard-mcp/guard/wire"
)

// nested is a JSON array nested n levels deep.
func nested(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

// A client's message nested 2,000 levels deep (8 KB) ended the go-sdk
// server behind guard, which reads at most 1,000: guard refuses past 512,
// a request with -32600 and its id, a notification without an answer, and
// the server goes on.
func TestRelayRefusesClientMessagesNestedTooDeep(t *testing.T) {
	h := newHarness(t, harnessOpts{raw: true, quiet: true, config: "policy:\n  default: allow\n"})
	h.initialize(guard.Rev20250618)
	deep := `{"_meta":{"x":` + nested(2000) + `}}`
	h.send(`{"jsonrpc":"2.0","method":"notifications/roots/list_changed","params":` + deep + `}`)
	h.send(`{"jsonrpc":"2.0","id":"deep","method":"ping","params":` + deep + `}`)
	h.send(`{"params":` + deep + `,"method":"tools/list","jsonrpc":"2.0","id":"id after"}`)
	for _, id := range []string{"deep", "id after"} {
		m := h.next()
		e, _ := m["error"].(map[string]any)
		if msg, _ := e["message"].(string); e == nil || e["code"] != -32600.0 || m["id"] != id || !strings.Contains(msg, "nested deeper than 512 levels") {
			t.Fatalf("the client read %v, want -32600 for id %q", m, id)
		}
	}
	// 512 levels pass: the message is the first, params the second.
	h.send(`{"jsonrpc":"2.0","id":"512","method":"ping","params":{"_meta":{"x":` + nested(wire.MaxDepth-3) + `}}}`)
	if m := h.next(); m["id"] != "512" || m["result"] == nil {
		t.Fatalf("a message 512 levels deep: the client read %v", m)
	}
	h.send(`{"jsonrpc":"2.0","id":"after","method":"tools/call","params":{"name":"echo","arguments":{"text":"still here"}}}`)
	if m := h.next(); m["id"] != "after" || !strings.Contains(mustJSON(m["result"]), "still here") {
		t.Fatalf("the server did not go on: %v", m)
	}
	storetest.WaitRecord(t, h.db.Reader(), func(r *guard.Record) bool {
		return r.Method == "guard/dropped" && strings.Contains(r.Detail, "notifications/roots/list_changed")
	})
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// A server's message nested too deep never reaches the client: a result
// (written before its id, as the TypeScript SDK writes it) is replaced by
// guard's error, recorded invalid; a request is answered -32600 with its
// id; a notification is dropped. A client's answer nested too deep does
// not reach the server, whose request gets guard's error instead.
func TestRelayRefusesServerMessagesNestedTooDeep(t *testing.T) {
	deep := nested(2000)
	got := make(chan []byte, 100)
	h := newHarness(t, harnessOpts{raw: true, quiet: true, config: "policy:\n  default: allow\n",
		server: scriptedServer(got, func(m map[string]any, _ []byte) []string {
			id, _ := json.Marshal(m["id"])
			switch m["method"] {
			case "initialize":
				return []string{initResult(m)}
			case "tools/list":
				return []string{`{"jsonrpc":"2.0","id":` + string(id) + `,"result":{"tools":[{"name":"deep","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}]}}`}
			case "tools/call":
				return []string{
					`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":` + deep + `}}`,
					`{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{"messages":` + deep + `,"maxTokens":1}}`,
					`{"result":{"content":[],"structuredContent":{"x":` + deep + `}},"jsonrpc":"2.0","id":` + string(id) + `}`,
				}
			case "resources/read":
				return []string{`{"jsonrpc":"2.0","id":` + string(id) + `,"result":{"contents":` + deep + `}}`}
			case "ping":
				return []string{`{"jsonrpc":"2.0","id":"r1","method":"roots/list"}`}
			}
			return nil
		})})
	h.initialize(guard.Rev20250618)
	h.send(`{"jsonrpc":"2.0","id":"list","method":"tools/list"}`)
	h.next()
	h.send(`{"jsonrpc":"2.0","id":"call","method":"tools/call","params":{"name":"deep","arguments":{}}}`)
	m := h.next()
	if r, _ := m["result"].(map[string]any); m["id"] != "call" || r["isError"] != true || !strings.Contains(mustJSON(r), "Refused: the server's result is nested deeper than 512 levels") {
		t.Fatalf("tools/call: the client read %v", m)
	}
	h.send(`{"jsonrpc":"2.0","id":"read","method":"resources/read","params":{"uri":"a"}}`)
	if m := h.next(); m["id"] != "read" || m["error"].(map[string]any)["code"] != -32603.0 {
		t.Fatalf("resources/read: the client read %v", m)
	}
	// The server's deep request was answered by guard.
	if l := serverRead(t, got, `"s1"`); !strings.Contains(l, `-32600`) || !strings.Contains(l, "nested deeper than 512 levels") {
		t.Fatalf("the server read %s, want -32600 for its request", l)
	}
	// A client's answer nested too deep: the server gets guard's error.
	h.send(`{"jsonrpc":"2.0","id":"p","method":"ping"}`)
	if m := h.next(); m["method"] != "roots/list" {
		t.Fatalf("the client read %v, want the server's roots/list", m)
	}
	h.send(`{"jsonrpc":"2.0","id":"r1","result":{"roots":` + deep + `}}`)
	if l := serverRead(t, got, `"r1"`); !strings.Contains(l, `-32603`) || !strings.Contains(l, "Refused: the client's answer is nested deeper than 512 levels") {
		t.Fatalf("the server read %s, want guard's error for its roots/list", l)
	}
	outcomes := map[string]string{}
	for _, c := range h.calls() {
		outcomes[c.Method] = c.Outcome
	}
	for _, method := range []string{"tools/call", "resources/read", "roots/list"} {
		if outcomes[method] != guard.OutcomeInvalid {
			t.Errorf("%s: outcome %q, want invalid", method, outcomes[method])
		}
	}
}

// serverRead returns the next line the scripted server read whose id is
// id (raw JSON), skipping others.
func serverRead(t *testing.T, got <-chan []byte, id string) string {
	t.Helper()
	for {
		select {
		case l := <-got:
			var m map[string]json.RawMessage
			if json.Unmarshal(l, &m) == nil && string(m["id"]) == id {
				return string(l)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the server read nothing with id %s", id)
		}
	}
}
