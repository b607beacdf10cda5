package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/e2e/guardtest"
)

// listenStream is one subscriptions/listen as a raw 2026-07-28 client
// reads it: its messages, as they come, until its stream ends.
type listenStream struct {
	id   string
	msgs chan map[string]any
	stop context.CancelFunc
}

const rawMeta = `"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"}`

// post20260728 posts one request of the session-less revision, with the
// headers that mirror its body.
func post20260728(t *testing.T, ctx context.Context, url, method, name, body string) *http.Response {
	t.Helper()
	h := http.Header{"Mcp-Protocol-Version": {"2026-07-28"}, "Mcp-Method": {method}}
	if name != "" {
		h.Set("Mcp-Name", name)
	}
	return openPostWith(t, ctx, url, h, body)
}

// listen opens a subscriptions/listen with id for the list changes named
// (promptsListChanged...), and returns once it is acknowledged.
func listen(t *testing.T, ctx context.Context, url, id string, kinds ...string) *listenStream {
	t.Helper()
	n := map[string]any{}
	for _, k := range kinds {
		n[k] = true
	}
	return listenFor(t, ctx, url, id, n)
}

// listenFor opens a subscriptions/listen with id for the notifications n
// names, and returns once it is acknowledged.
func listenFor(t *testing.T, ctx context.Context, url, id string, n map[string]any) *listenStream {
	t.Helper()
	sctx, stop := context.WithCancel(ctx)
	nj, _ := json.Marshal(n)
	resp := post20260728(t, sctx, url, "subscriptions/listen", "", `{"jsonrpc":"2.0","id":"`+id+`","method":"subscriptions/listen","params":{"_meta":{`+rawMeta+`},"notifications":`+string(nj)+`}}`)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		stop()
		t.Fatalf("subscriptions/listen %s: HTTP %d %s", id, resp.StatusCode, b)
	}
	ls := &listenStream{id: id, msgs: make(chan map[string]any, 16), stop: stop}
	go func() {
		defer resp.Body.Close()
		defer close(ls.msgs)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data:")
			var m map[string]any
			if ok && json.Unmarshal([]byte(data), &m) == nil {
				ls.msgs <- m
			}
		}
	}()
	ack := ls.next(t, ctx)
	if ack["method"] != "notifications/subscriptions/acknowledged" {
		t.Fatalf("listen %s: the first message is not the acknowledgement: %v", id, ack)
	}
	if got := subscriptionOf(ack); got != id {
		t.Fatalf("listen %s: acknowledged as %q", id, got)
	}
	return ls
}

// next is the stream's next message; it fails when the stream ends or ctx
// does first.
func (ls *listenStream) next(t *testing.T, ctx context.Context) map[string]any {
	t.Helper()
	select {
	case m, ok := <-ls.msgs:
		if !ok {
			t.Fatalf("listen %s: the stream ended", ls.id)
		}
		return m
	case <-ctx.Done():
		t.Fatalf("listen %s: nothing came: %v", ls.id, ctx.Err())
	}
	return nil
}

// listenCancelled waits until guard has recorded a listen cancelled.
func listenCancelled(ctx context.Context, e *env) {
	e.waitRecords(ctx, "the closed listen recorded cancelled", func(recs []*guard.Record) bool {
		for _, r := range recs {
			if r.Kind == guard.KindOutcome && r.Method == "subscriptions/listen" && r.Outcome == guard.OutcomeCancelled {
				return true
			}
		}
		return false
	}, nil)
}

func subscriptionOf(m map[string]any) string {
	params, _ := m["params"].(map[string]any)
	meta, _ := params["_meta"].(map[string]any)
	id, _ := meta["io.modelcontextprotocol/subscriptionId"].(string)
	return id
}

// On the session-less revision guard serve relays all a caller's clients
// to one server process, which, as the go-sdk's does, may keep a single
// listen per connection for each kind of list change. Each client's listen
// still gets every change it asked for, under its own id: two listens open
// at once both hear of a prompt list change (the second does not silence
// the first), one that ends does not end the other's, and each is
// recorded, the one closed as cancelled.
func TestConcurrentListensEachHearTheirListChanges(t *testing.T) {
	e := newEnv(t, "policy: {default: allow}\nservers:\n  conformance:\n    command: ["+guardtest.EverythingServer(t)+"]\n    new_tools: allow\n")
	url := serveThroughGuard(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := listen(t, ctx, url, "listen-a", "promptsListChanged")
	b := listen(t, ctx, url, "listen-b", "promptsListChanged", "toolsListChanged")
	trigger := func() {
		t.Helper()
		r := post20260728(t, ctx, url, "tools/call", "test_trigger_prompt_change", `{"jsonrpc":"2.0","id":"t","method":"tools/call","params":{"name":"test_trigger_prompt_change","arguments":{},"_meta":{`+rawMeta+`}}}`)
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if !strings.Contains(string(body), "prompts_list_changed published") {
			t.Fatalf("test_trigger_prompt_change: HTTP %d %s", r.StatusCode, body)
		}
	}
	heard := func(ls *listenStream) {
		t.Helper()
		m := ls.next(t, ctx)
		if m["method"] != "notifications/prompts/list_changed" || subscriptionOf(m) != ls.id {
			t.Fatalf("listen %s: %v, not its prompt list change", ls.id, m)
		}
	}
	trigger()
	heard(a)
	heard(b)

	// a ends; once guard has recorded it so, b still hears.
	a.stop()
	listenCancelled(ctx, e)
	trigger()
	heard(b)
	b.stop()
}

// Two clients subscribed to one resource through guard serve both hear of
// its changes, each under its own id, and one that ends leaves the other
// subscribed: guard holds one subscription of its own for the resource on
// the server's connection, where the go-sdk server keeps one per resource
// (the second client's would replace the first's, and the end of either
// would end both). The server tells of its watched resource every few
// seconds.
func TestConcurrentResourceSubscriptionsEachHearTheirUpdates(t *testing.T) {
	e := newEnv(t, "policy: {default: allow}\nservers:\n  conformance:\n    command: ["+guardtest.EverythingServer(t)+"]\n    new_tools: allow\n")
	url := serveThroughGuard(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const watched = "test://watched-resource"
	n := map[string]any{"resourceSubscriptions": []string{watched}}
	a := listenFor(t, ctx, url, "listen-a", n)
	b := listenFor(t, ctx, url, "listen-b", n)
	heard := func(ls *listenStream) {
		t.Helper()
		m := ls.next(t, ctx)
		params, _ := m["params"].(map[string]any)
		if m["method"] != "notifications/resources/updated" || params["uri"] != watched || subscriptionOf(m) != ls.id {
			t.Fatalf("listen %s: %v, not its resource's update", ls.id, m)
		}
	}
	heard(a)
	heard(b)

	// a ends; once guard has recorded it so, b still hears.
	a.stop()
	listenCancelled(ctx, e)
	heard(b)
	b.stop()
}
