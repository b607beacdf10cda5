package config

import (
	"fmt"
	"net"
	"net/url"
	"strings"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/config/read"
	"github.com/guard-mcp/guard/hosts"
	"go.yaml.in/yaml/v3"
)

// ParsePublicURL checks a public_url: an absolute http:// or https:// URL
// with a host, and nothing else that a Host or an Origin header cannot
// carry (user information, a path other than "/", a query, a fragment).
// It returns the URL in the form guard prints: the scheme and host in
// lower case, the scheme's default port left out, no trailing slash.
func ParsePublicURL(s string) (string, error) {
	u, err := url.Parse(s)
	// The value may hold a password or a token: errors show it as logs
	// would (guard.DisplayURL).
	shown := s
	if err != nil || u.User != nil || u.RawQuery != "" {
		shown = guard.DisplayURL(s)
	}
	switch {
	case err != nil:
		return "", fmt.Errorf("public_url %q is not a URL: %v", shown, errorWithoutInput(err))
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("public_url %q: use an absolute http:// or https:// URL, like https://guard.example.com", shown)
	case u.Opaque != "" || u.Host == "":
		return "", fmt.Errorf("public_url %q has no host (write %s://HOST[:PORT])", shown, u.Scheme)
	case u.User != nil:
		return "", fmt.Errorf("public_url %q holds user information (before an @): clients never send it; leave it out", shown)
	case u.Path != "" && u.Path != "/":
		return "", fmt.Errorf("public_url %q has a path (%s): guard answers at the root (/mcp/NAME, the UI); give the scheme and host only", shown, u.Path)
	case u.RawQuery != "" || u.ForceQuery:
		return "", fmt.Errorf("public_url %q has a query string: give the scheme and host only", shown)
	case u.Fragment != "" || strings.Contains(s, "#"):
		return "", fmt.Errorf("public_url %q has a fragment: give the scheme and host only", shown)
	}
	host := strings.ToLower(u.Host)
	if h, port, err := net.SplitHostPort(host); err == nil {
		if port == "" || port == defaultPort(u.Scheme) {
			host = h
			if strings.Contains(h, ":") {
				host = "[" + h + "]"
			}
		}
	}
	return u.Scheme + "://" + host, nil
}

func defaultPort(scheme string) string {
	if scheme == "https" {
		return "443"
	}
	return "80"
}

// errorWithoutInput is a url.Parse error without the input it repeats.
func errorWithoutInput(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}

// PublicHosts returns the Host headers that name a public_url (as
// ParsePublicURL returns it): its host, and also host:port with the
// scheme's default port, which some clients send. None for "".
func PublicHosts(publicURL string) []string {
	scheme, host, ok := strings.Cut(publicURL, "://")
	if !ok || host == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(host); err == nil {
		return []string{host}
	}
	return []string{host, net.JoinHostPort(strings.Trim(host, "[]"), defaultPort(scheme))}
}

// readAllowedHosts reads allowed_hosts: a list of host names, each checked
// (hosts.Parse) where it is written.
func readAllowedHosts(r *read.Reader, dst *[]string) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		if n.Kind != yaml.SequenceNode {
			return r.Errf(n, "allowed_hosts: expected a list of host names, like [guard.internal, \"*.guard.example.com\", 10.0.0.5:8930]")
		}
		for _, e := range n.Content {
			if e.Kind != yaml.ScalarNode {
				return r.Errf(e, "allowed_hosts: expected a host name")
			}
			if _, err := hosts.Parse(e.Value); err != nil {
				return r.Errf(e, "allowed_hosts: %v", err)
			}
			*dst = append(*dst, e.Value)
		}
		return nil
	}
}

// readPublicURL reads public_url (see ParsePublicURL).
func readPublicURL(r *read.Reader, dst *string) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		if n.Kind != yaml.ScalarNode {
			return r.Errf(n, "public_url: expected a string, like https://guard.example.com")
		}
		u, err := ParsePublicURL(n.Value)
		if err != nil {
			return r.Errf(n, "%v", err)
		}
		*dst = u
		return nil
	}
}
