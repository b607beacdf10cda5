package streamable

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/internal/storetest"
)

// nested is a JSON array nested n levels deep.
func nested(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

// Over HTTP a request nested too deep is answered 400 with -32600 and its
// id; a client's answer nested too deep goes to the relay, which answers
// the server's request with guard's error in its place (here it answers
// no request, and is recorded as dropped).
func TestHTTPRefusesMessagesNestedTooDeep(t *testing.T) {
	f := newHTTPFront(t, nil)
	session := f.start(t)
	ctx := context.Background()
	resp := f.post(t, ctx, session, `{"jsonrpc":"2.0","id":"deep","method":"ping","params":{"x":`+nested(2000)+`}}`)
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	resp.Body.Close()
	if e, _ := m["error"].(map[string]any); resp.StatusCode != 400 || e == nil || e["code"] != -32600.0 || m["id"] != "deep" {
		t.Fatalf("deep request: %d %v", resp.StatusCode, m)
	}
	resp = f.post(t, ctx, session, `{"jsonrpc":"2.0","id":"nobody","result":{"x":`+nested(2000)+`}}`)
	resp.Body.Close()
	if resp.StatusCode != 202 {
		t.Fatalf("deep answer: %d, want 202", resp.StatusCode)
	}
	storetest.WaitRecord(t, f.db.Reader(), func(r *guard.Record) bool {
		return r.Method == "guard/dropped" && strings.Contains(r.Detail, `"nobody"`)
	})
}
