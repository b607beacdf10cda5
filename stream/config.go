package stream

import (
	"errors"
	"fmt"
	"net/url"

	guard "github.com/guard-mcp/guard"
)

// Config is one receiver of the audit log's stream, an entry of the
// configuration file's audit.stream list: Syslog ("tcp://host:port",
// RFC 5424, TLS when TLS is set) or OTLP (an OTLP/HTTP endpoint's base
// URL). The tags name the keys of the file (read by package config/read).
type Config struct {
	Syslog string `yaml:"syslog"`
	TLS    bool   `yaml:"tls"`
	OTLP   string `yaml:"otlp"`
}

// Name identifies the receiver's cursor in the database: its address as
// configured, so that it stays the same from one run to the next. It may
// hold a credential (a password, a token in the query string): logs and
// metrics show Label instead.
func (c Config) Name() string {
	if c.Syslog != "" {
		return "syslog " + c.Syslog
	}
	return "otlp " + c.OTLP
}

// Label names the receiver in logs and metrics: Name without the password
// and the query string of its address (guard.DisplayURL).
func (c Config) Label() string {
	if c.Syslog != "" {
		return "syslog " + guard.DisplayURL(c.Syslog)
	}
	return "otlp " + guard.DisplayURL(c.OTLP)
}

// Validate checks that the receiver is one of the two, with an address
// of its kind.
func (c Config) Validate() error {
	switch {
	case (c.Syslog == "") == (c.OTLP == ""):
		return errors.New("a receiver is either syslog: tcp://HOST:PORT or otlp: http(s)://HOST:PORT")
	case c.Syslog != "":
		if u, err := url.Parse(c.Syslog); err != nil || u.Scheme != "tcp" || u.Port() == "" {
			return fmt.Errorf("syslog %q: use tcp://HOST:PORT", c.Syslog)
		}
	default:
		if c.TLS {
			return fmt.Errorf("otlp %q: tls is set by the URL's scheme (https)", c.OTLP)
		}
		if u, err := url.Parse(c.OTLP); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("otlp %q: use http(s)://HOST:PORT", c.OTLP)
		}
	}
	return nil
}
