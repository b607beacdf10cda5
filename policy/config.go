// Package policy decides calls: named rules matched by server and tool
// (first match wins), a default that can follow the tool's annotations as
// pinned, rate limits, and a built-in rule that keeps guard's own files out
// of reach. Deciding is a pure function of the call, its tool's definition
// and the rules in force; the Engine keeps the rules in force and reloads
// them when the configuration changes. policy reads only its own sections
// of the configuration file (policy, servers, limits, review, redact,
// include); package config reads the file.
package policy

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/config/read"
	"github.com/guard-mcp/guard/policy/secrets"
	"go.yaml.in/yaml/v3"
)

// Config is what the policy decides by: the sections of the configuration
// file that policy owns.
type Config struct {
	// Include are globs of rule files whose rules follow the file's own.
	Include []string
	Servers map[string]*Server
	Limits  []Limit
	Redact  struct {
		Keys     []string
		Patterns []string
	}
	Policy Settings
	// Review holds the servers' default review settings; a server's own
	// (Server.Review) override them (see Config.Listing).
	Review Review
}

// Settings is the policy: section.
type Settings struct {
	Default string
	Mode    string
	Rules   []Rule
	// HideDenied leaves out of a caller's tools/list the tools the rules
	// deny to that caller whatever the arguments (Policy.Hides); true
	// unless the file says false.
	HideDenied bool
}

// Source is a configuration as read from its file: the policy's part of
// it (Config), and what else the file holds, which an Engine keeps in
// force beside the policy.
type Source interface {
	PolicyConfig() *Config
}

// PolicyConfig is c itself: a Config is a Source of its own.
func (c *Config) PolicyConfig() *Config { return c }

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
	approversAt read.Error
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
// the default). The tags name its keys (read.Reader.Decode).
type Review struct {
	// Listing is ListingAccepted or ListingAsServed.
	Listing string `yaml:"listing" enum:"accepted,as_served"`
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

// Default returns the built-in settings of the policy's sections.
func Default() *Config {
	c := &Config{Servers: map[string]*Server{}}
	c.Redact.Keys = []string{"password", "token", "secret", "api_key", "authorization"}
	c.Policy.Default = "annotations"
	c.Policy.Mode = "enforce"
	c.Policy.HideDenied = true
	c.Review.Listing = ListingAccepted
	return c
}

// Keys returns the readers of the top-level keys of the configuration file
// that the policy owns, each reading into c.
func (c *Config) Keys(r *read.Reader) map[string]func(*yaml.Node) error {
	p := &parser{Reader: r}
	return map[string]func(*yaml.Node) error{
		"include": r.List(&c.Include),
		"limits":  func(n *yaml.Node) error { return p.limits(n, &c.Limits) },
		"servers": func(n *yaml.Node) error { return p.servers(n, c) },
		"redact": func(n *yaml.Node) error {
			return r.Mapping(n, map[string]func(*yaml.Node) error{
				"keys":     r.List(&c.Redact.Keys),
				"patterns": p.patterns(&c.Redact.Patterns),
			})
		},
		"policy": func(n *yaml.Node) error {
			return r.Mapping(n, map[string]func(*yaml.Node) error{
				"default":     r.Enum(&c.Policy.Default, "annotations", "allow", "deny", "approve"),
				"mode":        r.Enum(&c.Policy.Mode, "enforce", "monitor"),
				"rules":       func(n *yaml.Node) error { return p.rules(n, &c.Policy.Rules) },
				"hide_denied": r.Bool(&c.Policy.HideDenied),
			})
		},
		"review": p.review(&c.Review),
	}
}

// Validate checks what spans the policy's sections: no two rules, the
// included ones too, have one name.
func (c *Config) Validate() error { return checkRules(c.Policy.Rules) }

// ReadIncludes appends the rules of the files the include globs match,
// in glob order; relative globs are relative to file's directory.
func (c *Config) ReadIncludes(file string, getenv func(string) string) error {
	dir := filepath.Dir(file)
	for _, pat := range c.Include {
		if !filepath.IsAbs(pat) {
			pat = filepath.Join(dir, pat)
		}
		files, err := filepath.Glob(pat)
		if err != nil {
			return &read.Error{File: file, Problem: fmt.Sprintf("include %q: %v", pat, err)}
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
		return nil, &read.Error{File: file, Problem: err.Error()}
	}
	return ParseRules(file, b, getenv)
}

// ParseRules reads the text of a rules file (a top-level `rules:` list)
// that name stands for in errors.
func ParseRules(file string, b []byte, getenv func(string) string) ([]Rule, error) {
	p := &parser{Reader: &read.Reader{File: file, Getenv: getenv}}
	var rules []Rule
	err := p.Document(b, map[string]func(*yaml.Node) error{
		"rules": func(n *yaml.Node) error { return p.rules(n, &rules) },
	})
	return rules, err
}

// parser reads the policy's sections: a read.Reader, and the conditions'
// environment, made on first use.
type parser struct {
	*read.Reader
	conds *conditions
}

// review reads a review section: the top level's, or a server's.
func (p *parser) review(dst *Review) func(*yaml.Node) error {
	return func(n *yaml.Node) error { return p.Decode(n, dst) }
}

func (p *parser) patterns(dst *[]string) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		if err := p.List(dst)(n); err != nil {
			return err
		}
		for i, pat := range *dst {
			// The masker's own check: a pattern must compile, and must
			// not match empty text.
			if _, err := secrets.New([]string{pat}); err != nil {
				return p.Errf(n.Content[i], "pattern %q: %v", pat, err)
			}
		}
		return nil
	}
}

func (p *parser) servers(n *yaml.Node, c *Config) error {
	if n.Kind != yaml.MappingNode {
		return p.Errf(n, "expected a mapping of server names")
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		name, v := n.Content[i].Value, n.Content[i+1]
		s := DefaultServer()
		err := p.Mapping(v, map[string]func(*yaml.Node) error{
			"command": p.List(&s.Command),
			"env":     p.envNames(&s.Env),
			"url":     func(n *yaml.Node) error { err := p.Str(&s.URL)(n); s.URL = p.Expand(s.URL); return err },
			"headers": func(n *yaml.Node) error {
				if n.Kind != yaml.MappingNode {
					return p.Errf(n, "expected a mapping of header names")
				}
				s.Headers = map[string]string{}
				for j := 0; j+1 < len(n.Content); j += 2 {
					s.Headers[n.Content[j].Value] = p.Expand(n.Content[j+1].Value)
				}
				return nil
			},
			"transport":         p.Enum(&s.Transport, "stdio", "streamable-http", "sse"),
			"trust_annotations": p.Bool(&s.TrustAnnotations),
			"new_tools":         p.Enum(&s.NewTools, "approve", "allow"),
			"output":            p.Enum(&s.Output, "enforce", "warn"),
			"bad_schema":        p.Enum(&s.BadSchema, "deny", "ignore"),
			"sandbox": func(n *yaml.Node) error {
				s.sandboxSet = true
				return p.Enum(&s.Sandbox, "on", "off")(n)
			},
			"token_exchange": func(n *yaml.Node) error { return p.tokenExchange(n, &s.TokenExchange) },
			"approvers": func(n *yaml.Node) error {
				s.approversAt = read.Error{File: p.File, Line: n.Line}
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
		return p.Errf(n, "expected a list of rules")
	}
	for _, e := range n.Content {
		r := Rule{Server: "*", Tool: "*", Method: "tools/call", File: p.File, Line: e.Line}
		err := p.Mapping(e, map[string]func(*yaml.Node) error{
			"name":   p.Str(&r.Name),
			"server": p.glob(&r.Server),
			"tool":   p.glob(&r.Tool),
			"method": p.Str(&r.Method),
			"uri":    p.glob(&r.URI),
			"when": func(n *yaml.Node) error {
				if n.Kind != yaml.ScalarNode || strings.TrimSpace(n.Value) == "" {
					return p.Errf(n, "a condition must be a CEL expression")
				}
				prog, err := p.compile(n.Value)
				if err != nil {
					return p.Errf(n, "condition %q does not compile: %v", n.Value, err)
				}
				r.When, r.prog = n.Value, prog
				return nil
			},
			"action":    p.Enum(&r.Action, "allow", "deny", "approve"),
			"reason":    p.Str(&r.Reason),
			"users":     p.NonEmptyList(&r.Users, "users"),
			"groups":    p.NonEmptyList(&r.Groups, "groups"),
			"approvers": p.approvers(&r.Approvers),
		})
		if err != nil {
			return err
		}
		if !r.Approvers.IsZero() && r.Action != guard.ActionApprove {
			return p.Errf(e, "rule %q: approvers apply to action approve only", r.Name)
		}
		if r.Name == "" {
			return p.Errf(e, "a rule needs a name")
		}
		if r.Action == "" {
			return p.Errf(e, "rule %q needs an action (allow, deny or approve)", r.Name)
		}
		if r.URI != "" && r.Method != "resources/read" {
			return p.Errf(e, "rule %q: uri applies to method resources/read only", r.Name)
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
			return p.Errf(n, "%q is not a valid glob", n.Value)
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
			return &read.Error{File: r.File, Line: r.Line,
				Problem: fmt.Sprintf("rule name %q is already used at %s:%d", r.Name, prev.File, prev.Line)}
		}
		seen[r.Name] = r
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
		if err := p.Mapping(n, map[string]func(*yaml.Node) error{
			"groups": p.Names(&a.Groups, "groups"),
			"users":  p.Names(&a.Users, "users"),
			"count":  p.Count(&a.Count),
		}); err != nil {
			return err
		}
		if a.Count == 0 {
			a.Count = 1
		}
		if len(a.Groups) == 0 && len(a.Users) > 0 && a.Count > len(a.Users) {
			return p.Errf(n, "approvers: count %d, but only %d users may approve and no groups are named", a.Count, len(a.Users))
		}
		*dst = a
		return nil
	}
}

// NeedVerified lists where the configuration asks for approvers that take
// verified identities only (groups, users, or a count above one), with
// what each needs: approving those calls takes people logged in to the UI
// through the identity provider or with a passkey, and without such a
// login they can only expire.
func (c *Config) NeedVerified() []*read.Error {
	var out []*read.Error
	for _, r := range c.Policy.Rules {
		if r.Approvers.NeedsVerified() {
			out = append(out, &read.Error{File: r.File, Line: r.Line,
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

// envNameRE is what a name in a server's env list may be.
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// envNames reads a server's env: a list of variable names.
func (p *parser) envNames(dst *[]string) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		if n.Kind != yaml.SequenceNode {
			return p.Errf(n, "env: expected a list of variable names, like [REMOTE_TOKEN]")
		}
		for _, e := range n.Content {
			if e.Kind != yaml.ScalarNode || !envNameRE.MatchString(e.Value) {
				return p.Errf(e, "env: %q is not a variable name (list names, like REMOTE_TOKEN: the values come from guard's environment)", e.Value)
			}
			*dst = append(*dst, e.Value)
		}
		return nil
	}
}

// tokenExchange reads servers.NAME.token_exchange.
func (p *parser) tokenExchange(n *yaml.Node, dst **TokenExchange) error {
	x := &TokenExchange{Line: n.Line}
	if err := p.Mapping(n, map[string]func(*yaml.Node) error{
		"token_url":     p.Str(&x.TokenURL),
		"client_id":     p.Secret(&x.ClientID),
		"client_secret": p.Secret(&x.ClientSecret),
		"audience":      p.Str(&x.Audience),
		"scope":         p.Str(&x.Scope),
		"resource":      p.Str(&x.Resource),
	}); err != nil {
		return err
	}
	switch {
	case !read.Written(n, "client_id") || !read.Written(n, "client_secret"):
		return p.Errf(n, "token_exchange needs client_id and client_secret (guard's credentials at the token endpoint)")
	case x.Audience == "" && x.Resource == "":
		return p.Errf(n, "token_exchange needs the audience (or resource) the upstream server accepts")
	}
	if x.TokenURL != "" {
		if err := read.CheckURL("token_exchange.token_url", x.TokenURL, "https://login.example.com/oauth/token"); err != nil {
			return p.Errf(n, "%v", err)
		}
	}
	*dst = x
	return nil
}
