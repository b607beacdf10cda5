// Package config reads guard's configuration file. The file is composed of
// the sections that other packages own, each with its own type: policy's
// (rules, servers, limits, review, redact, include), the UI's (web), the
// resource server's (auth), the receivers of announcements (notify) and of
// the audit log's stream (stream), and of traces (telemetry). config reads the file strictly (an
// unknown key is an error, with its file and line), checks what spans
// sections, and keeps the settings that are guard's own (the database,
// approvals, sessions, the public address, its environment).
package config

import (
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/auth"
	"github.com/guard-mcp/guard/config/read"
	"github.com/guard-mcp/guard/notify"
	"github.com/guard-mcp/guard/policy"
	"github.com/guard-mcp/guard/stream"
	"github.com/guard-mcp/guard/telemetry"
	"github.com/guard-mcp/guard/web"
	"go.yaml.in/yaml/v3"
)

// Config is guard's configuration file. The policy's sections are
// policy.Config's, promoted (Servers, Limits, Policy, Review, Redact,
// Include), and *Config is the policy.Source an Engine reloads.
type Config struct {
	policy.Config
	File       string // where it was read from; "" for the built-in defaults
	DB         string
	Durability string
	// MaxMessage bounds every message guard reads, from either side;
	// MaxRequest the client's messages to a server, which reads no longer
	// ones (go-sdk servers stop at 16 MiB and end the session).
	MaxMessage  int64
	MaxRequest  int64
	UI          web.UIConfig
	Approval    Approval
	MaxSessions Sessions
	// Clients are the bearer tokens guard serve accepts, by name: when
	// any is configured, every HTTP request needs one.
	Clients []Client
	// Auth makes guard serve's HTTP front an OAuth 2.1 resource server:
	// requests need an access token of Auth.Issuer's for Auth.Audience
	// (or a static token of Clients). Issuer is "" when not configured.
	Auth auth.Settings
	// AssertFormats makes "format" in tool schemas a check, not a note.
	AssertFormats bool
	// RedactResults masks secret patterns in results before they reach
	// the client, not only in the audit log.
	RedactResults bool
	Aggregate     Aggregate
	// Audit holds the audit log's settings beyond the database.
	Audit Audit
	// Notify lists the receivers that new holds are announced to.
	Notify []notify.Config
	// Telemetry says where traces go (telemetry:); off while its OTLP is "".
	Telemetry telemetry.Config
	// PublicURL is the address clients and browsers use to reach guard
	// when something stands in front of it (a load balancer, a TLS
	// terminator): scheme and host, without a trailing slash; "" when
	// not configured. Its host is answered besides the listen address's,
	// its origin is accepted, and printed addresses use it.
	PublicURL string
	// AllowedHosts are more Host names that guard serve's endpoints and
	// /metrics answer to, beyond the listen address's and public_url's:
	// entries of package hosts (name, name:port, *.suffix).
	AllowedHosts []string
	// OwnVariables are more environment variables of guard's own that
	// servers do not see unless their env lists them: its database's
	// credentials (PGPASSWORD, PGPASSFILE) when it runs on PostgreSQL.
	OwnVariables []string
	// Expanded maps each environment variable the configuration expanded
	// (${NAME}, anywhere but in a server's command) to the value it had:
	// guard's own secrets, kept from the servers' environment and masked
	// wherever they appear.
	Expanded map[string]string
}

// Approval is the approval: section: how long held calls wait, and who
// may decide them how.
// The tags name the keys and how they are read (read.Reader.Decode).
type Approval struct {
	Timeout    time.Duration `yaml:"timeout"`
	Wait       time.Duration `yaml:"wait"`
	InBand     string        `yaml:"in_band" enum:"off,auto"`
	MaxPending int           `yaml:"max_pending"`
	// CLI says whether guard approvals approve|deny may decide (with a
	// typed name, --by); CLISet whether the file said so. Unset, it may
	// unless the UI needs verified identities (see Config.CLIDecisions).
	CLI    bool `yaml:"cli"`
	CLISet bool `yaml:"-"`
	// Scope is which calls an approval lets through once it is given:
	// guard.ScopeSession (the held call's session) or guard.ScopeAny.
	Scope string `yaml:"scope" enum:"session,any"`
}

// Sessions bounds guard serve's sessions (max_sessions): Total at once,
// PerClient of one client (on 2026-07-28, where there are no sessions, a
// client's requests in flight). The tags name the keys (read.Reader.Decode).
type Sessions struct {
	Total     int `yaml:"total"`
	PerClient int `yaml:"per_client"`
}

// Aggregate makes guard serve also answer at /mcp for all its servers at
// once, tools and prompts named SERVER+Separator+NAME (aggregate:). The
// tags name the keys (read.Reader.Decode).
type Aggregate struct {
	Enabled   bool   `yaml:"enabled"`
	Separator string `yaml:"separator"`
}

// Validate checks the separator: hosts refuse other characters in tool
// names.
func (a Aggregate) Validate() error {
	if !separatorRE.MatchString(a.Separator) {
		return fmt.Errorf("aggregate.separator %q: use 1 to 8 of the characters A-Z a-z 0-9 _ - . (hosts refuse others in tool names)", a.Separator)
	}
	return nil
}

// Audit holds the audit log's settings (audit:). A zero duration is off.
// The tags name the keys (read.Reader.Decode).
type Audit struct {
	// KeyFile is the ed25519 key that signs checkpoints ("": audit.key
	// beside the database).
	KeyFile string `yaml:"key_file"`
	// VerifyEvery is how often the whole log is verified in the
	// background.
	VerifyEvery time.Duration `yaml:"verify_every" off:"allowed"`
	// Retention is how long records keep their bodies in the database.
	Retention time.Duration `yaml:"retention" off:"allowed"`
	// ArchiveDir is where retention writes the archives of the records
	// whose bodies it removes ("": archive/ beside the database).
	ArchiveDir  string      `yaml:"archive_dir"`
	Checkpoints Checkpoints `yaml:"checkpoints"`
	// Stream lists the receivers the log is streamed to, in order.
	Stream Receivers `yaml:"stream"`
}

// Checkpoints: how often one is signed, and where each is also sent so
// that a witness outside the machine holds it (audit.checkpoints).
type Checkpoints struct {
	Every   time.Duration `yaml:"every"`
	Witness Witnesses     `yaml:"witness"`
}

// Witnesses are where checkpoints are sent: "file:///dir", "syslog",
// "https://...".
type Witnesses []string

// ReadNode reads the list, each witness checked at its line.
func (w *Witnesses) ReadNode(r *read.Reader, n *yaml.Node) error {
	if err := r.List((*[]string)(w))(n); err != nil {
		return err
	}
	for i, s := range *w {
		u, err := url.Parse(s)
		ok := err == nil && (s == "syslog" || u.Scheme == "file" && u.Path != "" ||
			(u.Scheme == "http" || u.Scheme == "https") && u.Host != "")
		if !ok {
			return r.Errf(n.Content[i], "witness %q: use file:///PATH, syslog, or an http(s) URL", s)
		}
	}
	return nil
}

// Receivers are the receivers of the audit log's stream (audit.stream),
// each once.
type Receivers []stream.Config

// ReadNode reads the list, each receiver checked at its line.
func (rs *Receivers) ReadNode(r *read.Reader, n *yaml.Node) error {
	if n.Kind != yaml.SequenceNode {
		return r.Errf(n, "expected a list of receivers ({syslog: tcp://HOST:PORT} or {otlp: http://HOST:4318})")
	}
	seen := map[string]bool{}
	for _, e := range n.Content {
		var s stream.Config
		if err := r.DecodeEntry(e, &s); err != nil {
			return err
		}
		if seen[s.Name()] {
			return r.Errf(e, "receiver %s is listed twice", s.Name())
		}
		seen[s.Name()] = true
		*rs = append(*rs, s)
	}
	return nil
}

// Client is one bearer token of guard serve, kept as its SHA-256.
type Client struct {
	Name        string
	TokenSHA256 string
}

// Error is a problem in a configuration file, with its place.
type Error = read.Error

// separatorRE is what an aggregate separator may be.
var separatorRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,8}$`)

// Default returns the built-in configuration: no file needed.
func Default() *Config {
	c := &Config{Config: *policy.Default(), Durability: "full", MaxMessage: 64 << 20, MaxRequest: 16 << 20}
	c.UI.Listen = "127.0.0.1:8931"
	c.UI.TokenLogin = true
	c.UI.Passkey = web.PasskeyOff
	c.Approval.Timeout = 10 * time.Minute
	c.Approval.Wait = 50 * time.Second
	c.Approval.InBand = "off"
	c.Approval.MaxPending = 20
	c.MaxSessions.Total, c.MaxSessions.PerClient = 1000, 100
	c.Approval.Scope = guard.ScopeSession
	c.Aggregate.Separator = "__"
	c.Telemetry.Sample = 1
	return c
}

// Load reads a configuration file and the rule files it includes.
func Load(file string, getenv func(string) string) (*Config, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, &Error{File: file, Problem: err.Error()}
	}
	return parse(b, file, getenv)
}

// Parse reads a configuration from bytes; file names it in errors. Its
// includes are resolved relative to file's directory.
func Parse(data []byte, file string) (*Config, error) {
	return parse(data, file, os.Getenv)
}

func parse(data []byte, file string, getenv func(string) string) (*Config, error) {
	c := Default()
	c.File = file
	r := &read.Reader{File: file, Getenv: getenv, Expanded: map[string]string{}}
	if err := r.Document(data, c.keys(r)); err != nil {
		return nil, err
	}
	if err := c.ReadIncludes(file, getenv); err != nil {
		return nil, err
	}
	if len(r.Expanded) > 0 {
		c.Expanded = r.Expanded
	}
	if err := c.checkAuth(); err != nil {
		return nil, err
	}
	if err := c.checkUI(); err != nil {
		return nil, err
	}
	return c, c.Config.Validate()
}

// keys are the readers of the file's top-level keys: the policy's, and
// the others'.
func (c *Config) keys(r *read.Reader) map[string]func(*yaml.Node) error {
	keys := c.Config.Keys(r)
	for k, f := range map[string]func(*yaml.Node) error{
		"db":          func(n *yaml.Node) error { err := r.Str(&c.DB)(n); c.DB = r.Expand(c.DB); return err },
		"durability":  r.Enum(&c.Durability, "full", "normal"),
		"max_message": r.Size(&c.MaxMessage),
		"max_request": r.Size(&c.MaxRequest),
		"ui":          func(n *yaml.Node) error { return readUI(r, n, &c.UI) },
		"approval": func(n *yaml.Node) error {
			c.Approval.CLISet = c.Approval.CLISet || read.Has(n, "cli")
			return r.Decode(n, &c.Approval)
		},
		"aggregate":      func(n *yaml.Node) error { return r.Decode(n, &c.Aggregate) },
		"max_sessions":   func(n *yaml.Node) error { return c.readMaxSessions(r, n) },
		"public_url":     readPublicURL(r, &c.PublicURL),
		"allowed_hosts":  readAllowedHosts(r, &c.AllowedHosts),
		"redact_results": r.Bool(&c.RedactResults),
		"assert_formats": r.Bool(&c.AssertFormats),
		"clients":        func(n *yaml.Node) error { return readClients(r, n, &c.Clients) },
		"auth":           func(n *yaml.Node) error { return readAuth(r, n, &c.Auth) },
		"notify":         func(n *yaml.Node) error { return readNotify(r, n, &c.Notify) },
		"audit":          func(n *yaml.Node) error { return r.Decode(n, &c.Audit) },
		"telemetry":      func(n *yaml.Node) error { return readTelemetry(r, n, &c.Telemetry) },
	} {
		keys[k] = f
	}
	return keys
}

// readMaxSessions reads max_sessions: {total: N, per_client: N}. A total
// below the default per_client lowers it too, unless per_client is given.
func (c *Config) readMaxSessions(r *read.Reader, n *yaml.Node) error {
	m := &c.MaxSessions
	if err := r.Decode(n, m); err != nil {
		return err
	}
	switch {
	case m.PerClient <= m.Total:
	case read.Has(n, "per_client"):
		return r.Errf(n, "max_sessions: per_client (%d) is more than total (%d)", m.PerClient, m.Total)
	default:
		m.PerClient = m.Total
	}
	return nil
}

// readClients reads clients: names, each once, with their tokens' digests.
func readClients(r *read.Reader, n *yaml.Node, dst *[]Client) error {
	if n.Kind != yaml.SequenceNode {
		return r.Errf(n, "expected a list of clients")
	}
	seen := map[string]bool{}
	for _, e := range n.Content {
		var c Client
		if err := r.Mapping(e, map[string]func(*yaml.Node) error{
			"name":         r.Str(&c.Name),
			"token_sha256": r.Str(&c.TokenSHA256),
		}); err != nil {
			return err
		}
		if c.Name == "" {
			return r.Errf(e, "a client needs a name")
		}
		if b, err := hex.DecodeString(c.TokenSHA256); err != nil || len(b) != 32 {
			return r.Errf(e, "client %q: token_sha256 must be 64 hex digits (guard token NAME prints one)", c.Name)
		}
		if seen[c.Name] {
			return r.Errf(e, "client name %q is already used", c.Name)
		}
		seen[c.Name] = true
		c.TokenSHA256 = strings.ToLower(c.TokenSHA256)
		*dst = append(*dst, c)
	}
	return nil
}

// checkUI checks what the ui: section needs of the rest of the file: a
// passkey's relying party is a host name (an IP address cannot be one),
// localhost where the UI listens on this machine, else public_url's.
func (c *Config) checkUI() error {
	if c.UI.Passkey != web.PasskeyRequired {
		return nil
	}
	if _, err := c.PasskeyOrigin(c.UI.Listen); err != nil {
		return &Error{File: c.File, Line: c.UI.Line, Problem: err.Error()}
	}
	return nil
}
