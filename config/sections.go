package config

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/auth"
	"github.com/guard-mcp/guard/config/read"
	"github.com/guard-mcp/guard/notify"
	"github.com/guard-mcp/guard/telemetry"
	"github.com/guard-mcp/guard/web"
	"go.yaml.in/yaml/v3"
)

// readUI reads the ui: section (web.UIConfig); a provider's scopes leave
// out openid, which is always asked for.
func readUI(r *read.Reader, n *yaml.Node, u *web.UIConfig) error {
	u.Line = n.Line
	if err := r.Decode(n, u); err != nil {
		return err
	}
	u.OIDC.Scopes = slices.DeleteFunc(u.OIDC.Scopes, func(s string) bool { return s == "openid" })
	return nil
}

// readAuth reads the auth: section (auth.Settings).
func readAuth(r *read.Reader, n *yaml.Node, a *auth.Settings) error {
	a.Line = n.Line
	if err := r.Decode(n, a); err != nil || n.Kind != yaml.MappingNode {
		return err // auth: with nothing: off
	}
	// As written: a ${NAME} whose variable is unset in this command's
	// environment (guard audit query, run by an auditor) is not an error
	// here; guard serve refuses to start without it.
	for i := 0; i+1 < len(n.Content); i += 2 {
		if intro := n.Content[i+1]; n.Content[i].Value == "introspection" &&
			(!read.Written(intro, "client_id") || !read.Written(intro, "client_secret")) {
			return r.Errf(intro, "auth.introspection needs client_id and client_secret (guard's credentials at the provider's introspection endpoint)")
		}
	}
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
			return &Error{File: c.File, Line: x.Line, Problem: fmt.Sprintf("servers.%s.token_exchange: ", name) + fmt.Sprintf(format, args...)}
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

// readNotify reads notify:, a list of receivers (notify.Config). The
// webhook's address and the secret are expanded (${NAME}) and their
// variables are guard's own secrets, masked wherever they appear.
func readNotify(r *read.Reader, n *yaml.Node, dst *[]notify.Config) error {
	if n.Kind != yaml.SequenceNode {
		return r.Errf(n, "expected a list of receivers, like - {webhook: https://hooks.slack.com/services/..., format: slack}")
	}
	seen := map[string]bool{}
	for _, e := range n.Content {
		c := notify.Config{Format: notify.FormatJSON}
		if err := r.DecodeEntry(e, &c); err != nil {
			return err
		}
		// The secret as written: a variable that is not set in the
		// environment of a command that does not notify (guard approvals,
		// guard audit) does not make the configuration invalid there.
		secret := read.Value(e, "secret")
		shown := notify.Shown(c.Webhook)
		switch {
		case c.Format == notify.FormatJSON && strings.TrimSpace(secret) == "":
			return r.Errf(e, "webhook %q: the json format is signed: give a secret (secret: ${HOOK_SECRET}) that the receiver checks", shown)
		case c.Format == notify.FormatSlack && secret != "":
			return r.Errf(e, "webhook %q: Slack checks no signature: leave the secret out (the webhook's address is its secret)", shown)
		}
		if seen[c.Name()] {
			return r.Errf(e, "webhook %q is listed twice", shown)
		}
		seen[c.Name()] = true
		*dst = append(*dst, c)
	}
	return nil
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
	case c.UI.Passkey == web.PasskeyRequired:
		return guard.ViaPasskey
	case c.UI.OIDC.Issuer != "" && !c.UI.TokenLogin:
		return guard.ViaOIDC
	}
	return ""
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
	if !read.LoopbackAddr(listen) {
		return "", fmt.Errorf("ui.passkey: required with the UI at %q: passkeys need the UI at localhost, or public_url set to its https address", listen)
	}
	_, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("the UI's address %q: %w", listen, err)
	}
	return "http://" + net.JoinHostPort("localhost", port), nil
}

// readTelemetry reads telemetry: {otlp: URL, sample: 0..1, headers: {...}}
// (telemetry.Config). The URL and the headers' values are expanded
// (${NAME}) and their variables are guard's own secrets: a header is
// usually an API key.
func readTelemetry(r *read.Reader, n *yaml.Node, t *telemetry.Config) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if err := r.Mapping(n, map[string]func(*yaml.Node) error{
		"otlp": r.Secret(&t.OTLP),
		"sample": func(v *yaml.Node) error {
			f, err := strconv.ParseFloat(v.Value, 64)
			if v.Kind != yaml.ScalarNode || err != nil {
				return r.Errf(v, "telemetry.sample: expected a number from 0 to 1")
			}
			t.Sample = f
			return nil
		},
		"headers": func(v *yaml.Node) error {
			if v.Kind != yaml.MappingNode {
				return r.Errf(v, "telemetry.headers: expected a mapping of header names to values")
			}
			t.Headers = map[string]string{}
			for i := 0; i+1 < len(v.Content); i += 2 {
				if v.Content[i+1].Kind != yaml.ScalarNode {
					return r.Errf(v.Content[i+1], "telemetry.headers.%s: expected a string", v.Content[i].Value)
				}
				t.Headers[v.Content[i].Value] = r.Expand(v.Content[i+1].Value)
			}
			return nil
		},
	}); err != nil {
		return err
	}
	if err := t.Validate(); err != nil {
		return r.Errf(n, "%v", err)
	}
	return nil
}
