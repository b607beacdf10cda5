package policy

import (
	"slices"
	"strings"
	"testing"

	guard "github.com/guard-mcp/guard"
)

func TestAuthSectionParses(t *testing.T) {
	env := map[string]string{"INTRO_SECRET": "s3cret", "TX_SECRET": "tx-s3cret"}
	c, err := parse([]byte(`
auth:
  issuer: https://login.example.com
  audience: https://guard.example.com/mcp
  scopes: [mcp, tools]
  groups_claim: roles
  trust_email: true
  introspection: {client_id: guard, client_secret: "${INTRO_SECRET}"}
servers:
  remote:
    url: https://mcp.example.com/mcp
    token_exchange:
      client_id: guard
      client_secret: ${TX_SECRET}
      audience: https://mcp.example.com
      scope: read write
`), "cfg.yaml", func(k string) string { return env[k] }, false)
	if err != nil {
		t.Fatal(err)
	}
	a := c.Auth
	if a.Issuer != "https://login.example.com" || a.Audience != "https://guard.example.com/mcp" || !slices.Equal(a.Scopes, []string{"mcp", "tools"}) ||
		a.GroupsClaim != "roles" || !a.TrustEmail || a.Introspection.ClientID != "guard" || a.Introspection.ClientSecret != "s3cret" {
		t.Fatalf("%+v", a)
	}
	x := c.Servers["remote"].TokenExchange
	if x == nil || x.ClientSecret != "tx-s3cret" || x.Audience != "https://mcp.example.com" || x.Scope != "read write" || x.TokenURL != "" || x.Line != 13 {
		t.Fatalf("%+v", x)
	}
	// The secrets are guard's own: kept from servers, masked in records.
	if c.Expanded["INTRO_SECRET"] != "s3cret" || c.Expanded["TX_SECRET"] != "tx-s3cret" {
		t.Fatalf("expanded: %v", c.Expanded)
	}
	c, err = Parse([]byte("auth: {issuer: 'http://127.0.0.1:9000', audience: 'http://localhost:8930/mcp'}\n"), "cfg.yaml")
	if err != nil || c.Auth.GroupsClaim != "groups" || c.Auth.TrustEmail {
		t.Fatalf("loopback http, groups by default, emails only verified ones: %+v %v", c, err)
	}
}

func TestAuthErrorsNameFileAndLine(t *testing.T) {
	wantParseErrors(t, []parseError{
		{"auth:\n  audience: https://g/mcp\n", 2, "auth.issuer is needed"},
		{"auth:\n  issuer: https://login\n", 2, "auth.audience is needed"},
		{"auth: {issuer: 'http://login.example.com', audience: 'https://g/mcp'}\n", 1, "use https"},
		{"auth: {issuer: 'login.example.com', audience: 'https://g/mcp'}\n", 1, "absolute https:// URL"},
		{"auth: {issuer: 'https://l', audience: 'https://g/mcp#x'}\n", 1, "has a fragment"},
		{"auth: {issuer: 'https://l', audience: 'https://g/mcp', scopes: []}\n", 1, "at least one"},
		{"auth: {issuer: 'https://l', audience: 'https://g/mcp', scopes: ['a b']}\n", 1, "is not a scope"},
		{"auth:\n  issuer: https://l\n  audience: https://g/mcp\n  introspection: {client_id: guard}\n", 4, "needs client_id and client_secret"},
		{"auth: {issuer: 'https://l', audience: 'https://g/mcp', clients: x}\n", 1, `unknown key "clients"`},
		{"servers:\n  r:\n    url: https://r/mcp\n    token_exchange: {client_id: a, client_secret: b, audience: x}\n", 4, "needs auth:"},
		{"auth: {issuer: 'https://l', audience: 'https://g/mcp'}\nservers:\n  r:\n    command: [x]\n    token_exchange: {client_id: a, client_secret: b, audience: x}\n", 5, "over HTTP"},
		{"auth: {issuer: 'https://l', audience: 'https://g/mcp'}\nservers:\n  r:\n    url: https://r/mcp\n    headers: {authorization: x}\n    token_exchange: {client_id: a, client_secret: b, audience: x}\n", 6, "remove headers.authorization"},
		{"servers:\n  r:\n    url: https://r/mcp\n    token_exchange: {client_id: a, audience: x}\n", 4, "needs client_id and client_secret"},
		{"servers:\n  r:\n    url: https://r/mcp\n    token_exchange: {client_id: a, client_secret: b}\n", 4, "needs the audience"},
		{"policy:\n  rules:\n    - {name: a, action: deny, users: []}\n", 3, "users: list at least one"},
		{"policy:\n  rules:\n    - {name: a, action: deny, groups: [sre, '']}\n", 3, "groups: an empty name"},
		{"policy:\n  rules:\n    - {name: a, action: deny, when: 'user.nosuch.size() > 0 && usr.sub == \"x\"'}\n", 3, "undeclared reference to 'usr'"},
	})
}

func TestRulesSeeTheUser(t *testing.T) {
	const rules = `
policy:
  default: allow
  rules:
    - {name: contractors-approve, tool: "write_*", when: "'contractors' in user.groups", action: approve}
    - {name: alice-only, tool: deploy, users: [alice@example.com], action: allow}
    - {name: no-deploy, tool: deploy, action: deny}
    - {name: sre-drop, tool: drop_table, groups: [sre, dba], action: allow}
    - {name: no-drop, tool: drop_table, action: deny}
    - {name: anonymous, tool: whoami, when: 'user.sub == "" && size(user.groups) == 0 && user.email == ""', action: deny, reason: nobody}
    - {name: by-subject, tool: whoami, users: [u-123], action: approve}
`
	c, err := Parse([]byte(rules), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := Compile(c, nil, nil)
	alice := guard.Identity{Subject: "u-123", Email: "alice@example.com", Groups: []string{"sre"}}
	bob := guard.Identity{Subject: "u-456", Email: "bob@example.com", Groups: []string{"contractors"}}
	ro := tool(`{"readOnlyHint":true}`)
	for _, tc := range []struct {
		name string
		tool string
		user guard.Identity
		rule string
		act  string
	}{
		{"a group in a condition", "write_file", bob, "contractors-approve", "approve"},
		{"not in the group", "write_file", alice, "default", "allow"},
		{"no one authenticated: an empty user, no error", "write_file", guard.Identity{}, "default", "allow"},
		{"users by email", "deploy", alice, "alice-only", "allow"},
		{"another user", "deploy", bob, "no-deploy", "deny"},
		{"no user matches no users:", "deploy", guard.Identity{}, "no-deploy", "deny"},
		{"groups", "drop_table", alice, "sre-drop", "allow"},
		{"not in the groups", "drop_table", bob, "no-drop", "deny"},
		{"no one in no group", "drop_table", guard.Identity{}, "no-drop", "deny"},
		{"the empty user's fields", "whoami", guard.Identity{}, "anonymous", "deny"},
		{"users by subject", "whoami", alice, "by-subject", "approve"},
	} {
		v := p.Decide(&guard.Call{Method: "tools/call", ToolName: tc.tool, Arguments: []byte(`{}`), Tool: ro, User: tc.user})
		if v.Rule != tc.rule || v.Action != tc.act {
			t.Errorf("%s: got %s by %s (%s), want %s by %s", tc.name, v.Action, v.Rule, v.Reason, tc.act, tc.rule)
		}
	}
	// users: and groups: are part of what a change shows, and of the
	// policy's version.
	c2, err := Parse([]byte(strings.Replace(rules, "users: [alice@example.com]", "users: [bob@example.com]", 1)), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ch := Changes(c, c2, nil, nil, false)
	if len(ch) != 1 || !strings.Contains(ch[0], `rule "alice-only" changed`) || !strings.Contains(ch[0], "users=bob@example.com, was allow tools/call server=* tool=deploy users=alice@example.com") {
		t.Fatalf("changes: %q", ch)
	}
	if Compile(c2, nil, nil).Version() == p.Version() {
		t.Fatal("the same version for other users")
	}
	b, err := MarshalRules(c.Policy.Rules[1:2])
	if err != nil || !strings.Contains(string(b), "users: [alice@example.com]") {
		t.Fatalf("marshalled: %s %v", b, err)
	}
}
