package replicas

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// announcements is a webhook receiver of a test: a real HTTP server that
// counts the announcements it got, by approval id.
type announcements struct {
	srv *httptest.Server
	mu  sync.Mutex
	by  map[string]int
	got chan string
}

func newAnnouncements(t *testing.T) *announcements {
	a := &announcements{by: map[string]int{}, got: make(chan string, 100)}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Approval string }
		b, _ := io.ReadAll(r.Body)
		if json.Unmarshal(b, &body) != nil || body.Approval == "" {
			http.Error(w, "not an announcement", http.StatusBadRequest)
			return
		}
		a.mu.Lock()
		a.by[body.Approval]++
		a.mu.Unlock()
		a.got <- body.Approval
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

// wait waits until the receiver has an announcement of approval id.
func (a *announcements) wait(t *testing.T, id string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		a.mu.Lock()
		n := a.by[id]
		a.mu.Unlock()
		if n > 0 {
			return
		}
		select {
		case <-a.got:
		case <-deadline:
			t.Fatalf("approval %s was never announced", id)
		}
	}
}

// holder waits for the replica that holds the lease "notify" (it says so
// in its log) and returns it.
func (c *cluster) holder() *replica {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, r := range c.replicas {
			if b, err := os.ReadFile(r.log); err == nil && strings.Contains(string(b), `msg="announcing new holds"`) && !r.serve.Ended() {
				return r
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatal("no replica announces new holds")
	return nil
}

// Two replicas on one database announce each hold once, whichever of
// them held the call, and a call made again on the other replica is not
// announced again: the one holding the lease "notify" announces for
// both. When it stops, the other takes over and announces the holds that
// follow, still once each.
func TestAHoldIsAnnouncedOnceByTheReplicas(t *testing.T) {
	hook := newAnnouncements(t)
	c := newCluster(t, 2, "approval: {wait: 1s, scope: any}\n"+exampleServer()+
		"notify:\n  - {webhook: "+hook.srv.URL+"/guard, secret: s3cret}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// hold holds a call on replica r, told apart from the others by
	// title, and returns its approval's id.
	hold := func(r *replica, title string) string {
		cs := c.connect(ctx, r.url("notes"), "held-on-"+r.name, "2025-11-25")
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"title": title}})
		const prefix = "Waiting for approval (id "
		if err != nil || !res.IsError || !strings.HasPrefix(text(res), prefix) {
			t.Fatalf("the call held on %s: %q %v", r.name, text(res), err)
		}
		return text(res)[len(prefix) : len(prefix)+36]
	}
	first := c.holder()
	var ids []string
	for _, r := range c.replicas {
		id := hold(r, "held on "+r.name)
		hook.wait(t, id)
		ids = append(ids, id)
	}
	// The client calls again, reaching the other replica in another
	// session (approvals scoped to any): told it waits on the same
	// approval, which is not announced again.
	if again := hold(c.replicas[1], "held on "+c.replicas[0].name); again != ids[0] {
		t.Fatalf("the call made again waits on %s, not %s", again, ids[0])
	}
	if err := first.serve.Stop(); err != nil {
		t.Fatalf("stopping %s: %v", first.name, err)
	}
	next := c.holder()
	if next == first {
		t.Fatalf("%s announces after it stopped", first.name)
	}
	id := hold(next, "held after "+first.name+" stopped")
	hook.wait(t, id)
	ids = append(ids, id)
	c.stopAndVerify()

	hook.mu.Lock()
	defer hook.mu.Unlock()
	for _, id := range ids {
		if n := hook.by[id]; n != 1 {
			t.Errorf("approval %s was announced %d times", id, n)
		}
	}
	if len(hook.by) != len(ids) {
		t.Errorf("announcements of %d approvals, for %d holds: %v", len(hook.by), len(ids), hook.by)
	}
}
