package policy

import (
	"fmt"
	"net"
	"net/url"
	"strings"

	"go.yaml.in/yaml/v3"
)

// auth reads the auth: section.
func (p *parser) auth(n *yaml.Node, a *Auth) error {
	a.GroupsClaim = "groups"
	a.Line = n.Line
	var intro *yaml.Node
	err := p.mapping(n, map[string]func(*yaml.Node) error{
		"issuer":       p.str(&a.Issuer),
		"audience":     p.str(&a.Audience),
		"scopes":       p.nonEmptyList(&a.Scopes, "scopes"),
		"groups_claim": p.str(&a.GroupsClaim),
		"trust_email":  p.boolean(&a.TrustEmail),
		"introspection": func(n *yaml.Node) error {
			intro = n
			return p.mapping(n, map[string]func(*yaml.Node) error{
				"client_id":     p.secret(&a.Introspection.ClientID),
				"client_secret": p.secret(&a.Introspection.ClientSecret),
			})
		},
	})
	if err != nil {
		return err
	}
	if n.Kind != yaml.MappingNode {
		return nil // auth: with nothing: off
	}
	if err := checkAuthURL("auth.issuer", a.Issuer, "https://login.example.com"); err != nil {
		return p.errf(n, "%v", err)
	}
	if err := checkAuthURL("auth.audience", a.Audience, "https://guard.example.com/mcp"); err != nil {
		return p.errf(n, "%v (guard's resource URI: what tokens must be issued for)", err)
	}
	if strings.TrimSpace(a.GroupsClaim) == "" {
		return p.errf(n, "auth.groups_claim: name the claim that lists a caller's groups (default groups)")
	}
	for _, s := range a.Scopes {
		if s == "" || strings.ContainsAny(s, " \t\"\\") {
			return p.errf(n, "auth.scopes: %q is not a scope (no spaces or quotes)", s)
		}
	}
	// As written: a ${NAME} whose variable is unset in this command's
	// environment (guard audit query, run by an auditor) is not an error
	// here; guard serve refuses to start without it.
	if intro != nil && (!written(intro, "client_id") || !written(intro, "client_secret")) {
		return p.errf(intro, "auth.introspection needs client_id and client_secret (guard's credentials at the provider's introspection endpoint)")
	}
	return nil
}

// checkAuthURL checks the issuer or audience: an absolute URL without a
// fragment, https but where it is the machine itself.
func checkAuthURL(what, s, example string) error {
	if s == "" {
		return fmt.Errorf("%s is needed, like %s", what, example)
	}
	u, err := url.Parse(s)
	switch {
	case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		return fmt.Errorf("%s %q: use an absolute https:// URL, like %s", what, s, example)
	case u.Fragment != "" || strings.Contains(s, "#"):
		return fmt.Errorf("%s %q has a fragment", what, s)
	case u.Scheme == "http" && !loopbackHost(u.Hostname()):
		return fmt.Errorf("%s %q: use https (http only for this machine: localhost, 127.0.0.1, [::1])", what, s)
	}
	return nil
}

// loopbackHost reports whether a URL's host (as url.URL.Hostname gives
// it) is this machine.
func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// secret reads a string that may be a credential: its ${NAME} variables
// are expanded and known as guard's own secrets.
func (p *parser) secret(dst *string) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		if n.Kind != yaml.ScalarNode {
			return p.errf(n, "expected a string")
		}
		*dst = p.expand(n.Value)
		return nil
	}
}

// nonEmptyList reads a list of strings that must not be empty, nor hold
// an empty string.
func (p *parser) nonEmptyList(dst *[]string, what string) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		if err := p.list(dst)(n); err != nil {
			return err
		}
		if len(*dst) == 0 {
			return p.errf(n, "%s: list at least one, or leave it out", what)
		}
		for i, s := range *dst {
			if strings.TrimSpace(s) == "" {
				return p.errf(n.Content[i], "%s: an empty name", what)
			}
		}
		return nil
	}
}

// tokenExchange reads servers.NAME.token_exchange.
func (p *parser) tokenExchange(n *yaml.Node, dst **TokenExchange) error {
	x := &TokenExchange{Line: n.Line}
	if err := p.mapping(n, map[string]func(*yaml.Node) error{
		"token_url":     p.str(&x.TokenURL),
		"client_id":     p.secret(&x.ClientID),
		"client_secret": p.secret(&x.ClientSecret),
		"audience":      p.str(&x.Audience),
		"scope":         p.str(&x.Scope),
		"resource":      p.str(&x.Resource),
	}); err != nil {
		return err
	}
	switch {
	case !written(n, "client_id") || !written(n, "client_secret"):
		return p.errf(n, "token_exchange needs client_id and client_secret (guard's credentials at the token endpoint)")
	case x.Audience == "" && x.Resource == "":
		return p.errf(n, "token_exchange needs the audience (or resource) the upstream server accepts")
	}
	if x.TokenURL != "" {
		if err := checkAuthURL("token_exchange.token_url", x.TokenURL, "https://login.example.com/oauth/token"); err != nil {
			return p.errf(n, "%v", err)
		}
	}
	*dst = x
	return nil
}

// checkAuth checks what spans sections: a token exchange needs callers
// with access tokens, and a remote server to send its token to.
func (c *Config) checkAuth() error {
	for name, s := range c.Servers {
		x := s.TokenExchange
		if x == nil {
			continue
		}
		fail := func(format string, args ...any) error {
			return &ConfigError{File: c.File, Line: x.Line, Problem: fmt.Sprintf("servers.%s.token_exchange: ", name) + fmt.Sprintf(format, args...)}
		}
		switch {
		case c.Auth.Issuer == "":
			return fail("needs auth: (an issuer whose access tokens callers send): there is no token to exchange otherwise")
		case s.URL == "":
			return fail("applies to a server reached over HTTP (url:), not one guard starts")
		}
		for h := range s.Headers {
			if strings.EqualFold(h, "Authorization") {
				return fail("the exchanged token is the Authorization header: remove headers.%s", h)
			}
		}
	}
	return nil
}

// written reports whether a mapping gives key a value, as written (before
// its variables are expanded).
func written(n *yaml.Node, key string) bool {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return strings.TrimSpace(n.Content[i+1].Value) != ""
		}
	}
	return false
}
