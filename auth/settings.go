package auth

import (
	"fmt"
	"strings"

	"github.com/guard-mcp/guard/config/read"
)

// Settings is the auth: section of the configuration file: the identity
// provider whose access tokens guard serve accepts. Issuer is "" when it
// is not configured. The tags name the keys of the file and how package
// config/read reads them (read.Reader.Decode).
type Settings struct {
	// Issuer is the provider's issuer URL, as its tokens name it.
	Issuer string `yaml:"issuer"`
	// Audience is guard's resource URI (RFC 8707): tokens must be for it
	// (or for the URL of the endpoint they are sent to).
	Audience string `yaml:"audience"`
	// Scopes must all be granted to a token.
	Scopes []string `yaml:"scopes" nonempty:"scopes"`
	// GroupsClaim is the token claim that lists the caller's groups.
	GroupsClaim string `yaml:"groups_claim"`
	// TrustEmail (trust_email) accepts a token's email that comes
	// without email_verified as the caller's; false, the default, takes
	// only email_verified: true (guard.VerifiedEmail).
	TrustEmail bool `yaml:"trust_email"`
	// Introspection authenticates guard at the provider's introspection
	// endpoint (RFC 7662), for opaque tokens; empty: they are refused.
	Introspection Introspection `yaml:"introspection"`
	Line          int           `yaml:"-"` // where the section starts
}

// Introspection is guard's client at the provider's introspection
// endpoint (auth.introspection).
type Introspection struct {
	ClientID     string `yaml:"client_id" expand:"secret"`
	ClientSecret string `yaml:"client_secret" expand:"secret"`
}

// Preset gives a written section its default claim of groups.
func (s *Settings) Preset() { s.GroupsClaim = "groups" }

// Validate checks a configured section: the issuer and the audience are
// URLs, the groups claim is named, the scopes are scopes.
func (s Settings) Validate() error {
	if err := read.CheckURL("auth.issuer", s.Issuer, "https://login.example.com"); err != nil {
		return err
	}
	if err := read.CheckURL("auth.audience", s.Audience, "https://guard.example.com/mcp"); err != nil {
		return fmt.Errorf("%w (guard's resource URI: what tokens must be issued for)", err)
	}
	if strings.TrimSpace(s.GroupsClaim) == "" {
		return fmt.Errorf("auth.groups_claim: name the claim that lists a caller's groups (default groups)")
	}
	for _, sc := range s.Scopes {
		if sc == "" || strings.ContainsAny(sc, " \t\"\\") {
			return fmt.Errorf("auth.scopes: %q is not a scope (no spaces or quotes)", sc)
		}
	}
	return nil
}
