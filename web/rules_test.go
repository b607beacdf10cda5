package web_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/approvals"
)

var (
	sreAlice = approvals.Reviewer{Identity: guard.Identity{Subject: "u-alice", Email: "alice@example.com", Groups: []string{"sre"}}, Via: guard.ViaOIDC}
	sreBob   = approvals.Reviewer{Identity: guard.Identity{Subject: "u-bob", Email: "bob@example.com", Groups: []string{"sre"}}, Via: guard.ViaPasskey}
)

// A call whose approval needs two verified people: a typed name cannot
// decide it (the page says so and offers no buttons, and a posted
// approval is refused), and the page shows who approved so far and what
// is still needed.
func TestATypedNameCannotDecideAnApprovalWithRules(t *testing.T) {
	e := newEnv(t)
	// The call's request record, as the relay writes it before the wait.
	id := appendCall(t, e.db, "db", "write_rows", guard.DecisionHeld, "prod-writes", guard.OutcomeOK, `{"table":"orders"}`, 3)
	a := e.holdWith(&guard.Approval{ID: id, Server: "db", Tool: "write_rows", Arguments: `{"table":"orders"}`, Rule: "prod-writes",
		HeldReason: "writes to production", Client: "agent/1.0",
		Approvers: guard.Approvers{Groups: []string{"sre"}, Count: 2},
		Caller:    guard.Identity{Subject: "agent-7", Email: "dev@example.com"}})
	if _, err := e.m.Review(context.Background(), a.ID, sreAlice, true, "checked the table", nil); err != nil {
		t.Fatal(err)
	}
	b := e.login("carol")
	_, body := b.get("/")
	for _, want := range []string{
		`data-role="requester">dev@example.com`,
		"2 approvals from members of sre", "a typed name cannot approve it",
		`data-review="approved"`, "<strong>alice@example.com</strong> approved at", "verified by the identity provider", "groups sre", "checked the table",
		`data-role="waiting">1 more approval from members of sre`,
		`data-role="refusal"`, "&#34;carol&#34; is a typed name, not a verified identity",
		`<div class="actions" hidden>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("pending page: missing %q", want)
		}
	}
	if strings.Contains(body, `data-action="approve-always"`) {
		t.Error("an approval with approvers offers to allow its tool from now on")
	}
	res, _ := b.post("/approvals/"+a.ID+"/approve", nil)
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("approve: %d", res.StatusCode)
	}
	_, body = b.get("/")
	if !strings.Contains(body, "Not recorded: not allowed to decide on this call: this call needs 2 approvals from members of sre") {
		t.Errorf("a typed name's approval: no refusal shown: %s", body)
	}
	if got := e.approval(a.ID); got.State != guard.ApprovalPending || len(got.Reviews) != 1 {
		t.Fatalf("a typed name's approval counted: %+v", got)
	}

	// The second verified approval decides; the call's page shows both.
	if _, err := e.m.Review(context.Background(), a.ID, sreBob, true, "", nil); err != nil {
		t.Fatal(err)
	}
	_, body = b.get("/activity/" + a.ID)
	for _, want := range []string{"<strong>alice@example.com</strong> approved", "<strong>bob@example.com</strong> approved",
		"verified with a passkey", `data-count="2"`} {
		if !strings.Contains(body, want) {
			t.Errorf("call page: missing %q", want)
		}
	}
	if strings.Contains(body, `data-role="waiting"`) {
		t.Error("call page: a decided approval still says what it needs")
	}
}

// The person whose call is held is refused, with a message that says so,
// even for an approval anyone else could decide with a typed name.
func TestTheRequesterCannotApproveTheirOwnCall(t *testing.T) {
	e := newEnv(t)
	a := e.holdWith(&guard.Approval{Server: "files", Tool: "delete_file", Arguments: `{"path":"/tmp/a"}`, Rule: "default",
		HeldReason: "destructive tool", Caller: guard.Identity{Subject: "dana"}})
	own := e.login("dana")
	_, body := own.get("/")
	if !strings.Contains(body, "dana made this call, and cannot decide on it: someone else must.") || !strings.Contains(body, "data-own") {
		t.Errorf("pending page for the requester: no refusal shown: %s", body)
	}
	own.post("/approvals/"+a.ID+"/approve", nil)
	_, body = own.get("/")
	if !strings.Contains(body, "Not recorded: not allowed to decide on this call: dana made this call") {
		t.Errorf("the requester's approval: no refusal shown")
	}
	if got := e.approval(a.ID); got.State != guard.ApprovalPending || len(got.Reviews) != 0 {
		t.Fatalf("the requester's approval counted: %+v", got)
	}
	other := e.login("erin")
	if res, _ := other.post("/approvals/"+a.ID+"/approve", nil); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("approve: %d", res.StatusCode)
	}
	if got := e.approval(a.ID); got.State != guard.ApprovalApproved || got.DecidedBy != "erin" {
		t.Fatalf("someone else's approval: %+v", got)
	}
}
