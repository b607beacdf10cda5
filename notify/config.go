package notify

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"

	"github.com/guard-mcp/guard/config/read"
)

// Config is one receiver of the announcements of new holds, an entry of
// the configuration file's notify: list: a webhook guard posts to, in
// Slack's incoming-webhook format or in guard's own JSON signed with
// Secret. The tags name the keys of the file and how package config/read
// reads them (read.Reader.Decode).
type Config struct {
	// Webhook is the URL posted to. It may be a credential itself (a
	// Slack incoming webhook's path is): logs, metrics and the UI show
	// Label instead.
	Webhook string `yaml:"webhook" expand:"secret"`
	// Format is FormatSlack or FormatJSON (the default).
	Format string `yaml:"format" enum:"json,slack"`
	// Secret is the key of the HMAC-SHA256 signature of a FormatJSON body.
	Secret string `yaml:"secret" expand:"secret"`
}

// The formats of a receiver.
const (
	FormatJSON  = "json"
	FormatSlack = "slack"
)

// Name identifies the receiver's delivery cursor in the database: its
// address and format as configured, so that it stays the same from one
// run to the next.
func (c Config) Name() string { return "notify " + c.Format + " " + c.Webhook }

// Label names the receiver in logs, metrics and the UI: the scheme and
// host of its address and a digest of the whole, never its path or query
// (a Slack webhook's path is its secret).
func (c Config) Label() string {
	sum := sha256.Sum256([]byte(c.Webhook))
	host := c.Webhook
	if u, err := url.Parse(c.Webhook); err == nil {
		host = u.Scheme + "://" + u.Host
	}
	return c.Format + " " + host + " " + hex.EncodeToString(sum[:3])
}

// Validate checks the webhook's address: an https:// URL without user
// information. Plain http is accepted for a loopback host only: the body
// names the held call and its redacted arguments, which must not cross a
// network in the clear. Errors show the address as Shown does.
func (c Config) Validate() error {
	u, err := url.Parse(c.Webhook)
	shown := Shown(c.Webhook)
	switch {
	case c.Webhook == "":
		return errors.New("a receiver needs a webhook: its https:// URL")
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil:
		return fmt.Errorf("webhook %q: use an https:// URL, like https://ops.example.com/guard", shown)
	case u.Scheme == "http" && !read.LoopbackHost(u.Hostname()):
		return fmt.Errorf("webhook %q: plain http is for a loopback host only (the message names the held call); use https://", shown)
	}
	return nil
}

// Shown is a webhook's address as an error may show it: scheme and host,
// the rest elided (it may be the credential).
func Shown(webhook string) string {
	u, err := url.Parse(webhook)
	if err != nil || u.Host == "" {
		return "…"
	}
	if u.Path == "" && u.RawQuery == "" {
		return u.Scheme + "://" + u.Host
	}
	return u.Scheme + "://" + u.Host + "/…"
}
