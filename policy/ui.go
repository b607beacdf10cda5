package policy

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	guard "github.com/guard-mcp/guard"
)

// UI is the approval UI's section (ui:): where it listens, and how people
// log in to it.
type UI struct {
	Listen      string
	AllowRemote bool
	// OIDC logs people in through the organisation's identity provider
	// (authorization code with PKCE); Issuer is "" when not configured.
	OIDC UIOIDC
	// TokenLogin keeps the token link (guard ui url) working; false
	// leaves OIDC as the only way in.
	TokenLogin bool
	// Passkey is PasskeyOff, or PasskeyRequired: every decision on a held
	// call needs the approver's passkey (a WebAuthn assertion).
	Passkey string
	// Line is where the section starts, for errors found after it.
	Line int
}

// UIOIDC is the identity provider the UI logs people in with (ui.oidc).
type UIOIDC struct {
	Issuer       string
	ClientID     string
	ClientSecret string
	// Scopes are asked for besides openid (default email, profile).
	Scopes []string
	// GroupsClaim is the ID token's (or userinfo's) claim that lists the
	// person's groups (default groups).
	GroupsClaim string
	// TrustEmail (trust_email) accepts an email that comes without
	// email_verified as the person's; false, the default, takes only
	// email_verified: true (guard.VerifiedEmail).
	TrustEmail bool
}

// The values of ui.passkey.
const (
	PasskeyOff      = "off"
	PasskeyRequired = "required"
)

// Verified reports whether the UI decides only with verified identities:
// a passkey for every decision, or the provider as the only way in.
func (u UI) Verified() bool {
	return u.Passkey == PasskeyRequired || (u.OIDC.Issuer != "" && !u.TokenLogin)
}

// CLIDecisions reports whether guard approvals approve|deny may decide,
// with a name typed on the command line: approval.cli when the file says,
// else only where the UI does not need verified identities (a typed name
// would be a way around them).
func (c *Config) CLIDecisions() bool {
	if c.Approval.CLISet {
		return c.Approval.CLI
	}
	return !c.UI.Verified()
}

// RequiredVia is how whoever decides on a call held under this
// configuration must have been verified, which the hold keeps
// (guard.Approval.RequiredVia): guard.ViaPasskey with ui.passkey:
// required; guard.ViaOIDC where the UI logs in only through the identity
// provider; "" where a typed name may decide (the UI's token link, or
// approval.cli: true).
func (c *Config) RequiredVia() string {
	switch {
	case c.CLIDecisions():
		return ""
	case c.UI.Passkey == PasskeyRequired:
		return guard.ViaPasskey
	case c.UI.OIDC.Issuer != "" && !c.UI.TokenLogin:
		return guard.ViaOIDC
	}
	return ""
}

// ui reads the ui: section.
func (p *parser) ui(n *yaml.Node, c *Config) error {
	u := &c.UI
	u.Line = n.Line
	var oidc *yaml.Node
	err := p.mapping(n, map[string]func(*yaml.Node) error{
		"listen":       p.str(&u.Listen),
		"allow_remote": p.boolean(&u.AllowRemote),
		"token_login":  p.boolean(&u.TokenLogin),
		"passkey":      p.enum(&u.Passkey, PasskeyOff, PasskeyRequired),
		"oidc": func(n *yaml.Node) error {
			oidc = n
			u.OIDC.GroupsClaim = "groups"
			return p.mapping(n, map[string]func(*yaml.Node) error{
				"issuer":        p.str(&u.OIDC.Issuer),
				"client_id":     p.secret(&u.OIDC.ClientID),
				"client_secret": p.secret(&u.OIDC.ClientSecret),
				"scopes":        p.nonEmptyList(&u.OIDC.Scopes, "ui.oidc.scopes"),
				"groups_claim":  p.str(&u.OIDC.GroupsClaim),
				"trust_email":   p.boolean(&u.OIDC.TrustEmail),
			})
		},
	})
	if err != nil {
		return err
	}
	if !u.AllowRemote && !LoopbackAddr(u.Listen) {
		return p.errf(n, "ui.listen %q is reachable from other machines; use a loopback address, or set ui.allow_remote: true", u.Listen)
	}
	if oidc != nil && oidc.Kind == yaml.MappingNode {
		if err := checkAuthURL("ui.oidc.issuer", u.OIDC.Issuer, "https://login.example.com"); err != nil {
			return p.errf(oidc, "%v", err)
		}
		if u.OIDC.ClientID == "" {
			return p.errf(oidc, "ui.oidc.client_id is needed: the client registered for guard's UI at the provider")
		}
		if strings.TrimSpace(u.OIDC.GroupsClaim) == "" {
			return p.errf(oidc, "ui.oidc.groups_claim: name the claim that lists a person's groups (default groups)")
		}
		u.OIDC.Scopes = slices.DeleteFunc(u.OIDC.Scopes, func(s string) bool { return s == "openid" }) // always asked for
	}
	if !u.TokenLogin && u.OIDC.Issuer == "" {
		return p.errf(n, "ui.token_login: false needs ui.oidc: there would be no way to log in to the UI")
	}
	return nil
}

// checkUI checks what the ui: section needs of the rest of the file: a
// passkey's relying party is a host name (an IP address cannot be one),
// localhost where the UI listens on this machine, else public_url's.
func (c *Config) checkUI() error {
	if c.UI.Passkey != PasskeyRequired {
		return nil
	}
	if _, err := c.PasskeyOrigin(c.UI.Listen); err != nil {
		return &ConfigError{File: c.File, Line: c.UI.Line, Problem: err.Error()}
	}
	return nil
}

// PasskeyOrigin is the UI's origin for passkeys, whose host is the
// relying party: public_url when configured, else http://localhost:PORT
// with the port of listen (a loopback address: ui.listen, or --ui).
func (c *Config) PasskeyOrigin(listen string) (string, error) {
	if c.PublicURL != "" {
		u, err := url.Parse(c.PublicURL)
		if err != nil {
			return "", fmt.Errorf("public_url: %w", err)
		}
		if net.ParseIP(strings.Trim(u.Hostname(), "[]")) != nil {
			return "", fmt.Errorf("ui.passkey: required needs a host name in public_url, not an IP address (%s): a passkey's relying party is a domain", u.Hostname())
		}
		if u.Scheme != "https" && u.Hostname() != "localhost" {
			return "", fmt.Errorf("ui.passkey: required needs public_url over https (browsers offer passkeys only to secure origins), or http://localhost")
		}
		return c.PublicURL, nil
	}
	if !LoopbackAddr(listen) {
		return "", fmt.Errorf("ui.passkey: required with the UI at %q: passkeys need the UI at localhost, or public_url set to its https address", listen)
	}
	_, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("the UI's address %q: %w", listen, err)
	}
	return "http://" + net.JoinHostPort("localhost", port), nil
}
