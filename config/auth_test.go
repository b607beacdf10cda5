package config

import (
	"slices"
	"testing"
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
`), "cfg.yaml", func(k string) string { return env[k] })
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
