package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	guard "github.com/guard-mcp/guard"
)

// approvalsAll is every approval, as guard approvals list --state all
// --format jsonl writes them, by id.
func (e *env) approvalsAll() map[string]map[string]any {
	e.t.Helper()
	out, code := e.guard("approvals", "list", "--state", "all", "--format", "jsonl")
	if code != 0 {
		e.t.Fatalf("approvals list: %s", out)
	}
	all := map[string]map[string]any{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var a map[string]any
		if json.Unmarshal([]byte(line), &a) == nil {
			all[a["id"].(string)] = a
		}
	}
	return all
}

// retryID calls delete_note and returns the id of the approval the
// client was told to wait for.
func retryID(t *testing.T, cs *mcp.ClientSession) string {
	t.Helper()
	text, isErr := callText(t, cs, "delete_note", map[string]any{"title": "welcome"})
	id, ok := strings.CutPrefix(text, "Waiting for approval (id ")
	if !isErr || !ok {
		t.Fatalf("want the retry answer, got %q", text)
	}
	id, _, _ = strings.Cut(id, ")")
	return id
}

// approval.scope: session (the default) lets an approval given to a call
// that was told to retry through only for a repeated call of the same
// session: another session's identical call is held anew. With any, the
// other session's call passes, and its record says whose approval it used.
func TestApprovalScope(t *testing.T) {
	for _, tc := range []struct{ scope, config string }{{guard.ScopeSession, ""}, {guard.ScopeAny, "  scope: any\n"}} {
		t.Run(tc.scope, func(t *testing.T) {
			e := newEnv(t, "approval:\n  wait: 300ms\n"+tc.config)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			first := e.connect(ctx, mcp.NewClient(&mcp.Implementation{Name: "first", Version: "1"}, nil), "2025-11-25", nil, "notes", guardBin, "example-server")
			other := e.connect(ctx, mcp.NewClient(&mcp.Implementation{Name: "other", Version: "1"}, nil), "2025-11-25", nil, "notes", guardBin, "example-server")
			id := retryID(t, first)
			if a := e.approvalsAll()[id]; a["scope"] != tc.scope {
				t.Fatalf("the approval's scope: %v, want %s", a["scope"], tc.scope)
			}
			if out, code := e.guard("approvals", "approve", id, "--by", "alice"); code != 0 {
				t.Fatalf("approve: %s", out)
			}
			// The decision's record says which calls the approval lets through.
			out, _ := e.guard("audit", "query", "--kind", "decision", "--format", "jsonl", "--approval", id)
			if !strings.Contains(out, `\"scope\":\"`+tc.scope+`\"`) {
				t.Fatalf("the decision's record lacks the scope: %s", out)
			}
			text, isErr := callText(t, other, "delete_note", map[string]any{"title": "welcome"})
			if tc.scope == guard.ScopeSession {
				if !isErr || !strings.HasPrefix(text, "Waiting for approval (id ") || strings.Contains(text, id) {
					t.Fatalf("another session's call used the approval: %q", text)
				}
				if text, isErr := callText(t, first, "delete_note", map[string]any{"title": "welcome"}); isErr || text != "deleted welcome" {
					t.Fatalf("the session's own repeated call: %q", text)
				}
				return
			}
			if isErr || text != "deleted welcome" {
				t.Fatalf("another session's call with scope any: %q", text)
			}
			out, _ = e.guard("audit", "query", "--format", "jsonl", "--tool", "delete_note", "--decision", "allowed")
			var c struct {
				Session, Reason, Approval string
				DecidedBy                 string `json:"decided_by"`
			}
			_ = json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &c)
			if c.Approval != id || c.DecidedBy != "alice" || !strings.Contains(c.Reason, "scope: any session") || c.Reason == "" {
				t.Fatalf("the other session's call's record: %+v", c)
			}
			if a := e.approvalsAll()[id]; !strings.Contains(c.Reason, a["session"].(string)) {
				t.Fatalf("the record does not name the session the approval was given to: %q", c.Reason)
			}
		})
	}
}

// A hold whose client was told to retry does not look live once the
// client's session has ended: scoped to the session, nothing can use it
// any more, so it is withdrawn and recorded so; scoped to any session, it
// stays open for another session's identical call and says when its
// client went.
func TestAHoldWhoseClientWentIsNotLive(t *testing.T) {
	for _, tc := range []struct{ scope, config string }{{guard.ScopeSession, ""}, {guard.ScopeAny, "  scope: any\n"}} {
		t.Run(tc.scope, func(t *testing.T) {
			e := newEnv(t, "approval:\n  wait: 300ms\n"+tc.config)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cs := e.connect(ctx, mcp.NewClient(&mcp.Implementation{Name: "gone", Version: "1"}, nil), "2025-11-25", nil, "notes", guardBin, "example-server")
			id := retryID(t, cs)
			if a := e.approvalsAll()[id]; a["state"] != guard.ApprovalPending || a["session_ended"] != "" {
				t.Fatalf("while its session goes on: %v", a)
			}
			cs.Close() // guard run has exited once it returns
			a := e.approvalsAll()[id]
			if tc.scope == guard.ScopeSession {
				if a["state"] != guard.ApprovalWithdrawn {
					t.Fatalf("a session-scoped hold after its session ended: %v", a)
				}
				out, _ := e.guard("audit", "query", "--kind", "decision", "--format", "jsonl", "--approval", id)
				if !strings.Contains(out, `"decision":"withdrawn"`) || !strings.Contains(out, "the call's client is gone") {
					t.Fatalf("no record of the withdrawal: %s", out)
				}
				return
			}
			if a["state"] != guard.ApprovalPending || a["session_ended"] == "" {
				t.Fatalf("a hold of any scope after its session ended: %v", a)
			}
		})
	}
}
