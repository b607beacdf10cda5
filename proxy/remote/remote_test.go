package remote

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/internal/relaytest"
	"github.com/guard-mcp/guard/proxy"
)

// A remote server whose answers span several lines (a pretty-printed JSON
// body; an SSE event whose data is split over several data: lines, which
// the SSE format joins with newlines) reaches the client as one message
// per line. No real peer writes either, hence the hand-made server.
func TestRemoteMultiLineAnswers(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		body, _ := io.ReadAll(r.Body)
		switch {
		case strings.Contains(string(body), `"initialize"`):
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Mcp-Session-Id", "s1")
			io.WriteString(w, "{\n  \"jsonrpc\": \"2.0\",\n  \"id\": 1,\n  \"result\": {\n    \"protocolVersion\": \"2025-06-18\",\n"+
				"    \"capabilities\": {\"tools\": {}},\n    \"serverInfo\": {\"name\": \"pretty\", \"version\": \"1\"}\n  }\n}\n")
		case strings.Contains(string(body), `"ping"`):
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "event: message\ndata: {\"jsonrpc\": \"2.0\",\ndata:  \"id\": 2,\ndata:  \"result\": {}}\n\n")
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	defer srv.Close()
	cr, cw := io.Pipe()
	ar, aw := io.Pipe()
	done := make(chan error, 1)
	opts, _, _ := relaytest.Options(t, context.Background(), "policy: {default: allow}\n", time.Second)
	go func() {
		done <- Run(context.Background(), opts, Remote{URL: srv.URL}, proxy.NewStreamConn(cr, aw, 0))
		aw.Close()
	}()
	lines := bufio.NewScanner(ar)
	next := func() map[string]any {
		t.Helper()
		got := make(chan string, 1)
		go func() {
			if lines.Scan() {
				got <- lines.Text()
			}
			close(got)
		}()
		select {
		case l, ok := <-got:
			var m map[string]any
			if !ok || json.Unmarshal([]byte(l), &m) != nil {
				t.Fatalf("not one message on a line: %q", l)
			}
			return m
		case <-time.After(5 * time.Second):
			t.Fatal("no answer")
		}
		return nil
	}
	io.WriteString(cw, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`+"\n")
	if m := next(); m["result"].(map[string]any)["protocolVersion"] != "2025-06-18" {
		t.Fatalf("initialize: %v", m)
	}
	io.WriteString(cw, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	io.WriteString(cw, `{"jsonrpc":"2.0","id":2,"method":"ping"}`+"\n")
	if m := next(); m["id"] != float64(2) || m["result"] == nil {
		t.Fatalf("ping: %v", m)
	}
	cw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A remote server's message over max_message is not relayed, as over
// stdio: it is recorded as dropped, whether it came as a JSON body or as an
// event of a stream, and the session goes on.
func TestRemoteMessageOverMaxMessageIsDropped(t *testing.T) {
	big := `{"jsonrpc":"2.0","id":2,"result":{"pad":"` + strings.Repeat("x", 5000) + `"}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch {
		case strings.Contains(string(body), `"initialize"`):
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"p","version":"1"}}}`)
		case strings.Contains(string(body), `"id":2`):
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, big)
		case strings.Contains(string(body), `"id":3`):
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "event: message\ndata: "+strings.Replace(big, `"id":2`, `"id":3`, 1)+"\n\n")
		case strings.Contains(string(body), `"id":4`):
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"jsonrpc":"2.0","id":4,"result":{}}`)
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	defer srv.Close()
	cr, cw := io.Pipe()
	ar, aw := io.Pipe()
	opts, db, _ := relaytest.Options(t, context.Background(), "policy: {default: allow}\n", time.Second)
	opts.MaxMessage = 1000
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), opts, Remote{URL: srv.URL}, proxy.NewStreamConn(cr, aw, 0))
		aw.Close()
	}()
	lines := bufio.NewScanner(ar)
	lines.Buffer(nil, 1<<20)
	next := func() string {
		t.Helper()
		if !lines.Scan() {
			t.Fatal("the session ended")
		}
		return lines.Text()
	}
	io.WriteString(cw, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`+"\n")
	next()
	io.WriteString(cw, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	// Each request waits for the one before to be dropped: the server's
	// answers would otherwise race.
	for _, id := range []string{"2", "3"} {
		io.WriteString(cw, `{"jsonrpc":"2.0","id":`+id+`,"method":"ping"}`+"\n")
		waitDropped(t, db.Reader(), id)
	}
	io.WriteString(cw, `{"jsonrpc":"2.0","id":4,"method":"ping"}`+"\n")
	if got := next(); !strings.Contains(got, `"id":4`) {
		t.Fatalf("after the dropped answers, the client got %s", got)
	}
	cw.Close()
	// At the end the two requests whose answers were dropped are
	// answered by guard: the server's session ended first.
	go io.Copy(io.Discard, ar)
	<-done
}

// waitDropped waits until the audit holds as many dropped server messages
// as the id says (ids 2, 3: one, two).
func waitDropped(t *testing.T, db interface {
	Records(context.Context, func(*guard.Record) error) error
}, id string) {
	t.Helper()
	want := map[string]int{"2": 1, "3": 2}[id]
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := 0
		_ = db.Records(context.Background(), func(r *guard.Record) error {
			if r.Method == "guard/dropped" && strings.Contains(r.Detail, "over max_message") {
				n++
			}
			return nil
		})
		if n >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the answer to %s was not recorded as dropped", id)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
