package proxy

import (
	"strings"
	"testing"

	guard "github.com/guard-mcp/guard"
)

// A resources/read whose uri is given twice passed a rule that denies the
// second: the rules read the first, a JavaScript server the last. A
// request the rules decide on is refused, -32600 and outcome invalid, when
// the server would read it differently: a member twice, or a case variant
// under Unicode case folding, as a Go server reads names.
func TestRelayRefusesAmbiguousGatedRequests(t *testing.T) {
	got := make(chan []byte, 100)
	h := newHarness(t, harnessOpts{raw: true, quiet: true,
		config: "policy:\n  default: allow\n  rules:\n    - {name: no-etc, method: resources/read, uri: \"file:///etc/*\", action: deny}\n",
		server: scriptedServer(got, func(m map[string]any, _ []byte) []string {
			switch m["method"] {
			case "initialize":
				return []string{initResult(m)}
			case "ping":
				return []string{`{"jsonrpc":"2.0","id":"p","result":{}}`}
			}
			return nil
		})})
	h.initialize(guard.Rev20250618)
	for i, params := range []string{
		`{"uri":"notes://welcome","uri":"file:///etc/passwd"}`,
		`{"uri":"notes://welcome","URI":"file:///etc/passwd"}`,
		`{"name":"greeting","arguments":{"who":"a","Who":"b"}}`,
	} {
		method := "resources/read"
		if strings.Contains(params, "name") {
			method = "prompts/get"
		}
		id := string(rune('a' + i))
		h.send(`{"jsonrpc":"2.0","id":"` + id + `","method":"` + method + `","params":` + params + `}`)
		m := h.next()
		if e, _ := m["error"].(map[string]any); e == nil || e["code"] != -32600.0 || m["id"] != id {
			t.Errorf("%s %s: the client read %v, want -32600", method, params, m)
		}
	}
	h.send(`{"jsonrpc":"2.0","id":"p","method":"ping"}`)
	h.next()
	for range len(got) {
		if l := string(<-got); strings.Contains(l, "resources/read") || strings.Contains(l, "prompts/get") {
			t.Errorf("the server read %s", l)
		}
	}
	invalid := 0
	for _, c := range h.calls() {
		if c.Outcome == guard.OutcomeInvalid {
			invalid++
		}
	}
	if invalid != 3 {
		t.Errorf("%d recorded invalid, want 3", invalid)
	}
}
