package proxy

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/internal/storetest"
	"github.com/guard-mcp/guard/store"
)

// holdDelete makes the example server's delete_note call, which the
// default policy holds, and returns its pending approval.
func (h *harness) holdDelete(id string) *guard.Approval {
	h.t.Helper()
	h.send(`{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"delete_note","arguments":{"title":"welcome"}}}`)
	return storetest.PendingIn(h.t, h.db)
}

// outcomeOf waits for the outcome recorded for the call of an approval.
func outcomeOf(t testing.TB, h *harness, callID string) *store.Call {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, c := range h.calls() {
			if c.ID == callID && c.Outcome != "" {
				return c
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no outcome recorded for call %s", callID)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// When its client's input ends, a held call is withdrawn at once, not
// after approval.wait (a minute here), the withdrawal names why, and no
// approval can release it afterwards.
func TestAHeldCallIsWithdrawnWhenItsClientsInputEnds(t *testing.T) {
	h := newHarness(t, harnessOpts{raw: true, wait: time.Minute})
	h.initialize(guard.Rev20250618)
	a := h.holdDelete("1")
	h.toGuard.Close()
	got := storetest.SettledWithin(t, h.db, a.ID, 5*time.Second)
	if got.State != guard.ApprovalWithdrawn {
		t.Fatalf("the hold of a client whose input ended: %s", got.State)
	}
	if why := storetest.WithdrawalReason(t, h.db, a.ID); !strings.HasPrefix(why, guard.ClientGoneReason) {
		t.Fatalf("the withdrawal's reason: %q", why)
	}
	if _, err := h.holds.Decide(context.Background(), a.ID, true, "erin", ""); !errors.Is(err, guard.ErrAlreadyDecided) {
		t.Fatalf("approving the call of a client that is gone: %v", err)
	}
	c := outcomeOf(t, h, a.CallID)
	if c.Outcome != guard.OutcomeCancelled || !strings.Contains(c.Detail, "client_gone") {
		t.Fatalf("the call's outcome: %s %s", c.Outcome, c.Detail)
	}
	<-h.done
	for _, c := range h.calls() {
		if c.Tool == "delete_note" && c.Outcome == guard.OutcomeOK {
			t.Fatal("the call of a client that is gone reached the server")
		}
	}
}

// A call told to retry leaves its approval open while its client is
// there; once the client's input ends, it is withdrawn too.
func TestACallToldToRetryIsWithdrawnWhenItsClientsInputEnds(t *testing.T) {
	h := newHarness(t, harnessOpts{raw: true, wait: 200 * time.Millisecond})
	h.initialize(guard.Rev20250618)
	a := h.holdDelete("1")
	if m := h.next(); !strings.Contains(resultText(m), "Waiting for approval") {
		t.Fatalf("the call was not told to retry: %v", m)
	}
	if got, _ := h.db.Holds().Approval(context.Background(), a.ID); got.State != guard.ApprovalPending {
		t.Fatalf("the approval of a call told to retry, its client still there: %s", got.State)
	}
	h.toGuard.Close()
	if got := storetest.SettledWithin(t, h.db, a.ID, 5*time.Second); got.State != guard.ApprovalWithdrawn {
		t.Fatalf("the approval of a call told to retry, its client gone: %s", got.State)
	}
	if why := storetest.WithdrawalReason(t, h.db, a.ID); !strings.HasPrefix(why, guard.ClientGoneReason) {
		t.Fatalf("the withdrawal's reason: %q", why)
	}
}

// Under approval.scope: any the hold of a client that went away stays
// decidable, marked as its client gone.
func TestAHoldScopedAnyOutlivesItsClientMarkedGone(t *testing.T) {
	h := newHarness(t, harnessOpts{raw: true, wait: time.Minute, scope: guard.ScopeAny})
	h.initialize(guard.Rev20250618)
	a := h.holdDelete("1")
	h.toGuard.Close()
	got := storetest.SettledWithin(t, h.db, a.ID, 5*time.Second)
	if got.State != guard.ApprovalPending || got.SessionEnded.IsZero() {
		t.Fatalf("a hold scoped any, its client gone: %s, client gone at %v", got.State, got.SessionEnded)
	}
	if c := outcomeOf(t, h, a.CallID); c.Outcome != guard.OutcomeCancelled {
		t.Fatalf("the call's outcome: %s", c.Outcome)
	}
}

// A write to the client that fails means the client is gone, although its
// input is still open.
func TestAHeldCallIsWithdrawnWhenAWriteToItsClientFails(t *testing.T) {
	h := newHarness(t, harnessOpts{raw: true, wait: time.Minute})
	h.initialize(guard.Rev20250618)
	a := h.holdDelete("1")
	h.fromG.Close() // the client reads no more
	h.send(`{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	if got := storetest.SettledWithin(t, h.db, a.ID, 5*time.Second); got.State != guard.ApprovalWithdrawn {
		t.Fatalf("the hold of a client guard can no longer write to: %s", got.State)
	}
	if why := storetest.WithdrawalReason(t, h.db, a.ID); why != goneWriteFailed {
		t.Fatalf("the withdrawal's reason: %q", why)
	}
}

// resultText is the text of a tools/call result guard wrote.
func resultText(m map[string]any) string {
	res, _ := m["result"].(map[string]any)
	content, _ := res["content"].([]any)
	var b strings.Builder
	for _, c := range content {
		if cm, ok := c.(map[string]any); ok {
			s, _ := cm["text"].(string)
			b.WriteString(s)
		}
	}
	return b.String()
}
