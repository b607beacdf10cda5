package config

import (
	"slices"
	"testing"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/web"
)

func TestUISectionParses(t *testing.T) {
	env := map[string]string{"UI_SECRET": "ui-s3cret"}
	c, err := parse([]byte(`
ui:
  listen: 127.0.0.1:9931
  oidc:
    issuer: https://login.example.com
    client_id: guard-ui
    client_secret: ${UI_SECRET}
    scopes: [openid, email, groups]
    groups_claim: roles
    trust_email: true
  token_login: false
  passkey: required
`), "cfg.yaml", func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	o := c.UI.OIDC
	if o.Issuer != "https://login.example.com" || o.ClientID != "guard-ui" || o.ClientSecret != "ui-s3cret" ||
		!slices.Equal(o.Scopes, []string{"email", "groups"}) || o.GroupsClaim != "roles" || !o.TrustEmail || c.UI.TokenLogin || c.UI.Passkey != web.PasskeyRequired {
		t.Fatalf("%+v", c.UI)
	}
	// The client secret is guard's own: kept from servers, masked.
	if c.Expanded["UI_SECRET"] != "ui-s3cret" {
		t.Fatalf("expanded: %v", c.Expanded)
	}
	if origin, err := c.PasskeyOrigin(c.UI.Listen); err != nil || origin != "http://localhost:9931" {
		t.Fatalf("passkey origin: %q %v", origin, err)
	}
	// Verified identities only: the command line's typed names are off,
	// unless approval.cli says otherwise, and the calls held under it
	// keep that they need a passkey.
	if c.CLIDecisions() || c.RequiredVia() != guard.ViaPasskey {
		t.Fatalf("guard approvals may decide with passkeys required, or holds need %q", c.RequiredVia())
	}
	c, err = Parse([]byte("ui: {passkey: required}\napproval: {cli: true}\n"), "cfg.yaml")
	if err != nil || !c.CLIDecisions() || c.RequiredVia() != "" || c.UI.OIDC.Issuer != "" || !c.UI.TokenLogin {
		t.Fatalf("approval.cli: true: %+v %v", c, err)
	}
	c, err = Parse([]byte("ui: {oidc: {issuer: 'http://127.0.0.1:9000', client_id: x}}\n"), "cfg.yaml")
	if err != nil || !c.CLIDecisions() || c.RequiredVia() != "" || c.UI.OIDC.GroupsClaim != "groups" || c.UI.OIDC.TrustEmail || c.UI.Passkey != web.PasskeyOff {
		t.Fatalf("OIDC beside the token link leaves the command line on: %+v %v", c, err)
	}
	c, err = Parse([]byte("ui: {oidc: {issuer: 'http://127.0.0.1:9000', client_id: x}, token_login: false}\n"), "cfg.yaml")
	if err != nil || c.CLIDecisions() || c.RequiredVia() != guard.ViaOIDC {
		t.Fatalf("OIDC alone: holds need %q: %v", c.RequiredVia(), err)
	}
	c, err = Parse([]byte("approval: {cli: false}\n"), "cfg.yaml")
	if err != nil || c.CLIDecisions() || c.RequiredVia() != "" {
		t.Fatalf("approval.cli: false beside the token link, where a typed name decides in the UI: holds need %q: %v", c.RequiredVia(), err)
	}
	if c := Default(); !c.CLIDecisions() || !c.UI.TokenLogin || c.RequiredVia() != "" {
		t.Fatal("the defaults")
	}
}

func TestUIErrorsNameFileAndLine(t *testing.T) {
	wantParseErrors(t, []parseError{
		{"ui:\n  token_login: false\n", 2, "needs ui.oidc"},
		{"ui:\n  oidc:\n    client_id: x\n", 3, "ui.oidc.issuer is needed"},
		{"ui:\n  oidc:\n    issuer: http://login.example.com\n    client_id: x\n", 3, "use https"},
		{"ui:\n  oidc: {issuer: 'https://l'}\n", 2, "client_id is needed"},
		{"ui:\n  oidc: {issuer: 'https://l', client_id: x, groups_claim: ''}\n", 2, "groups_claim"},
		{"ui:\n  passkey: sometimes\n", 2, `"sometimes" is not one of off, required`},
		{"ui:\n  passkey: required\npublic_url: https://10.0.0.1\n", 2, "not an IP address"},
		{"ui:\n  passkey: required\npublic_url: http://guard.example.com\n", 2, "over https"},
		{"ui:\n  listen: 0.0.0.0:8931\n  allow_remote: true\n  passkey: required\n", 2, "need the UI at localhost"},
		{"approval:\n  cli: maybe\n", 2, "expected true or false"},
	})
}
