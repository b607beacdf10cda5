package config

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestPublicURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://guard.example.com":       "https://guard.example.com",
		"https://Guard.Example.com/":      "https://guard.example.com",
		"HTTPS://guard.example.com:443":   "https://guard.example.com",
		"https://guard.example.com:8443/": "https://guard.example.com:8443",
		"http://127.0.0.1:8930":           "http://127.0.0.1:8930",
		"http://[::1]:80":                 "http://[::1]",
	} {
		got, err := ParsePublicURL(in)
		if err != nil || got != want {
			t.Errorf("ParsePublicURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"guard.example.com":                   `public_url "guard.example.com": use an absolute http:// or https:// URL, like https://guard.example.com`,
		"ftp://guard.example.com":             `public_url "ftp://guard.example.com": use an absolute http:// or https:// URL`,
		"https://":                            `public_url "https://" has no host (write https://HOST[:PORT])`,
		"https:guard.example.com":             `public_url "https:guard.example.com" has no host`,
		"https://alice:s3cret@guard.example":  `public_url "https://alice@guard.example" holds user information (before an @)`,
		"https://guard.example.com/guard":     `public_url "https://guard.example.com/guard" has a path (/guard)`,
		"https://guard.example.com/?token=x":  `public_url "https://guard.example.com/" has a query string`,
		"https://guard.example.com/#top":      `public_url "https://guard.example.com/#top" has a fragment`,
		"https://guard.example.com:port/":     `public_url "https://guard.example.com:port/" is not a URL: invalid port ":port" after host`,
		"https://guard.example.com/\x7f/path": `is not a URL`,
	} {
		got, err := ParsePublicURL(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParsePublicURL(%q) = %q, %v; want an error with %q", in, got, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("the error shows the password: %v", err)
		}
	}
}

func TestPublicHosts(t *testing.T) {
	for in, want := range map[string][]string{
		"https://guard.example.com":      {"guard.example.com", "guard.example.com:443"},
		"http://guard.example.com":       {"guard.example.com", "guard.example.com:80"},
		"https://guard.example.com:8443": {"guard.example.com:8443"},
		"http://[::1]":                   {"[::1]", "[::1]:80"},
		"":                               nil,
	} {
		if got := PublicHosts(in); !slices.Equal(got, want) {
			t.Errorf("PublicHosts(%q) = %q, want %q", in, got, want)
		}
	}
}

// public_url is read from the configuration, and a bad one is an error
// naming its line.
func TestPublicURLInTheConfiguration(t *testing.T) {
	c, err := Parse([]byte("public_url: https://Guard.Example.com/\n"), "c.yaml")
	if err != nil || c.PublicURL != "https://guard.example.com" {
		t.Fatalf("public_url: %q, %v", c.PublicURL, err)
	}
	if c, err := Parse([]byte("db: x.db\n"), "c.yaml"); err != nil || c.PublicURL != "" {
		t.Fatalf("without public_url: %q, %v", c.PublicURL, err)
	}
	_, err = Parse([]byte("db: x.db\npublic_url: https://guard.example.com/mcp\n"), "c.yaml")
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Line != 2 || !strings.Contains(ce.Problem, "has a path (/mcp)") {
		t.Fatalf("a public_url with a path: %v", err)
	}
	if _, err := Parse([]byte("public_url: [https://a, https://b]\n"), "c.yaml"); err == nil || !strings.Contains(err.Error(), "public_url: expected a string") {
		t.Fatalf("a list as public_url: %v", err)
	}
}

// allowed_hosts is read from the configuration, and a name that is not one
// is an error naming its line.
func TestAllowedHostsInTheConfiguration(t *testing.T) {
	c, err := Parse([]byte("allowed_hosts: [guard.internal, \"*.guard.example.com\", \"10.0.0.5:8930\"]\n"), "c.yaml")
	if err != nil || !slices.Equal(c.AllowedHosts, []string{"guard.internal", "*.guard.example.com", "10.0.0.5:8930"}) {
		t.Fatalf("allowed_hosts: %q, %v", c.AllowedHosts, err)
	}
	for config, want := range map[string]struct {
		line    int
		problem string
	}{
		"db: x.db\nallowed_hosts:\n  - guard.internal\n  - https://guard.example.com\n": {4, `allowed_hosts: "https://guard.example.com" is not a host name: give the host only`},
		"allowed_hosts: [\"guard.internal:port\"]\n":                                    {1, `allowed_hosts: "guard.internal:port" is not a host name: its port is not a number from 1 to 65535 (write name, name:port or *.suffix)`},
		"allowed_hosts: guard.internal\n":                                               {1, "allowed_hosts: expected a list of host names"},
		"allowed_hosts: [[a]]\n":                                                        {1, "allowed_hosts: expected a host name"},
	} {
		_, err := Parse([]byte(config), "c.yaml")
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.File != "c.yaml" || ce.Line != want.line || !strings.Contains(ce.Problem, want.problem) {
			t.Errorf("%q: %v, want line %d saying %q", config, err, want.line, want.problem)
		}
	}
}
