package web

import (
	"context"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
)

// The Pending page's card for a call whose approval has rules, rendered
// for sessions whose identity a login verified (OIDC, a passkey): the
// one who may decide sees the buttons; the others see why not.
func TestCardFollowsTheSessionsVerifiedIdentity(t *testing.T) {
	at := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	a := &guard.Approval{ID: "a1", Server: "db", Tool: "write_rows", State: guard.ApprovalPending, Rule: "prod-writes",
		Approvers: guard.Approvers{Groups: []string{"sre"}, Users: []string{"root@example.com"}, Count: 2},
		Caller:    guard.Identity{Subject: "agent-7", Email: "dev@example.com"},
		Reviews: []guard.ApprovalReview{{By: guard.Identity{Subject: "u-alice", Email: "alice@example.com", Groups: []string{"sre"}},
			Via: guard.ViaOIDC, Approve: true, Time: at}},
		CreatedAt: at, ExpiresAt: at.Add(time.Hour)}
	for _, tc := range []struct {
		name    string
		sess    session
		refusal string // "" when the buttons show
	}{
		{"a member of sre", session{user: guard.Identity{Subject: "u-bob", Email: "bob@example.com", Groups: []string{"sre"}}, via: guard.ViaOIDC}, ""},
		{"a listed user", session{user: guard.Identity{Subject: "u-root", Email: "root@example.com"}, via: guard.ViaPasskey}, ""},
		{"who approved already", session{user: guard.Identity{Subject: "u-alice", Email: "alice@example.com", Groups: []string{"sre"}}, via: guard.ViaOIDC},
			"alice@example.com approved this call at 2026-11-27T10:00:00Z, and counts once; it needs 1 more approval(s) from someone else."},
		{"someone outside", session{user: guard.Identity{Subject: "u-mallory", Email: "mallory@example.com", Groups: []string{"dev"}}, via: guard.ViaOIDC},
			"mallory@example.com may not decide on this call; members of sre, or root@example.com may."},
		{"the requester", session{user: guard.Identity{Subject: "agent-7"}, via: guard.ViaOIDC},
			"agent-7 made this call, and cannot decide on it: someone else must."},
		{"no one yet", session{}, "This call needs 2 approvals from members of sre, or root@example.com: log in to the UI through the identity provider, or with a passkey, to decide on it. A typed name cannot."},
	} {
		c := cardView{ID: a.ID, Server: a.Server, Tool: a.Tool, Rule: a.Rule, Rules: rulesOf(a, tc.sess)}
		var b strings.Builder
		if err := card(c, pendingView{CSRF: "x", AllowAlways: true}).Render(context.Background(), &b); err != nil {
			t.Fatal(err)
		}
		html := strings.ReplaceAll(b.String(), "&#34;", `"`)
		if tc.refusal == "" {
			if !strings.Contains(html, `data-role="refusal" hidden></p>`) || !strings.Contains(html, `<div class="actions">`) {
				t.Errorf("%s: no buttons: %s", tc.name, html)
			}
		} else if !strings.Contains(html, tc.refusal) || !strings.Contains(html, `<div class="actions" hidden>`) {
			t.Errorf("%s: want the refusal %q and no buttons: %s", tc.name, tc.refusal, html)
		}
		for _, want := range []string{"2 approvals from members of sre, or root@example.com", "<strong>alice@example.com</strong> approved at", "(verified by the identity provider; groups sre)",
			"1 more approval from members of sre, or root@example.com", `data-role="requester">dev@example.com`} {
			if !strings.Contains(html, want) {
				t.Errorf("%s: missing %q", tc.name, want)
			}
		}
		if strings.Contains(html, "approve-always") {
			t.Errorf("%s: allow from now on is offered", tc.name)
		}
	}
}
