package proxy

import (
	"context"
	"errors"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/approvals"
)

// A call the front authenticated is held with its rule's approvers and
// its caller: the caller cannot approve it, the people the rule names can.
func TestAHoldCarriesItsApproversAndItsCaller(t *testing.T) {
	caller := guard.Identity{Subject: "agent-7", Email: "dev@example.com", Groups: []string{"sre"}}
	h := newHarness(t, harnessOpts{caller: caller, config: `policy:
  rules:
    - name: sre-deletes
      tool: delete_note
      action: approve
      approvers: {groups: [sre]}
`})
	cs := h.client(nil, "")
	defer cs.Close()
	ctx := context.Background()
	got := make(chan *mcp.CallToolResult, 1)
	go func() {
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"title": "groceries"}})
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	id := waitPending(t, h, "delete_note")
	a, err := h.holds.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if a.Rule != "sre-deletes" || a.Approvers.Groups[0] != "sre" || a.Caller.Subject != "agent-7" || a.Caller.Email != "dev@example.com" {
		t.Fatalf("held: %+v", a)
	}
	if _, err := h.holds.Review(ctx, id, approvals.Reviewer{Identity: caller, Via: guard.ViaOIDC}, true, "", nil); !errors.Is(err, guard.ErrNotApprover) {
		t.Fatalf("the caller's own approval: %v", err)
	}
	sre := approvals.Reviewer{Identity: guard.Identity{Subject: "u-ops", Email: "ops@example.com", Groups: []string{"sre"}}, Via: guard.ViaOIDC}
	if _, err := h.holds.Review(ctx, id, sre, true, "", nil); err != nil {
		t.Fatal(err)
	}
	// Forwarded: the server's own answer (there is no such note).
	if r := <-got; r == nil || textOf(t, r) != `no note titled "groceries"` {
		t.Fatalf("the approved call: %q", textOf(t, r))
	}
	for _, c := range h.calls() {
		if c.ID == id && (c.Outcome != guard.OutcomeToolError || c.DecidedBy != "ops@example.com") {
			t.Fatalf("record of the approved call: %+v", c)
		}
	}
}

// The person at the client is asked in band only about a call they may
// decide: not when the front authenticated the caller (their own call),
// nor when its approvers, or the configuration it was held under, need
// verified identities.
func TestDecidableInBand(t *testing.T) {
	for _, tc := range []struct {
		a    guard.Approval
		want bool
	}{
		{guard.Approval{}, true},
		{guard.Approval{Approvers: guard.Approvers{Count: 1}}, true},
		{guard.Approval{Caller: guard.Identity{Subject: "agent-7"}}, false},
		{guard.Approval{Approvers: guard.Approvers{Count: 2}}, false},
		{guard.Approval{Approvers: guard.Approvers{Groups: []string{"sre"}, Count: 1}}, false},
		{guard.Approval{RequiredVia: guard.ViaPasskey}, false},
		{guard.Approval{RequiredVia: guard.ViaOIDC}, false},
	} {
		if got := decidableInBand(&tc.a); got != tc.want {
			t.Errorf("%+v: %v, want %v", tc.a, got, tc.want)
		}
	}
}
