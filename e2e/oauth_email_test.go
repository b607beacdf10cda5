package e2e

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/guard-mcp/guard/auth/oidctest"
	"github.com/guard-mcp/guard/store"
)

// A token whose email the provider did not verify matches no users: rule
// by that email. mallory's profile carries alice's address, unverified
// (email_verified false in her JWT, left out of her opaque token's
// introspection): guard serve sees her as her subject, the rule that
// allows alice does not apply, and the records name mallory, with no
// email. alice, with her verified email, is allowed.
func TestOAuthUnverifiedEmailMatchesNoRule(t *testing.T) {
	p := startProvider(t, oidctest.Options{Users: []oidctest.User{
		{Subject: "mallory", Email: "alice@example.com", EmailVerified: false},
		{Subject: "mallory-opaque", Email: "alice@example.com", EmailVerified: oidctest.Omitted{}},
	}})
	e, base := serveOAuth(t, p, "policy:\n  default: allow\n  rules:\n    - {name: alice-reads, tool: read_note, users: [alice@example.com], action: allow}\n    - {name: others-no, tool: read_note, action: deny, reason: alice only}\n")
	url := base + "/mcp/notes"
	mint := func(sub string, opaque bool) string {
		return p.Mint(t, oidctest.Mint{Subject: sub, ClientID: "ts-public", Audience: []string{guardAudience}, Scopes: []string{"mcp"}, Opaque: opaque})
	}
	for _, tc := range []struct {
		who, token string
		allowed    bool
	}{
		{"mallory", mint("mallory", false), false},
		{"mallory-opaque", mint("mallory-opaque", true), false},
		{"alice", mint("alice", false), true},
	} {
		resp := postAs(t, url, tc.token, "", initialize)
		session := resp.Header.Get("Mcp-Session-Id")
		if resp.StatusCode != 200 || session == "" {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("%s: %d %s", tc.who, resp.StatusCode, b)
		}
		postAs(t, url, tc.token, session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		resp = postAs(t, url, tc.token, session, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"read_note","arguments":{"title":"welcome"}}}`)
		b, _ := io.ReadAll(resp.Body)
		if denied := strings.Contains(string(b), `Denied by policy rule \"others-no\": alice only`); denied == tc.allowed {
			t.Errorf("%s's read_note: %s", tc.who, b)
		}
	}
	ctx := context.Background()
	db := e.open(ctx)
	defer db.Close()
	seen := map[string]string{}
	err := db.Reader().Query(ctx, store.Filter{Tool: "read_note"}, func(c *store.Call) error {
		seen[c.User] = c.UserEmail + " " + c.DecidedBy
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for who, want := range map[string]string{"mallory": " others-no", "mallory-opaque": " others-no", "alice": "alice@example.com alice-reads"} {
		if seen[who] != want {
			t.Errorf("%s's call is recorded as %q, want %q (all: %v)", who, seen[who], want, seen)
		}
	}
}
