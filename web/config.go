package web

import (
	"errors"
	"fmt"
	"strings"

	"github.com/guard-mcp/guard/config/read"
)

// UIConfig is the approval UI's section of the configuration file (ui:):
// where it listens, and how people log in to it.
type UIConfig struct {
	Listen      string `yaml:"listen"`
	AllowRemote bool   `yaml:"allow_remote"`
	// OIDC logs people in through the organisation's identity provider
	// (authorization code with PKCE); Issuer is "" when not configured.
	OIDC OIDCConfig `yaml:"oidc"`
	// TokenLogin keeps the token link (guard ui url) working; false
	// leaves OIDC as the only way in.
	TokenLogin bool `yaml:"token_login"`
	// Passkey is PasskeyOff, or PasskeyRequired: every decision on a held
	// call needs the approver's passkey (a WebAuthn assertion).
	Passkey string `yaml:"passkey" enum:"off,required"`
	// Line is where the section starts, for errors found after it.
	Line int `yaml:"-"`
}

// OIDCConfig is the identity provider the UI logs people in with
// (ui.oidc).
//
// The tags name the keys of the file and how package config/read reads
// them (read.Reader.Decode).
type OIDCConfig struct {
	Issuer       string `yaml:"issuer"`
	ClientID     string `yaml:"client_id" expand:"secret"`
	ClientSecret string `yaml:"client_secret" expand:"secret"`
	// Scopes are asked for besides openid (default email, profile).
	Scopes []string `yaml:"scopes" nonempty:"ui.oidc.scopes"`
	// GroupsClaim is the ID token's (or userinfo's) claim that lists the
	// person's groups (default groups).
	GroupsClaim string `yaml:"groups_claim"`
	// TrustEmail (trust_email) accepts an email that comes without
	// email_verified as the person's; false, the default, takes only
	// email_verified: true (guard.VerifiedEmail).
	TrustEmail bool `yaml:"trust_email"`
}

// The values of ui.passkey.
const (
	PasskeyOff      = "off"
	PasskeyRequired = "required"
)

// Verified reports whether the UI decides only with verified identities:
// a passkey for every decision, or the provider as the only way in.
func (u UIConfig) Verified() bool {
	return u.Passkey == PasskeyRequired || (u.OIDC.Issuer != "" && !u.TokenLogin)
}

// Validate checks the section as a whole: the UI stays on this machine
// unless allow_remote says otherwise, and there is a way to log in.
func (u UIConfig) Validate() error {
	if !u.AllowRemote && !read.LoopbackAddr(u.Listen) {
		return fmt.Errorf("ui.listen %q is reachable from other machines; use a loopback address, or set ui.allow_remote: true", u.Listen)
	}
	if !u.TokenLogin && u.OIDC.Issuer == "" {
		return errors.New("ui.token_login: false needs ui.oidc: there would be no way to log in to the UI")
	}
	return nil
}

// Preset gives a configured provider its default claim of groups.
func (o *OIDCConfig) Preset() { o.GroupsClaim = "groups" }

// Validate checks a configured provider: its issuer, guard's client at it
// and the claim of a person's groups.
func (o OIDCConfig) Validate() error {
	if err := read.CheckURL("ui.oidc.issuer", o.Issuer, "https://login.example.com"); err != nil {
		return err
	}
	if o.ClientID == "" {
		return errors.New("ui.oidc.client_id is needed: the client registered for guard's UI at the provider")
	}
	if strings.TrimSpace(o.GroupsClaim) == "" {
		return errors.New("ui.oidc.groups_claim: name the claim that lists a person's groups (default groups)")
	}
	return nil
}
