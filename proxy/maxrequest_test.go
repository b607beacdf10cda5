package proxy

import (
	"strings"
	"testing"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/internal/storetest"
)

// A valid call of 17 MB ended the go-sdk server behind guard, which reads
// lines of at most 16 MiB: guard refuses a client's message over
// max_request (by default those 16 MiB) with -32600 naming the limit, and
// the server goes on. A notification that large is dropped.
func TestRelayRefusesRequestsOverMaxRequest(t *testing.T) {
	h := newHarness(t, harnessOpts{raw: true, quiet: true, maxMsg: 64 << 20, config: "policy:\n  default: allow\n"})
	h.initialize(guard.Rev20250618)
	big := strings.Repeat("a", 17<<20)
	h.send(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1,"message":"` + big + `"}}`)
	h.send(`{"jsonrpc":"2.0","id":"big","method":"tools/call","params":{"name":"echo","arguments":{"text":"` + big + `"}}}`)
	m := h.next()
	e, _ := m["error"].(map[string]any)
	if msg, _ := e["message"].(string); e == nil || e["code"] != -32600.0 || m["id"] != "big" || !strings.Contains(msg, "larger than max_request (16777216 bytes)") {
		t.Fatalf("the client read %.300v", m)
	}
	h.send(`{"jsonrpc":"2.0","id":"after","method":"tools/call","params":{"name":"echo","arguments":{"text":"still here"}}}`)
	if m := h.next(); m["id"] != "after" || !strings.Contains(mustJSON(m["result"]), "still here") {
		t.Fatalf("the server did not go on: %v", m)
	}
	storetest.WaitRecord(t, h.db.Reader(), func(r *guard.Record) bool {
		return r.Method == "guard/dropped" && strings.Contains(r.Detail, "notifications/progress")
	})
}

// A client's answer to a server's request over max_request does not reach
// the server: its request gets guard's error instead, recorded invalid.
func TestRelayRefusesAnswersOverMaxRequest(t *testing.T) {
	got := make(chan []byte, 100)
	h := newHarness(t, harnessOpts{raw: true, quiet: true, maxReq: 1 << 10, config: "policy:\n  default: allow\n",
		server: scriptedServer(got, func(m map[string]any, _ []byte) []string {
			switch m["method"] {
			case "initialize":
				return []string{initResult(m)}
			case "notifications/initialized":
				return []string{`{"jsonrpc":"2.0","id":"r1","method":"roots/list"}`}
			}
			return nil
		})})
	h.initialize(guard.Rev20250618)
	if m := h.next(); m["method"] != "roots/list" {
		t.Fatalf("the client read %v, want the server's roots/list", m)
	}
	h.send(`{"jsonrpc":"2.0","id":"r1","result":{"roots":[{"uri":"file:///` + strings.Repeat("a", 2<<10) + `"}]}}`)
	if l := serverRead(t, got, `"r1"`); !strings.Contains(l, "-32603") || !strings.Contains(l, "Refused: the client's answer is larger than max_request (1024 bytes)") {
		t.Fatalf("the server read %s", l)
	}
	for _, c := range h.calls() {
		if c.Method == "roots/list" && c.Outcome != guard.OutcomeInvalid {
			t.Fatalf("roots/list: outcome %q, want invalid", c.Outcome)
		}
	}
}
