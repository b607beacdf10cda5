package e2e

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// badIDs are ids that peers read differently (a double, a big integer, a
// value JSON-RPC does not allow): guard answers each itself, -32600 with
// id null, and never forwards them.
var badIDs = []string{`1e400`, `123456789012345678901234567890`, `9007199254740992`, `1.5`, `1e3`, `-0`,
	`true`, `null`, `{"a":1}`, `[1]`}

// An id no peer reads the same way is refused by guard run, and the wrapped
// server (which crashed on id 1e400) goes on answering.
func TestRunRefusesIDsNoPeerReadsAlike(t *testing.T) {
	e := newEnv(t, "policy: {default: allow}\n")
	lc := startLines(t, e.wrap("notes", guardBin, "example-server"))
	lc.init()
	for _, id := range badIDs {
		for _, method := range []string{"ping", "tools/call"} {
			lc.send(`{"jsonrpc":"2.0","id":` + id + `,"method":"` + method + `","params":{"name":"echo","arguments":{"text":"x"}}}`)
			m := lc.next(10 * time.Second)
			if e, _ := m["error"].(map[string]any); e == nil || e["code"] != -32600.0 || m["id"] != nil {
				t.Errorf("id %s (%s): %v, want -32600 with id null", id, method, m)
			}
			lc.send(`{"jsonrpc":"2.0","id":9007199254740991,"method":"tools/call","params":{"name":"echo","arguments":{"text":"after"}}}`)
			m = lc.next(10 * time.Second)
			if text, isErr := resultText(m); isErr || !strings.Contains(text, "after") {
				t.Fatalf("after id %s the session did not go on: %v", id, m)
			}
		}
	}
}

// guard serve answers a POST whose body has such an id with -32600, id
// null, and the session goes on.
func TestServeRefusesIDsNoPeerReadsAlike(t *testing.T) {
	_, url := serveExample(t, "policy: {default: allow}\n")
	post := func(session, body string) (*http.Response, map[string]any) {
		t.Helper()
		return rawPost(t, url, session, body)
	}
	resp, m := post("", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	session := resp.Header.Get("Mcp-Session-Id")
	if session == "" || m["result"] == nil {
		t.Fatalf("initialize: %d %v", resp.StatusCode, m)
	}
	post(session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for _, id := range badIDs {
		resp, m := post(session, `{"jsonrpc":"2.0","id":`+id+`,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`)
		if e, _ := m["error"].(map[string]any); resp.StatusCode != http.StatusBadRequest || e == nil || e["code"] != -32600.0 || m["id"] != nil {
			t.Errorf("id %s: %d %v, want 400 and -32600 with id null", id, resp.StatusCode, m)
		}
		resp, m = post(session, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
		if m["id"] != 2.0 || m["result"] == nil {
			t.Fatalf("after id %s the session did not go on: %d %v", id, resp.StatusCode, m)
		}
	}
}

// A number in the arguments that overflows a double is invalid arguments,
// refused before the server, in the form of every invalid argument: -32602
// before 2025-11-25, a tool error from then on.
func TestRunRefusesNumbersThatOverflowADouble(t *testing.T) {
	e := newEnv(t, "policy: {default: allow}\n")
	for _, version := range []string{"2025-06-18", "2025-11-25"} {
		lc := startLines(t, e.wrap("notes", guardBin, "example-server"))
		lc.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"` + version + `","capabilities":{},"clientInfo":{"name":"lines","version":"1"}}}`)
		lc.next(20 * time.Second)
		lc.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		for i, n := range []string{`1e400`, `-1e400`, `1E+99999999999999999999`} {
			lc.send(`{"jsonrpc":"2.0","id":` + strconv.Itoa(i+1) + `,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x","times":` + n + `}}}`)
			m := lc.next(10 * time.Second)
			want := "Invalid arguments for echo: /times: number " + n + " is out of range"
			if version < "2025-11-25" {
				e, _ := m["error"].(map[string]any)
				if msg, _ := e["message"].(string); e == nil || e["code"] != -32602.0 || !strings.HasPrefix(msg, want) {
					t.Errorf("%s, times %s: %v, want -32602 %q", version, n, m, want)
				}
				continue
			}
			if text, isErr := resultText(m); !isErr || !strings.HasPrefix(text, want) {
				t.Errorf("%s, times %s: %v, want isError %q", version, n, m, want)
			}
		}
		// The server is still there.
		lc.send(`{"jsonrpc":"2.0","id":"after","method":"tools/call","params":{"name":"echo","arguments":{"text":"after","times":1e2}}}`)
		if text, isErr := resultText(lc.next(10 * time.Second)); isErr || !strings.Contains(text, "after") {
			t.Fatalf("%s: the session did not go on: %q", version, text)
		}
	}
	out, _ := e.guard("audit", "query", "--outcome", "invalid", "--format", "jsonl")
	if n := strings.Count(out, "\n"); n != 6 {
		t.Fatalf("want 6 invalid calls recorded, got %d:\n%s", n, out)
	}
}

// max_request bounds what guard run passes to its server: a longer request
// is refused naming the limit, and the session goes on.
func TestRunRefusesRequestsOverMaxRequest(t *testing.T) {
	e := newEnv(t, "max_request: 1KiB\npolicy: {default: allow}\n")
	lc := startLines(t, e.wrap("notes", guardBin, "example-server"))
	lc.init()
	lc.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"` + strings.Repeat("a", 2<<10) + `"}}}`)
	m := lc.next(10 * time.Second)
	if e, _ := m["error"].(map[string]any); e == nil || e["code"] != -32600.0 || m["id"] != 1.0 || !strings.Contains(e["message"].(string), "max_request (1024 bytes)") {
		t.Fatalf("the client read %v, want -32600 naming max_request", m)
	}
	lc.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"after"}}}`)
	if text, isErr := resultText(lc.next(10 * time.Second)); isErr || text != "after" {
		t.Fatalf("the session did not go on: %q", text)
	}
}
