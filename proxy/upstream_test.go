package proxy

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
	opts, _, _ := testOptions(t, context.Background(), "policy: {default: allow}\n", time.Second)
	go func() {
		done <- RunRemote(context.Background(), opts, Remote{URL: srv.URL}, NewStreamConn(cr, aw, 0))
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
