package proxy

import (
	"context"
	"slices"
	"testing"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Every record of a session whose caller the front authenticated names
// that caller: the requests and outcomes of its calls, allowed or held,
// the decision a person made on a held one, and the events of the
// session. The log verifies, and a query finds the calls by the caller's
// subject or email.
func TestRecordsNameTheAuthenticatedCaller(t *testing.T) {
	alice := guard.Identity{Subject: "user-7f3a", Email: "alice@example.com", Groups: []string{"sre", "on-call"}}
	h := newHarness(t, harnessOpts{caller: alice})
	cs := h.client(nil, "")
	ctx := context.Background()
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}}); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"title": "groceries"}})
		got <- err
	}()
	id := waitPending(t, h, "delete_note")
	a, err := h.db.Holds().Approval(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if a.Caller.Subject != alice.Subject || a.Caller.Email != alice.Email || !slices.Equal(a.Caller.Groups, alice.Groups) {
		t.Errorf("the held call's approval names %+v, want %+v", a.Caller, alice)
	}
	if _, err := h.holds.Decide(ctx, id, false, "bob", "not today"); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	cs.Close()
	<-h.done // the session's last records (the server's exit) are written

	kinds := map[string]int{}
	err = h.db.Reader().Records(ctx, func(r *guard.Record) error {
		if r.Kind == guard.KindToolReview {
			return nil // the server's tools, as the catalog first saw them: no one's
		}
		kinds[r.Kind]++
		if r.User != alice.Subject || r.UserEmail != alice.Email || !slices.Equal(r.UserGroups, alice.Groups) {
			t.Errorf("%s record %d (%s %s) names user %q %q %q, want %+v", r.Kind, r.Seq, r.Method, r.Tool,
				r.User, r.UserEmail, r.UserGroups, alice)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{guard.KindRequest, guard.KindOutcome, guard.KindDecision, guard.KindEvent} {
		if kinds[k] == 0 {
			t.Errorf("no %s record in the log: %v", k, kinds)
		}
	}
	for _, who := range []string{alice.Subject, alice.Email} {
		var tools []string
		err := h.db.Reader().Query(ctx, store.Filter{User: who}, func(c *store.Call) error {
			if c.User != alice.Subject || c.UserEmail != alice.Email || !slices.Equal(c.UserGroups, alice.Groups) {
				t.Errorf("call %s shows user %q %q %q", c.ID, c.User, c.UserEmail, c.UserGroups)
			}
			tools = append(tools, c.Method+" "+c.Tool)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(tools, "tools/call echo") || !slices.Contains(tools, "tools/call delete_note") {
			t.Errorf("--user %s: calls %v, want echo and delete_note among them", who, tools)
		}
	}
	if n := len(queryUser(t, h.db, "bob@example.com")); n != 0 {
		t.Errorf("--user of someone else: %d calls", n)
	}
	// Closed, the log has its checkpoint; it verifies as guard audit
	// verify reads it.
	path := h.db.Path()
	if err := h.db.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := store.OpenReadOnly(ctx, store.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if rep, err := ro.Verifier().Verify(ctx); err != nil || !rep.OK {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}

// A session no one authenticated (stdio, a static token) records no user.
func TestRecordsOfAnUnauthenticatedSessionNameNoUser(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	cs := h.client(nil, "")
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}}); err != nil {
		t.Fatal(err)
	}
	cs.Close()
	<-h.done
	n := 0
	err := h.db.Reader().Records(context.Background(), func(r *guard.Record) error {
		n++
		if r.User != "" || r.UserEmail != "" || r.UserGroups != nil {
			t.Errorf("record %d names a user: %q %q %q", r.Seq, r.User, r.UserEmail, r.UserGroups)
		}
		return nil
	})
	if err != nil || n == 0 {
		t.Fatalf("records: %d, %v", n, err)
	}
}

func queryUser(t *testing.T, db *store.DB, who string) []*store.Call {
	t.Helper()
	var out []*store.Call
	if err := db.Reader().Query(context.Background(), store.Filter{User: who}, func(c *store.Call) error {
		out = append(out, c)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}
