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
		c := cardView{ID: a.ID, Server: a.Server, Tool: a.Tool, Rule: a.Rule, Rules: rulesOf(a, tc.sess, false)}
		html := cardShows(t, tc.name, c, pendingView{CSRF: "x", AllowAlways: true}, tc.refusal)
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

// A call held where decisions need a passkey says so, and the card shows
// its buttons only to a session that will decide with one: one that used a
// passkey, or any named session of a UI that asks for a passkey with every
// decision. A typed name, or a login through the provider, in a UI
// without passkeys sees why not.
func TestCardOfACallHeldWherePasskeysAreRequired(t *testing.T) {
	at := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	a := &guard.Approval{ID: "a1", Server: "files", Tool: "delete_file", State: guard.ApprovalPending, Rule: "default",
		RequiredVia: guard.ViaPasskey, CreatedAt: at, ExpiresAt: at.Add(time.Hour)}
	typed := session{name: "bob", user: guard.Identity{Subject: "bob"}}
	for _, tc := range []struct {
		name     string
		sess     session
		passkeys bool
		refusal  string // "" when the buttons show
	}{
		{"a typed name, in a UI with passkeys", typed, true, ""},
		{"a session that used its passkey", session{name: "alice", user: guard.Identity{Subject: "alice"}, via: guard.ViaPasskey}, false, ""},
		{"a typed name, in a UI without passkeys", typed, false,
			`this call was held where decisions need the approver's passkey (ui.passkey: required), and "bob" is a typed name, not a verified identity: decide in the UI, with your passkey.`},
		{"a login through the provider", session{user: guard.Identity{Subject: "u-alice", Email: "alice@example.com"}, via: guard.ViaOIDC}, false,
			"alice@example.com was verified by the identity provider: decide in the UI, with your passkey."},
		{"no one yet, in a UI without passkeys", session{}, false,
			"This call was held where decisions need the approver's passkey (ui.passkey: required): decide in the UI, with your passkey."},
	} {
		c := cardView{ID: a.ID, Server: a.Server, Tool: a.Tool, Rule: a.Rule, Rules: rulesOf(a, tc.sess, tc.passkeys)}
		html := cardShows(t, tc.name, c, pendingView{CSRF: "x"}, tc.refusal)
		if !strings.Contains(html, `data-role="required-via">the approver's passkey (ui.passkey: required)`) {
			t.Errorf("%s: the card does not say the call needs a passkey: %s", tc.name, html)
		}
	}
}

// cardShows renders a held call's card and checks that it shows its
// buttons (refusal "") or, without them, the refusal; it returns the HTML,
// quotes unescaped.
func cardShows(t *testing.T, name string, c cardView, v pendingView, refusal string) string {
	t.Helper()
	var b strings.Builder
	if err := card(c, v).Render(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	html := strings.NewReplacer("&#34;", `"`, "&#39;", "'").Replace(b.String())
	if refusal == "" {
		if !strings.Contains(html, `data-role="refusal" hidden></p>`) || !strings.Contains(html, `<div class="actions">`) {
			t.Errorf("%s: no buttons: %s", name, html)
		}
	} else if !strings.Contains(html, refusal) || !strings.Contains(html, `<div class="actions" hidden>`) {
		t.Errorf("%s: want the refusal %q and no buttons: %s", name, refusal, html)
	}
	return html
}
