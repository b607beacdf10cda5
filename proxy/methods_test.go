package proxy

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
)

// The request methods are each revision's, in each direction; before the
// revision is known any revision's count.
func TestRequestMethodsPerRevision(t *testing.T) {
	for _, rev := range []string{guard.Rev20241105, guard.Rev20250326, guard.Rev20250618, guard.Rev20251125, guard.Rev20260728} {
		r, ok := requests[rev]
		if !ok {
			t.Fatalf("no request methods for %s", rev)
		}
		// requestAsNotification passes every notifications/... method
		// without looking: no request may have such a name.
		for _, m := range append(r.client, r.server...) {
			if strings.HasPrefix(m, "notifications/") {
				t.Errorf("%s: request %q looks like a notification", rev, m)
			}
		}
	}
	for _, tc := range []struct {
		rev, method string
		toServer    bool
		want        bool
	}{
		{guard.Rev20250618, "tools/call", true, true},
		{guard.Rev20250618, "tools/call", false, false},
		{guard.Rev20250618, "elicitation/create", false, true},
		{guard.Rev20250326, "elicitation/create", false, false},
		{guard.Rev20251125, "tasks/cancel", true, true},
		{guard.Rev20251125, "tasks/cancel", false, true},
		{guard.Rev20260728, "sampling/createMessage", false, false},
		{guard.Rev20260728, "subscriptions/listen", true, true},
		{guard.Rev20260728, "initialize", true, false},
		{"", "subscriptions/listen", true, true},
		{"", "elicitation/create", false, true},
		{"2099-01-01", "tasks/get", true, true},
		{"", "notifications/initialized", true, false},
		{"", "tools/cal", true, false},
	} {
		if got := isRequestMethod(tc.rev, tc.method, tc.toServer); got != tc.want {
			t.Errorf("%q %s (to server %v): %v, want %v", tc.rev, tc.method, tc.toServer, got, tc.want)
		}
	}
}

// droppedMethods returns the methods of the notifications db recorded as
// dropped for naming a request, by direction.
func droppedMethods(t *testing.T, db interface {
	Records(context.Context, func(*guard.Record) error) error
}) map[string]string {
	t.Helper()
	out := map[string]string{}
	if err := db.Records(context.Background(), func(r *guard.Record) error {
		var d struct{ Method string }
		if r.Method == "guard/dropped" && json.Unmarshal([]byte(r.Detail), &d) == nil && d.Method != "" {
			out[d.Method] = r.Direction
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// A tools/call sent as a notification (no id) reached the server with no
// decision and no record: a server that acts on notifications ran a tool
// guard holds. A notification whose method the revision defines as a
// request is dropped and recorded, before the revision is known too, in
// both directions and inside a batch.
func TestRelayDropsNotificationsWithRequestMethods(t *testing.T) {
	got := make(chan []byte, 100)
	h := newHarness(t, harnessOpts{raw: true, quiet: true,
		server: scriptedServer(got, func(m map[string]any, _ []byte) []string {
			id, _ := json.Marshal(m["id"])
			switch {
			case m["method"] == "initialize":
				return []string{`{"jsonrpc":"2.0","id":` + string(id) + `,"result":{"protocolVersion":"2025-03-26","capabilities":{"tools":{}},"serverInfo":{"name":"scripted","version":"1"}}}`}
			case m["method"] == "ping" && m["id"] != nil:
				// The server's requests without an id, then the answer.
				return []string{
					`{"jsonrpc":"2.0","method":"sampling/createMessage","params":{"messages":[],"maxTokens":1}}`,
					`{"jsonrpc":"2.0","method":"roots/list"}`,
					`{"jsonrpc":"2.0","id":` + string(id) + `,"result":{}}`,
				}
			}
			return nil
		})})
	deleteAll := `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"delete_note","arguments":{"title":"welcome"}}}`
	h.send(deleteAll) // before initialize: any revision's requests
	h.initialize(guard.Rev20250326)
	h.send(deleteAll)
	h.send(`{"jsonrpc":"2.0","method":"resources/read","params":{"uri":"file:///etc/passwd"}}`)
	h.send(`[{"jsonrpc":"2.0","method":"tools/call","params":{"name":"delete_note","arguments":{"title":"b"}}},{"jsonrpc":"2.0","id":"in batch","method":"ping"}]`)
	l := <-h.lines
	var arr []map[string]any
	if err := json.Unmarshal(l, &arr); err != nil || len(arr) != 1 || arr[0]["id"] != "in batch" {
		t.Fatalf("the batch's answer: %s", l)
	}
	h.send(`{"jsonrpc":"2.0","id":"p","method":"ping"}`)
	if m := h.next(); m["id"] != "p" {
		t.Fatalf("the client read %v before the ping's answer", m)
	}
	for {
		var m map[string]any
		select {
		case l := <-got:
			_ = json.Unmarshal(l, &m)
		case <-time.After(100 * time.Millisecond):
			m = nil
		}
		if m == nil {
			break
		}
		if method, _ := m["method"].(string); m["id"] == nil && !strings.HasPrefix(method, "notifications/") && method != "" {
			t.Errorf("the server read a %s without an id", method)
		}
	}
	want := map[string]string{"tools/call": guard.ClientToServer, "resources/read": guard.ClientToServer,
		"sampling/createMessage": guard.ServerToClient, "roots/list": guard.ServerToClient}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		dropped := droppedMethods(t, h.db.Reader())
		if maps.Equal(dropped, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("recorded as dropped: %v, want %v", dropped, want)
		}
	}
}
