package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
)

// scriptedServer is a stdio server that writes what a real one cannot
// (raw lines with duplicate keys, invalid UTF-8, unusable ids): answer
// returns the lines to write for each line guard sends (nil: none), and got
// receives every line guard sent.
func scriptedServer(got chan<- []byte, answer func(m map[string]any, line []byte) []string) func(ctx context.Context, in io.ReadCloser, out io.WriteCloser) {
	return func(ctx context.Context, in io.ReadCloser, out io.WriteCloser) {
		// Writes go through their own goroutine, as through an OS pipe's
		// buffer: the test's pipes have none, and guard answers some
		// lines while the server is still writing.
		lines := make(chan string, 100)
		go func() {
			defer out.Close()
			for l := range lines {
				if _, err := io.WriteString(out, l+"\n"); err != nil {
					return
				}
			}
		}()
		defer close(lines)
		sc := bufio.NewScanner(in)
		sc.Buffer(nil, 4<<20)
		for sc.Scan() {
			line := append([]byte(nil), sc.Bytes()...)
			if got != nil {
				got <- line
			}
			var m map[string]any
			_ = json.Unmarshal(line, &m)
			for _, l := range answer(m, line) {
				lines <- l
			}
		}
	}
}

// initResult answers initialize with a server that has tools.
func initResult(m map[string]any) string {
	id, _ := json.Marshal(m["id"])
	return `{"jsonrpc":"2.0","id":` + string(id) + `,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"scripted","version":"1"}}}`
}

// A server's request whose id no client reads the same way is answered by
// guard (-32600, id null) and never reaches the client; a server's
// response with such an id is dropped and recorded.
func TestRelayRefusesServerIDsNoPeerReadsAlike(t *testing.T) {
	got := make(chan []byte, 100)
	h := newHarness(t, harnessOpts{raw: true, config: "policy:\n  default: allow\n",
		server: scriptedServer(got, func(m map[string]any, _ []byte) []string {
			id, _ := json.Marshal(m["id"])
			switch m["method"] {
			case "initialize":
				return []string{initResult(m)}
			case "ping":
				return []string{
					`{"jsonrpc":"2.0","id":1e400,"method":"sampling/createMessage","params":{"messages":[],"maxTokens":1}}`,
					`{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"roots/list"}`,
					`{"jsonrpc":"2.0","id":1.5,"result":{}}`,
					`{"jsonrpc":"2.0","id":` + string(id) + `,"result":{}}`,
				}
			}
			return nil
		})})
	h.initialize(guard.Rev20250618)
	h.send(`{"jsonrpc":"2.0","id":"p","method":"ping"}`)
	// The client reads the ping's answer and nothing else.
	if m := h.next(); m["id"] != "p" || m["result"] == nil {
		t.Fatalf("the client read %v, want the ping's answer", m)
	}
	var refused int
	for refused < 2 {
		select {
		case l := <-got:
			var m map[string]any
			_ = json.Unmarshal(l, &m)
			if m["method"] != nil {
				continue
			}
			if e, _ := m["error"].(map[string]any); e == nil || e["code"] != -32600.0 || m["id"] != nil {
				t.Fatalf("the server read %s, want -32600 with id null", l)
			}
			refused++
		case <-time.After(10 * time.Second):
			t.Fatal("guard did not answer the server's requests")
		}
	}
	h.send(`{"jsonrpc":"2.0","id":"q","method":"ping"}`)
	if m := h.next(); m["id"] != "q" {
		t.Fatalf("the client read %v, want the second ping's answer", m)
	}
	var events []string
	if err := h.db.Reader().Records(context.Background(), func(r *guard.Record) error {
		if r.Kind == guard.KindEvent {
			events = append(events, r.Method+" "+r.Detail)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(events, "\n")
	if strings.Count(joined, "guard/refused") < 2 || !strings.Contains(joined, "guard/dropped") {
		t.Fatalf("events: %s", joined)
	}
}

// A client's response whose id no request could have is dropped, not
// answered (a response is never answered), and the session goes on.
func TestRelayDropsClientResponsesWithUnusableIDs(t *testing.T) {
	h := newHarness(t, harnessOpts{raw: true, config: "policy:\n  default: allow\n"})
	h.initialize(guard.Rev20250618)
	h.send(`{"jsonrpc":"2.0","id":1e400,"result":{}}`)
	h.send(`{"jsonrpc":"2.0","id":true,"error":{"code":-1,"message":"x"}}`)
	h.send(`{"jsonrpc":"2.0","id":"after","method":"ping"}`)
	if m := h.next(); m["id"] != "after" {
		t.Fatalf("the client read %v, want the ping's answer only", m)
	}
}

// A server's result is judged on what the client will read: a member given
// twice at any depth, invalid UTF-8, or a case variant of a member the
// protocol defines (under Unicode case folding) is refused (a tool error
// for tools/call, -32603 for resources/read), recorded as invalid; case
// variants inside the tool's own data pass.
func TestRelayRefusesAmbiguousResults(t *testing.T) {
	results := map[string]string{
		"twice":        `{"content":[{"type":"text","text":"3"}],"structuredContent":{"count":3},"structuredContent":{"count":"many"}}`,
		"deep_twice":   `{"content":[{"type":"text","text":"a","text":"b"}],"structuredContent":{"count":3}}`,
		"bad_utf8":     "{\"content\":[{\"type\":\"text\",\"text\":\"\xff\"}],\"structuredContent\":{\"count\":3}}",
		"case_content": `{"Content":[{"type":"text","text":"rm -rf"}],"content":[],"structuredContent":{"count":3}}`,
		"case_error":   `{"content":[],"IsError":true,"structuredContent":{"count":3}}`,
		// encoding/json reads U+017F (ſ) as s: these are structuredContent
		// and isError to a Go client.
		"fold_structured": `{"content":[{"type":"text","text":"3"}],"ſtructuredContent":{"count":"many"}}`,
		"fold_error":      `{"content":[{"type":"text","text":"done"}],"iſError":true,"structuredContent":{"count":3}}`,
		"own_case":        `{"content":[{"type":"text","text":"3"}],"structuredContent":{"count":3,"Count":4}}`,
	}
	h := newHarness(t, harnessOpts{raw: true, quiet: true, config: "policy:\n  default: allow\n",
		server: scriptedServer(nil, func(m map[string]any, _ []byte) []string {
			id, _ := json.Marshal(m["id"])
			answer := func(result string) []string {
				return []string{`{"jsonrpc":"2.0","id":` + string(id) + `,"result":` + result + `}`}
			}
			switch m["method"] {
			case "initialize":
				return []string{initResult(m)}
			case "tools/list":
				var tools []string
				for name := range results {
					tools = append(tools, `{"name":"`+name+`","inputSchema":{"type":"object"},"outputSchema":{"type":"object","properties":{"count":{"type":"integer"}}},"annotations":{"readOnlyHint":true}}`)
				}
				return answer(`{"tools":[` + strings.Join(tools, ",") + `]}`)
			case "tools/call":
				return answer(results[m["params"].(map[string]any)["name"].(string)])
			case "resources/read":
				return answer(`{"contents":[{"uri":"a","text":"x","text":"y"}]}`)
			}
			return nil
		})})
	h.initialize(guard.Rev20250618)
	h.send(`{"jsonrpc":"2.0","id":"list","method":"tools/list"}`)
	h.next()
	for name := range results {
		h.send(`{"jsonrpc":"2.0","id":"` + name + `","method":"tools/call","params":{"name":"` + name + `","arguments":{}}}`)
		m := h.next()
		r, _ := m["result"].(map[string]any)
		b, _ := json.Marshal(r)
		refused := r != nil && r["isError"] == true && strings.Contains(string(b), "Refused: the server's result is ambiguous")
		if refused != (name != "own_case") {
			t.Errorf("%s: the client read %s", name, b)
		}
	}
	h.send(`{"jsonrpc":"2.0","id":"read","method":"resources/read","params":{"uri":"a"}}`)
	if m := h.next(); m["error"] == nil || m["error"].(map[string]any)["code"] != -32603.0 {
		t.Errorf("resources/read: the client read %v", m)
	}
	invalid := map[string]bool{}
	for _, c := range h.calls() {
		if c.Outcome == guard.OutcomeInvalid {
			invalid[c.Tool+c.Method] = true
		}
	}
	if len(invalid) != len(results) { // every refused call, and resources/read
		t.Errorf("recorded invalid: %v", invalid)
	}
}

// A server that never answers guard's own tools/list (sent for a tool guard
// has not seen) gives the client an error that says so, not "Unknown tool".
func TestRelayToolsListUnanswered(t *testing.T) {
	h := newHarness(t, harnessOpts{raw: true, quiet: true, refresh: 200 * time.Millisecond, config: "policy:\n  default: allow\n",
		server: scriptedServer(nil, func(m map[string]any, _ []byte) []string {
			if m["method"] == "initialize" {
				return []string{initResult(m)}
			}
			return nil // tools/list: never answered
		})})
	h.initialize(guard.Rev20250618)
	h.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{}}}`)
	m := h.next()
	e, _ := m["error"].(map[string]any)
	if msg, _ := e["message"].(string); e == nil || !strings.Contains(msg, "the server did not answer tools/list within 200ms") {
		t.Fatalf("the client read %v", m)
	}
	for _, c := range h.calls() {
		if c.Tool == "echo" && c.Outcome != guard.OutcomeUpstreamFailed {
			t.Fatalf("recorded outcome %q, want upstream_failed", c.Outcome)
		}
	}
}
