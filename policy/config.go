// Package policy reads guard's configuration and decides calls: named rules
// matched by server and tool (first match wins), a default that can follow
// the tool's annotations as pinned, and a built-in rule that keeps guard's
// own files out of reach. Deciding is a pure function of the call, its
// tool's definition and the rules in force.
package policy

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/policy/secrets"
	"go.yaml.in/yaml/v3"
)

// Config is guard's configuration file.
type Config struct {
	File       string // where it was read from; "" for the built-in defaults
	DB         string
	Durability string
	// MaxMessage bounds every message guard reads, from either side;
	// MaxRequest the client's messages to a server, which reads no longer
	// ones (go-sdk servers stop at 16 MiB and end the session).
	MaxMessage int64
	MaxRequest int64
	UI         UI
	Approval   struct {
		Timeout    time.Duration
		Wait       time.Duration
		InBand     string
		MaxPending int
		// CLI says whether guard approvals approve|deny may decide
		// (with a typed name, --by); CLISet whether the file said so.
		// Unset, it may unless the UI needs verified identities (see
		// Config.CLIDecisions).
		CLI, CLISet bool
		// Scope is which calls an approval lets through once it is
		// given: guard.ScopeSession (the held call's session) or
		// guard.ScopeAny.
		Scope string
	}
	Include []string
	// MaxSessions bounds guard serve's sessions (max_sessions): Total at
	// once, PerClient of one client (on 2026-07-28, where there are no
	// sessions, a client's requests in flight).
	MaxSessions struct {
		Total, PerClient int
	}
	Servers map[string]*Server
	Limits  []Limit
	// Clients are the bearer tokens guard serve accepts, by name: when
	// any is configured, every HTTP request needs one.
	Clients []Client
	// Auth makes guard serve's HTTP front an OAuth 2.1 resource server:
	// requests need an access token of Auth.Issuer's for Auth.Audience
	// (or a static token of Clients). Issuer is "" when not configured.
	Auth   Auth
	Redact struct {
		Keys     []string
		Patterns []string
	}
	// AssertFormats makes "format" in tool schemas a check, not a note.
	AssertFormats bool
	// RedactResults masks secret patterns in results before they reach
	// the client, not only in the audit log.
	RedactResults bool
	// Aggregate makes guard serve also answer at /mcp for all its
	// servers at once, tools and prompts named SERVER+Separator+NAME.
	Aggregate struct {
		Enabled   bool
		Separator string
	}
	Policy struct {
		Default string
		Mode    string
		Rules   []Rule
		// HideDenied leaves out of a caller's tools/list the tools the
		// rules deny to that caller whatever the arguments
		// (Policy.Hides); true unless the file says false.
		HideDenied bool
	}
	// Review holds the servers' default review settings; a server's own
	// (Server.Review) override them (see Config.Listing).
	Review Review
	// Audit holds the audit log's settings beyond the database.
	Audit Audit
	// Notify lists the receivers that new holds are announced to.
	Notify []Notify
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

// Auth is the identity provider whose access tokens guard serve accepts
// (the auth: section).
type Auth struct {
	// Issuer is the provider's issuer URL, as its tokens name it.
	Issuer string
	// Audience is guard's resource URI (RFC 8707): tokens must be for it
	// (or for the URL of the endpoint they are sent to).
	Audience string
	// Scopes must all be granted to a token.
	Scopes []string
	// GroupsClaim is the token claim that lists the caller's groups.
	GroupsClaim string
	// TrustEmail (trust_email) accepts a token's email that comes
	// without email_verified as the caller's; false, the default, takes
	// only email_verified: true (guard.VerifiedEmail).
	TrustEmail bool
	// Introspection authenticates guard at the provider's introspection
	// endpoint (RFC 7662), for opaque tokens; empty: they are refused.
	Introspection struct {
		ClientID     string
		ClientSecret string
	}
	Line int // where the section starts
}

// TokenExchange is how guard obtains a remote server's credentials for a
// caller: an RFC 8693 token exchange of the caller's access token at the
// identity provider (servers.NAME.token_exchange).
type TokenExchange struct {
	// TokenURL is the token endpoint ("": auth.issuer's).
	TokenURL     string
	ClientID     string
	ClientSecret string
	Audience     string
	Scope        string
	Resource     string
	Line         int
}

// Audit holds the audit log's settings. A zero duration is off.
type Audit struct {
	// KeyFile is the ed25519 key that signs checkpoints ("": audit.key
	// beside the database).
	KeyFile string
	// VerifyEvery is how often the whole log is verified in the
	// background.
	VerifyEvery time.Duration
	// Retention is how long records keep their bodies in the database.
	Retention time.Duration
	// ArchiveDir is where retention writes the archives of the records
	// whose bodies it removes ("": archive/ beside the database).
	ArchiveDir string
	// Checkpoints: how often one is signed, and where each is also sent
	// so that a witness outside the machine holds it ("file:///dir",
	// "syslog", "https://...").
	Checkpoints struct {
		Every   time.Duration
		Witness []string
	}
	// Stream lists the receivers the log is streamed to, in order.
	Stream []Stream
}

// Stream is one receiver of the audit log's stream: Syslog
// ("tcp://host:port", RFC 5424, TLS when TLS is set) or OTLP (an
// OTLP/HTTP endpoint's base URL).
type Stream struct {
	Syslog string
	TLS    bool
	OTLP   string
}

// Name identifies the receiver's cursor in the database: its address as
// configured, so that it stays the same from one run to the next. It may
// hold a credential (a password, a token in the query string): logs and
// metrics show Label instead.
func (s Stream) Name() string {
	if s.Syslog != "" {
		return "syslog " + s.Syslog
	}
	return "otlp " + s.OTLP
}

// Label names the receiver in logs and metrics: Name without the password
// and the query string of its address (guard.DisplayURL).
func (s Stream) Label() string {
	if s.Syslog != "" {
		return "syslog " + guard.DisplayURL(s.Syslog)
	}
	return "otlp " + guard.DisplayURL(s.OTLP)
}

// Server holds the settings of one named server.
type Server struct {
	Command          []string
	URL              string
	Headers          map[string]string
	Transport        string
	TrustAnnotations bool
	NewTools         string
	Output           string
	// BadSchema is what happens to calls of a tool whose inputSchema or
	// outputSchema does not compile: deny (default), or ignore the schema.
	BadSchema string
	// Sandbox is "on" (default): a server guard starts runs where guard's
	// own directories and files do not exist, or, where this system has
	// no isolation at all, on the path rules alone; "off": it sees
	// everything its user can.
	Sandbox string
	// sandboxSet says the file set Sandbox (see MustIsolate). It decides
	// no call, and a running server keeps the settings it started with:
	// neither the policy version nor a reload's summary covers it.
	sandboxSet bool
	// Env names the variables of Config.Expanded this server's process
	// may still see; the others are removed from its environment.
	Env []string
	// TokenExchange, for a server reached over HTTP, makes each caller's
	// upstream credentials by exchanging the caller's access token; nil:
	// Headers are the credentials.
	TokenExchange *TokenExchange
	// Approvers says who may approve this server's held calls, and how
	// many must, where the rule that holds a call says nothing of it.
	Approvers guard.Approvers
	// approversAt is where Approvers was written (file and line).
	approversAt ConfigError
	// Review overrides the top-level review settings for this server.
	// It decides no call: the policy version does not cover it.
	Review Review `json:"-"`
}

// MustIsolate reports whether the server's settings say sandbox: on in so
// many words: then it never runs without isolation, not even where the
// system has none (where the default runs it on the path rules alone).
func (s *Server) MustIsolate() bool { return s != nil && s.sandboxSet && s.Sandbox == "on" }

// What tools/list through guard shows (review.listing).
const (
	// ListingAccepted shows each tool's last accepted definition and
	// leaves out new tools that wait for review.
	ListingAccepted = "accepted"
	// ListingAsServed passes the server's listing as it is.
	ListingAsServed = "as_served"
)

// Review holds the settings of the review of tool definitions: at the
// top level, every server's default; in a server's settings, its own ("":
// the default).
type Review struct {
	// Listing is ListingAccepted or ListingAsServed.
	Listing string
}

// Listing is what tools/list through guard shows of server's tools: its
// own review.listing, else the top-level one (ListingAccepted or
// ListingAsServed).
func (c *Config) Listing(server string) string {
	if s := c.Servers[server]; s != nil && s.Review.Listing != "" {
		return s.Review.Listing
	}
	return c.Review.Listing
}

// Client is one bearer token of guard serve, kept as its SHA-256.
type Client struct {
	Name        string
	TokenSHA256 string
}

// DefaultServer returns the settings of a server the configuration does
// not name.
func DefaultServer() *Server {
	return &Server{TrustAnnotations: true, NewTools: "approve", Output: "enforce", BadSchema: "deny", Sandbox: "on"}
}

// Rule is one policy rule. File and Line say where it was written.
type Rule struct {
	Name   string
	Server string
	Tool   string // a glob over the tool's name (the prompt's, for prompts/get)
	Method string
	URI    string // a glob over the resource, for resources/read
	When   string
	Action string
	Reason string
	// Users and Groups, when set, limit the rule to callers the front
	// authenticated: with Users, a caller named there (by subject or
	// email); with Groups, a caller in one of them.
	Users  []string
	Groups []string
	// Approvers says who may approve the calls the rule holds, and how
	// many must (action approve only; zero: the server's, else anyone,
	// once).
	Approvers guard.Approvers
	File      string
	Line      int
	prog      *condition // When, compiled
}

// ConfigError is a problem in a configuration file, with its place.
type ConfigError struct {
	File    string
	Line    int
	Problem string
}

func (e *ConfigError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Problem)
	}
	return e.File + ": " + e.Problem
}

// separatorRE is what an aggregate separator may be.
var separatorRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,8}$`)

// Default returns the built-in configuration: no file needed.
func Default() *Config {
	c := &Config{Durability: "full", MaxMessage: 64 << 20, MaxRequest: 16 << 20, Servers: map[string]*Server{}}
	c.UI.Listen = "127.0.0.1:8931"
	c.UI.TokenLogin = true
	c.UI.Passkey = PasskeyOff
	c.Approval.Timeout = 10 * time.Minute
	c.Approval.Wait = 50 * time.Second
	c.Approval.InBand = "off"
	c.Approval.MaxPending = 20
	c.MaxSessions.Total, c.MaxSessions.PerClient = 1000, 100
	c.Approval.Scope = guard.ScopeSession
	c.Redact.Keys = []string{"password", "token", "secret", "api_key", "authorization"}
	c.Policy.Default = "annotations"
	c.Policy.Mode = "enforce"
	c.Policy.HideDenied = true
	c.Review.Listing = ListingAccepted
	c.Aggregate.Separator = "__"
	return c
}

// Load reads a configuration file and the rule files it includes.
func Load(file string, getenv func(string) string) (*Config, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, &ConfigError{File: file, Problem: err.Error()}
	}
	return parse(b, file, getenv, true)
}

// Parse reads a configuration from bytes; file names it in errors. Its
// includes are resolved relative to file's directory.
func Parse(data []byte, file string) (*Config, error) {
	return parse(data, file, os.Getenv, true)
}

func parse(data []byte, file string, getenv func(string) string, includes bool) (*Config, error) {
	c := Default()
	c.File = file
	p := &parser{file: file, getenv: getenv, expanded: map[string]string{}}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, yamlError(file, err)
	}
	if len(doc.Content) > 0 {
		if err := p.config(doc.Content[0], c); err != nil {
			return nil, err
		}
	}
	if includes {
		if err := c.readIncludes(getenv); err != nil {
			return nil, err
		}
	}
	if len(p.expanded) > 0 {
		c.Expanded = p.expanded
	}
	if err := c.checkAuth(); err != nil {
		return nil, err
	}
	if err := c.checkUI(); err != nil {
		return nil, err
	}
	return c, checkRules(c.Policy.Rules)
}

var yamlLine = regexp.MustCompile(`line (\d+): (.*)`)

func yamlError(file string, err error) error {
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		n, _ := strconv.Atoi(m[1])
		return &ConfigError{File: file, Line: n, Problem: m[2]}
	}
	return &ConfigError{File: file, Problem: strings.TrimPrefix(err.Error(), "yaml: ")}
}

// readIncludes appends the rules of included files, in glob order.
func (c *Config) readIncludes(getenv func(string) string) error {
	dir := filepath.Dir(c.File)
	for _, pat := range c.Include {
		if !filepath.IsAbs(pat) {
			pat = filepath.Join(dir, pat)
		}
		files, err := filepath.Glob(pat)
		if err != nil {
			return &ConfigError{File: c.File, Problem: fmt.Sprintf("include %q: %v", pat, err)}
		}
		for _, f := range files {
			rules, err := LoadRules(f, getenv)
			if err != nil {
				return err
			}
			c.Policy.Rules = append(c.Policy.Rules, rules...)
		}
	}
	return nil
}

// LoadRules reads a rules file: a top-level `rules:` list. A missing file
// has no rules.
func LoadRules(file string, getenv func(string) string) ([]Rule, error) {
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, &ConfigError{File: file, Problem: err.Error()}
	}
	return ParseRules(file, b, getenv)
}

// ParseRules reads the text of a rules file (a top-level `rules:` list)
// that name stands for in errors.
func ParseRules(file string, b []byte, getenv func(string) string) ([]Rule, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, yamlError(file, err)
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	p := &parser{file: file, getenv: getenv}
	var rules []Rule
	err := p.mapping(doc.Content[0], map[string]func(*yaml.Node) error{
		"rules": func(n *yaml.Node) error { return p.rules(n, &rules) },
	})
	return rules, err
}

type parser struct {
	file   string
	getenv func(string) string
	conds  *conditions
	// expanded records every variable expand replaced, with its value;
	// nil records none.
	expanded map[string]string
}

func (p *parser) errf(n *yaml.Node, format string, args ...any) error {
	return &ConfigError{File: p.file, Line: n.Line, Problem: fmt.Sprintf(format, args...)}
}

// mapping walks a mapping node; an unknown key is an error.
func (p *parser) mapping(n *yaml.Node, fields map[string]func(*yaml.Node) error) error {
	if n.Kind != yaml.MappingNode {
		if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
			return nil
		}
		return p.errf(n, "expected a mapping")
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		f, ok := fields[k.Value]
		if !ok {
			known := make([]string, 0, len(fields))
			for name := range fields {
				known = append(known, name)
			}
			slices.Sort(known)
			return p.errf(k, "unknown key %q (known: %s)", k.Value, strings.Join(known, ", "))
		}
		if err := f(v); err != nil {
			return err
		}
	}
	return nil
}

func (p *parser) str(dst *string) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		if n.Kind != yaml.ScalarNode {
			return p.errf(n, "expected a string")
		}
		*dst = n.Value
		return nil
	}
}

func (p *parser) enum(dst *string, allowed ...string) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		if n.Kind != yaml.ScalarNode || !slices.Contains(allowed, n.Value) {
			return p.errf(n, "%q is not one of %s", n.Value, strings.Join(allowed, ", "))
		}
		*dst = n.Value
		return nil
	}
}

func (p *parser) boolean(dst *bool) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			return p.errf(n, "expected true or false, got %q", n.Value)
		}
		*dst = n.Value == "true"
		return nil
	}
}

func (p *parser) duration(dst *time.Duration) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		d, err := ParseDuration(n.Value)
		if err != nil || d <= 0 {
			return p.errf(n, "%q is not a duration (like 90s, 10m, 7d)", n.Value)
		}
		*dst = d
		return nil
	}
}

func (p *parser) count(dst *int) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		v, err := strconv.Atoi(n.Value)
		if err != nil || v <= 0 || n.Kind != yaml.ScalarNode {
			return p.errf(n, "%q is not a positive whole number", n.Value)
		}
		*dst = v
		return nil
	}
}

func (p *parser) size(dst *int64) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		s, err := ParseSize(n.Value)
		if err != nil || s <= 0 {
			return p.errf(n, "%q is not a size (like 64MiB, 512KiB, 1048576)", n.Value)
		}
		*dst = s
		return nil
	}
}

// list reads a list of strings: include globs, redact keys and patterns,
// a server's command line. Their variables are expanded but not recorded
// as guard's secrets: they are paths and names, not credentials, and a
// server reads its own command line anyway (${HOME}/projects must not take
// HOME from it, nor mask the home directory in every record).
func (p *parser) list(dst *[]string) func(*yaml.Node) error {
	return p.listWith(dst, func(s string) string {
		if !strings.Contains(s, "${") {
			return s
		}
		return os.Expand(s, p.getenv)
	})
}

// command reads a server's command line (see list).
func (p *parser) command(dst *[]string) func(*yaml.Node) error { return p.list(dst) }

func (p *parser) listWith(dst *[]string, expand func(string) string) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		if n.Kind != yaml.SequenceNode {
			return p.errf(n, "expected a list")
		}
		out := make([]string, 0, len(n.Content))
		for _, e := range n.Content {
			if e.Kind != yaml.ScalarNode {
				return p.errf(e, "expected a string")
			}
			out = append(out, expand(e.Value))
		}
		*dst = out
		return nil
	}
}

// expand replaces ${VAR} with the environment's value, and records the
// variable: the sites that carry credentials (a server's url and headers;
// later passwords and webhook secrets) go through it, so that a value the
// configuration reads is known as guard's own secret.
func (p *parser) expand(s string) string {
	if !strings.Contains(s, "${") {
		return s
	}
	return os.Expand(s, func(k string) string {
		v := p.getenv(k)
		if p.expanded != nil {
			p.expanded[k] = v
		}
		return v
	})
}

// envNameRE is what a name in a server's env list may be.
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// envNames reads a server's env: a list of variable names.
func (p *parser) envNames(dst *[]string) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		if n.Kind != yaml.SequenceNode {
			return p.errf(n, "env: expected a list of variable names, like [REMOTE_TOKEN]")
		}
		for _, e := range n.Content {
			if e.Kind != yaml.ScalarNode || !envNameRE.MatchString(e.Value) {
				return p.errf(e, "env: %q is not a variable name (list names, like REMOTE_TOKEN: the values come from guard's environment)", e.Value)
			}
			*dst = append(*dst, e.Value)
		}
		return nil
	}
}

func (p *parser) config(n *yaml.Node, c *Config) error {
	return p.mapping(n, map[string]func(*yaml.Node) error{
		"db":          func(n *yaml.Node) error { err := p.str(&c.DB)(n); c.DB = p.expand(c.DB); return err },
		"durability":  p.enum(&c.Durability, "full", "normal"),
		"max_message": p.size(&c.MaxMessage),
		"max_request": p.size(&c.MaxRequest),
		"ui":          func(n *yaml.Node) error { return p.ui(n, c) },
		"approval": func(n *yaml.Node) error {
			return p.mapping(n, map[string]func(*yaml.Node) error{
				"timeout":     p.duration(&c.Approval.Timeout),
				"wait":        p.duration(&c.Approval.Wait),
				"in_band":     p.enum(&c.Approval.InBand, "off", "auto"),
				"max_pending": p.count(&c.Approval.MaxPending),
				"cli": func(n *yaml.Node) error {
					c.Approval.CLISet = true
					return p.boolean(&c.Approval.CLI)(n)
				},
				"scope": p.enum(&c.Approval.Scope, guard.ScopeSession, guard.ScopeAny),
			})
		},
		"aggregate": func(n *yaml.Node) error {
			err := p.mapping(n, map[string]func(*yaml.Node) error{
				"enabled":   p.boolean(&c.Aggregate.Enabled),
				"separator": p.str(&c.Aggregate.Separator),
			})
			if err == nil && !separatorRE.MatchString(c.Aggregate.Separator) {
				return p.errf(n, "aggregate.separator %q: use 1 to 8 of the characters A-Z a-z 0-9 _ - . (hosts refuse others in tool names)", c.Aggregate.Separator)
			}
			return err
		},
		"include":        p.list(&c.Include),
		"max_sessions":   func(n *yaml.Node) error { return p.maxSessions(n, c) },
		"public_url":     p.publicURL(&c.PublicURL),
		"allowed_hosts":  p.allowedHosts(&c.AllowedHosts),
		"redact_results": p.boolean(&c.RedactResults),
		"assert_formats": p.boolean(&c.AssertFormats),
		"limits":         func(n *yaml.Node) error { return p.limits(n, &c.Limits) },
		"clients":        func(n *yaml.Node) error { return p.clients(n, &c.Clients) },
		"auth":           func(n *yaml.Node) error { return p.auth(n, &c.Auth) },
		"servers":        func(n *yaml.Node) error { return p.servers(n, c) },
		"notify":         func(n *yaml.Node) error { return p.notify(n, &c.Notify) },
		"redact": func(n *yaml.Node) error {
			return p.mapping(n, map[string]func(*yaml.Node) error{
				"keys":     p.list(&c.Redact.Keys),
				"patterns": p.patterns(&c.Redact.Patterns),
			})
		},
		"audit": func(n *yaml.Node) error { return p.audit(n, &c.Audit) },
		"policy": func(n *yaml.Node) error {
			return p.mapping(n, map[string]func(*yaml.Node) error{
				"default":     p.enum(&c.Policy.Default, "annotations", "allow", "deny", "approve"),
				"mode":        p.enum(&c.Policy.Mode, "enforce", "monitor"),
				"rules":       func(n *yaml.Node) error { return p.rules(n, &c.Policy.Rules) },
				"hide_denied": p.boolean(&c.Policy.HideDenied),
			})
		},
		"review": p.review(&c.Review),
	})
}

// maxSessions reads max_sessions: {total: N, per_client: N}. A total
// below the default per_client lowers it too, unless per_client is given.
func (p *parser) maxSessions(n *yaml.Node, c *Config) error {
	m := &c.MaxSessions
	perClient := false
	if err := p.mapping(n, map[string]func(*yaml.Node) error{
		"total": p.count(&m.Total),
		"per_client": func(n *yaml.Node) error {
			perClient = true
			return p.count(&m.PerClient)(n)
		},
	}); err != nil {
		return err
	}
	switch {
	case m.PerClient <= m.Total:
	case perClient:
		return p.errf(n, "max_sessions: per_client (%d) is more than total (%d)", m.PerClient, m.Total)
	default:
		m.PerClient = m.Total
	}
	return nil
}

// review reads a review section: the top level's, or a server's.
func (p *parser) review(dst *Review) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		return p.mapping(n, map[string]func(*yaml.Node) error{
			"listing": p.enum(&dst.Listing, ListingAccepted, ListingAsServed),
		})
	}
}

func (p *parser) patterns(dst *[]string) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		if err := p.list(dst)(n); err != nil {
			return err
		}
		for i, pat := range *dst {
			// The masker's own check: a pattern must compile, and must
			// not match empty text.
			if _, err := secrets.New([]string{pat}); err != nil {
				return p.errf(n.Content[i], "pattern %q: %v", pat, err)
			}
		}
		return nil
	}
}

func (p *parser) servers(n *yaml.Node, c *Config) error {
	if n.Kind != yaml.MappingNode {
		return p.errf(n, "expected a mapping of server names")
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		name, v := n.Content[i].Value, n.Content[i+1]
		s := DefaultServer()
		err := p.mapping(v, map[string]func(*yaml.Node) error{
			"command": p.command(&s.Command),
			"env":     p.envNames(&s.Env),
			"url":     func(n *yaml.Node) error { err := p.str(&s.URL)(n); s.URL = p.expand(s.URL); return err },
			"headers": func(n *yaml.Node) error {
				if n.Kind != yaml.MappingNode {
					return p.errf(n, "expected a mapping of header names")
				}
				s.Headers = map[string]string{}
				for j := 0; j+1 < len(n.Content); j += 2 {
					s.Headers[n.Content[j].Value] = p.expand(n.Content[j+1].Value)
				}
				return nil
			},
			"transport":         p.enum(&s.Transport, "stdio", "streamable-http", "sse"),
			"trust_annotations": p.boolean(&s.TrustAnnotations),
			"new_tools":         p.enum(&s.NewTools, "approve", "allow"),
			"output":            p.enum(&s.Output, "enforce", "warn"),
			"bad_schema":        p.enum(&s.BadSchema, "deny", "ignore"),
			"sandbox": func(n *yaml.Node) error {
				s.sandboxSet = true
				return p.enum(&s.Sandbox, "on", "off")(n)
			},
			"token_exchange": func(n *yaml.Node) error { return p.tokenExchange(n, &s.TokenExchange) },
			"approvers": func(n *yaml.Node) error {
				s.approversAt = ConfigError{File: p.file, Line: n.Line}
				return p.approvers(&s.Approvers)(n)
			},
			"review": p.review(&s.Review),
		})
		if err != nil {
			return err
		}
		c.Servers[name] = s
	}
	return nil
}

func (p *parser) rules(n *yaml.Node, dst *[]Rule) error {
	if n.Kind != yaml.SequenceNode {
		return p.errf(n, "expected a list of rules")
	}
	for _, e := range n.Content {
		r := Rule{Server: "*", Tool: "*", Method: "tools/call", File: p.file, Line: e.Line}
		err := p.mapping(e, map[string]func(*yaml.Node) error{
			"name":   p.str(&r.Name),
			"server": p.glob(&r.Server),
			"tool":   p.glob(&r.Tool),
			"method": p.str(&r.Method),
			"uri":    p.glob(&r.URI),
			"when": func(n *yaml.Node) error {
				if n.Kind != yaml.ScalarNode || strings.TrimSpace(n.Value) == "" {
					return p.errf(n, "a condition must be a CEL expression")
				}
				prog, err := p.compile(n.Value)
				if err != nil {
					return p.errf(n, "condition %q does not compile: %v", n.Value, err)
				}
				r.When, r.prog = n.Value, prog
				return nil
			},
			"action":    p.enum(&r.Action, "allow", "deny", "approve"),
			"reason":    p.str(&r.Reason),
			"users":     p.nonEmptyList(&r.Users, "users"),
			"groups":    p.nonEmptyList(&r.Groups, "groups"),
			"approvers": p.approvers(&r.Approvers),
		})
		if err != nil {
			return err
		}
		if !r.Approvers.IsZero() && r.Action != guard.ActionApprove {
			return p.errf(e, "rule %q: approvers apply to action approve only", r.Name)
		}
		if r.Name == "" {
			return p.errf(e, "a rule needs a name")
		}
		if r.Action == "" {
			return p.errf(e, "rule %q needs an action (allow, deny or approve)", r.Name)
		}
		if r.URI != "" && r.Method != "resources/read" {
			return p.errf(e, "rule %q: uri applies to method resources/read only", r.Name)
		}
		*dst = append(*dst, r)
	}
	return nil
}

// compile compiles a condition; the environment is made on first use.
func (p *parser) compile(expr string) (*condition, error) {
	if p.conds == nil {
		c, err := newConditions()
		if err != nil {
			return nil, err
		}
		p.conds = c
	}
	return p.conds.compile(expr)
}

func (p *parser) glob(dst *string) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		if _, err := path.Match(n.Value, ""); err != nil || n.Kind != yaml.ScalarNode {
			return p.errf(n, "%q is not a valid glob", n.Value)
		}
		*dst = n.Value
		return nil
	}
}

// checkRules refuses two rules with one name: decisions name their rule.
func checkRules(rules []Rule) error {
	seen := map[string]Rule{}
	for _, r := range rules {
		if prev, ok := seen[r.Name]; ok {
			return &ConfigError{File: r.File, Line: r.Line,
				Problem: fmt.Sprintf("rule name %q is already used at %s:%d", r.Name, prev.File, prev.Line)}
		}
		seen[r.Name] = r
	}
	return nil
}

// LoopbackAddr reports whether a listen address binds loopback only.
func LoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ParseDuration reads Go's durations plus days: "7d", "1d12h".
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	var days time.Duration
	if i := strings.Index(s, "d"); i > 0 {
		n, err := strconv.Atoi(s[:i])
		if err != nil {
			return 0, fmt.Errorf("duration %q: %w", s, err)
		}
		days = time.Duration(n) * 24 * time.Hour
		s = s[i+1:]
		if s == "" {
			return days, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("duration: %w", err)
	}
	return days + d, nil
}

// ParseSince reads a point in the past: an RFC 3339 time, or a duration
// (Go's forms plus days: "90m", "7d", "1d12h") back from now.
func ParseSince(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if d, err := ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a duration back from now (90m, 7d)", s)
}

var sizeUnits = map[string]int64{
	"": 1, "B": 1, "KB": 1000, "MB": 1000 * 1000, "GB": 1000 * 1000 * 1000,
	"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30,
}

// ParseSize reads sizes like 64MiB, 10MB, 512KiB or 1048576.
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	unit, ok := sizeUnits[strings.TrimSpace(s[i:])]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit", s)
	}
	return n * unit, nil
}

// optDuration reads a duration, or "off" (zero).
func (p *parser) optDuration(dst *time.Duration) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		if n.Kind == yaml.ScalarNode && (n.Value == "off" || n.Value == "false") {
			*dst = 0
			return nil
		}
		return p.duration(dst)(n)
	}
}

func (p *parser) audit(n *yaml.Node, a *Audit) error {
	return p.mapping(n, map[string]func(*yaml.Node) error{
		"key_file":     func(n *yaml.Node) error { return p.str(&a.KeyFile)(n) },
		"verify_every": p.optDuration(&a.VerifyEvery),
		"retention":    p.optDuration(&a.Retention),
		"archive_dir":  func(n *yaml.Node) error { return p.str(&a.ArchiveDir)(n) },
		"checkpoints": func(n *yaml.Node) error {
			return p.mapping(n, map[string]func(*yaml.Node) error{
				"every": p.duration(&a.Checkpoints.Every),
				"witness": func(n *yaml.Node) error {
					if err := p.list(&a.Checkpoints.Witness)(n); err != nil {
						return err
					}
					for i, w := range a.Checkpoints.Witness {
						u, err := url.Parse(w)
						ok := err == nil && (w == "syslog" || u.Scheme == "file" && u.Path != "" ||
							(u.Scheme == "http" || u.Scheme == "https") && u.Host != "")
						if !ok {
							return p.errf(n.Content[i], "witness %q: use file:///PATH, syslog, or an http(s) URL", w)
						}
					}
					return nil
				},
			})
		},
		"stream": func(n *yaml.Node) error {
			if n.Kind != yaml.SequenceNode {
				return p.errf(n, "expected a list of receivers ({syslog: tcp://HOST:PORT} or {otlp: http://HOST:4318})")
			}
			seen := map[string]bool{}
			for _, e := range n.Content {
				var s Stream
				if err := p.mapping(e, map[string]func(*yaml.Node) error{
					"syslog": p.str(&s.Syslog),
					"tls":    p.boolean(&s.TLS),
					"otlp":   p.str(&s.OTLP),
				}); err != nil {
					return err
				}
				switch {
				case (s.Syslog == "") == (s.OTLP == ""):
					return p.errf(e, "a receiver is either syslog: tcp://HOST:PORT or otlp: http(s)://HOST:PORT")
				case s.Syslog != "":
					if u, err := url.Parse(s.Syslog); err != nil || u.Scheme != "tcp" || u.Port() == "" {
						return p.errf(e, "syslog %q: use tcp://HOST:PORT", s.Syslog)
					}
				default:
					if s.TLS {
						return p.errf(e, "otlp %q: tls is set by the URL's scheme (https)", s.OTLP)
					}
					if u, err := url.Parse(s.OTLP); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
						return p.errf(e, "otlp %q: use http(s)://HOST:PORT", s.OTLP)
					}
				}
				if seen[s.Name()] {
					return p.errf(e, "receiver %s is listed twice", s.Name())
				}
				seen[s.Name()] = true
				a.Stream = append(a.Stream, s)
			}
			return nil
		},
	})
}

func (p *parser) clients(n *yaml.Node, dst *[]Client) error {
	if n.Kind != yaml.SequenceNode {
		return p.errf(n, "expected a list of clients")
	}
	seen := map[string]bool{}
	for _, e := range n.Content {
		var c Client
		if err := p.mapping(e, map[string]func(*yaml.Node) error{
			"name":         p.str(&c.Name),
			"token_sha256": p.str(&c.TokenSHA256),
		}); err != nil {
			return err
		}
		if c.Name == "" {
			return p.errf(e, "a client needs a name")
		}
		if b, err := hex.DecodeString(c.TokenSHA256); err != nil || len(b) != 32 {
			return p.errf(e, "client %q: token_sha256 must be 64 hex digits (guard token NAME prints one)", c.Name)
		}
		if seen[c.Name] {
			return p.errf(e, "client name %q is already used", c.Name)
		}
		seen[c.Name] = true
		c.TokenSHA256 = strings.ToLower(c.TokenSHA256)
		*dst = append(*dst, c)
	}
	return nil
}

// approvers reads who may approve a held call, and how many must:
// {groups: [sre], users: [alice@example.com], count: 2}. Users are
// subjects or emails. A count no one can reach (more than the users
// named, with no group) is refused.
func (p *parser) approvers(dst *guard.Approvers) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		var a guard.Approvers
		if err := p.mapping(n, map[string]func(*yaml.Node) error{
			"groups": p.names(&a.Groups, "groups"),
			"users":  p.names(&a.Users, "users"),
			"count":  p.count(&a.Count),
		}); err != nil {
			return err
		}
		if a.Count == 0 {
			a.Count = 1
		}
		if len(a.Groups) == 0 && len(a.Users) > 0 && a.Count > len(a.Users) {
			return p.errf(n, "approvers: count %d, but only %d users may approve and no groups are named", a.Count, len(a.Users))
		}
		*dst = a
		return nil
	}
}

// names reads a list of non-empty names, each once: groups, users.
func (p *parser) names(dst *[]string, what string) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		if n.Kind != yaml.SequenceNode {
			return p.errf(n, "%s: expected a list, like [sre]", what)
		}
		for _, e := range n.Content {
			v := strings.TrimSpace(e.Value)
			if e.Kind != yaml.ScalarNode || v == "" {
				return p.errf(e, "%s: expected a name", what)
			}
			if slices.Contains(*dst, v) {
				return p.errf(e, "%s: %q is listed twice", what, v)
			}
			*dst = append(*dst, v)
		}
		return nil
	}
}

// NeedVerified lists where the configuration asks for approvers that take
// verified identities only (groups, users, or a count above one), with
// what each needs: approving those calls takes people logged in to the UI
// through the identity provider or with a passkey, and without such a
// login they can only expire.
func (c *Config) NeedVerified() []*ConfigError {
	var out []*ConfigError
	for _, r := range c.Policy.Rules {
		if r.Approvers.NeedsVerified() {
			out = append(out, &ConfigError{File: r.File, Line: r.Line,
				Problem: fmt.Sprintf("rule %q holds calls for %s, each a verified identity", r.Name, r.Approvers)})
		}
	}
	names := make([]string, 0, len(c.Servers))
	for name := range c.Servers {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		s := c.Servers[name]
		if s.Approvers.NeedsVerified() {
			e := s.approversAt
			e.Problem = fmt.Sprintf("server %q holds calls for %s, each a verified identity", name, s.Approvers)
			out = append(out, &e)
		}
	}
	return out
}
