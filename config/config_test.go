package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/config/read"
	"github.com/guard-mcp/guard/policy"
)

// ConfigError is a problem in a configuration file.
type ConfigError = Error

// parseError is a configuration that Parse must refuse at line, with a
// problem that says want.
type parseError struct {
	yaml string
	line int
	want string
}

// wantParseErrors checks that each configuration is refused as it says.
func wantParseErrors(t *testing.T, cases []parseError) {
	t.Helper()
	for _, tc := range cases {
		_, err := Parse([]byte(tc.yaml), "cfg.yaml")
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("%q: got %v, want a ConfigError", tc.yaml, err)
			continue
		}
		if ce.File != "cfg.yaml" || ce.Line != tc.line || !strings.Contains(ce.Problem, tc.want) {
			t.Errorf("%q: got %v, want line %d containing %q", tc.yaml, err, tc.line, tc.want)
		}
	}
}

func TestParseErrorsNameFileAndLine(t *testing.T) {
	wantParseErrors(t, []parseError{
		{"durability: fast\n", 1, `"fast" is not one of full, normal`},
		{"policy:\n  defualt: allow\n", 2, `unknown key "defualt"`},
		{"approval:\n  timeout: soon\n", 2, "not a duration"},
		{"max_message: lots\n", 1, "not a size"},
		{"max_request: 0\n", 1, "not a size"},
		{"policy:\n  rules:\n    - {name: a, tool: \"[\", action: allow}\n", 3, "not a valid glob"},
		{"policy:\n  rules:\n    - {name: a, tool: x}\n", 3, "needs an action"},
		{"policy:\n  rules:\n    - {name: a, action: allow}\n    - {name: a, action: deny}\n", 4, "already used at cfg.yaml:3"},
		{"policy:\n  rules:\n    - {name: a, action: deny, when: 'args.x +'}\n", 3, "does not compile"},
		{"policy:\n  rules:\n    - {name: a, action: deny, when: 'size(args)'}\n", 3, "not a boolean"},
		{"policy:\n  rules:\n    - {name: a, action: deny, when: 'nosuch == 1'}\n", 3, "undeclared reference"},
		{"policy:\n  rules:\n    - {name: a, action: deny, uri: 'file:///*'}\n", 3, "resources/read only"},
		{"servers:\n  files:\n    trust_annotations: maybe\n", 3, "expected true or false"},
		{"policy: [\n", 1, "did not find expected node content"},
		{"ui: {listen: \"0.0.0.0:8931\"}\n", 1, "reachable from other machines"},
		{"approval: {max_pending: 0}\n", 1, "not a positive whole number"},
		{"clients:\n  - {name: ci, token_sha256: abc}\n", 2, "must be 64 hex digits"},
		{"clients:\n  - {token_sha256: abc}\n", 2, "a client needs a name"},
		{"clients:\n  - {name: ci, token_sha256: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa}\n  - {name: ci, token_sha256: bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb}\n", 3, `client name "ci" is already used`},
		{"servers:\n  files: {bad_schema: maybe}\n", 2, `"maybe" is not one of deny, ignore`},
		{"ui:\n  listen: \"[::]:8931\"\n", 2, "reachable from other machines"},
		{"aggregate: {enabled: true, separator: \"/\"}\n", 1, "aggregate.separator"},
		{"redact:\n  patterns: ['corp-[0-9]{6}', 'x*']\n", 2, `pattern "x*"`},
		{"redact:\n  patterns: ['(']\n", 2, `pattern "("`},
		{"aggregate: {separator: \"\"}\n", 1, "aggregate.separator"},
		{"aggregate: {enable: true}\n", 1, `unknown key "enable"`},
		{"audit: {retention: forever}\n", 1, "not a duration"},
		{"audit:\n  checkpoints: {witness: [ftp://x]}\n", 2, `witness "ftp://x"`},
		{"audit:\n  stream:\n    - {syslog: udp://h:514}\n", 3, "use tcp://HOST:PORT"},
		{"audit:\n  stream:\n    - {syslog: tcp://h:514, otlp: http://h:4318}\n", 3, "either syslog"},
		{"audit:\n  stream:\n    - {otlp: h:4318}\n", 3, "use http(s)://HOST:PORT"},
		{"audit:\n  stream:\n    -\n", 3, "either syslog"},
		{"audit:\n  stream:\n    - {otlp: http://h:4318}\n    - {otlp: http://h:4318}\n", 4, "listed twice"},
		{"review: {listing: latest}\n", 1, `"latest" is not one of accepted, as_served`},
		{"review: {list: accepted}\n", 1, `unknown key "list"`},
		{"servers:\n  files:\n    review:\n      listing: all\n", 4, `"all" is not one of accepted, as_served`},
		{"policy:\n  hide_denied: sometimes\n", 2, "expected true or false"},
		{"max_sessions: {total: 0}\n", 1, "not a positive whole number"},
		{"max_sessions:\n  total: 10\n  per_client: many\n", 3, `"many" is not a positive whole number`},
		{"max_sessions:\n  per-client: 5\n", 2, `unknown key "per-client"`},
		{"max_sessions:\n  total: 10\n  per_client: 20\n", 2, "per_client (20) is more than total (10)"},
		{"max_sessions: 1000\n", 1, "expected a mapping"},
		{"servers:\n  files: {sandbox: always}\n", 2, `"always" is not one of on, off`},
		{"telemetry: {otlp: h:4318}\n", 1, "use http(s)://HOST:PORT"},
		{"telemetry:\n  otlp: http://h:4318\n  sample: 2\n", 2, "from 0 to 1"},
		{"telemetry:\n  otlp: http://h:4318\n  sample: all\n", 3, "a number from 0 to 1"},
		{"telemetry:\n  headers: {x: y}\n", 2, "headers without otlp"},
		{"telemetry:\n  otlp: http://h:4318\n  sampling: 1\n", 3, `unknown key "sampling"`},
	})
}

// max_sessions: its defaults, and each bound read on its own.
func TestMaxSessions(t *testing.T) {
	for _, tc := range []struct {
		yaml             string
		total, perClient int
	}{
		{"", 1000, 100},
		{"max_sessions: {total: 500}\n", 500, 100},
		{"max_sessions: {total: 50}\n", 50, 50},
		{"max_sessions: {per_client: 3}\n", 1000, 3},
		{"max_sessions: {total: 8, per_client: 8}\n", 8, 8},
	} {
		c, err := Parse([]byte(tc.yaml), "cfg.yaml")
		if err != nil {
			t.Fatalf("%q: %v", tc.yaml, err)
		}
		if c.MaxSessions.Total != tc.total || c.MaxSessions.PerClient != tc.perClient {
			t.Errorf("%q: %+v, want total %d per_client %d", tc.yaml, c.MaxSessions, tc.total, tc.perClient)
		}
	}
}

func TestParseReadsEverything(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "rules.d"), 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "rules.d", "b.yaml"), []byte("rules:\n  - {name: inc, tool: x, action: deny}\n"), 0o600)
	cfg := `
db: /tmp/g.db
durability: normal
max_message: 10MiB
max_request: 2MiB
approval: {timeout: 1d2h, wait: 30s}
include: [rules.d/*.yaml]
audit:
  key_file: /etc/guard/audit.key
  verify_every: 1h
  retention: off
  archive_dir: /srv/guard-archive
  checkpoints: {every: 1m, witness: ["file:///var/log/guard-checkpoints", syslog, "https://w.example/cp"]}
  stream:
    - {syslog: "tcp://127.0.0.1:6514", tls: true}
    - {otlp: "http://127.0.0.1:4318"}
servers:
  remote: {url: "https://h/${TOKEN_HOST}", headers: {Authorization: "Bearer ${TOK}"}, trust_annotations: false}
policy:
  default: deny
  rules:
    - {name: own, server: "fi*", tool: "read_*", action: allow}
`
	f := filepath.Join(dir, "guard.yaml")
	os.WriteFile(f, []byte(cfg), 0o600)
	env := map[string]string{"TOK": "s3cret", "TOKEN_HOST": "example"}
	c, err := Load(f, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxMessage != 10<<20 || c.MaxRequest != 2<<20 || c.Approval.Timeout != 26*time.Hour || c.Durability != "normal" {
		t.Fatalf("%+v", c)
	}
	if a := c.Audit; a.KeyFile != "/etc/guard/audit.key" || a.VerifyEvery != time.Hour || a.Retention != 0 || a.ArchiveDir != "/srv/guard-archive" ||
		a.Checkpoints.Every != time.Minute || len(a.Checkpoints.Witness) != 3 || len(a.Stream) != 2 ||
		!a.Stream[0].TLS || a.Stream[0].Syslog != "tcp://127.0.0.1:6514" || a.Stream[1].Name() != "otlp http://127.0.0.1:4318" {
		t.Fatalf("audit: %+v", a)
	}
	if s := c.Servers["remote"]; s.Headers["Authorization"] != "Bearer s3cret" || s.URL != "https://h/example" || s.TrustAnnotations {
		t.Fatalf("server: %+v", s)
	}
	if len(c.Policy.Rules) != 2 || c.Policy.Rules[1].Name != "inc" || c.Policy.Rules[1].Line != 2 {
		t.Fatalf("rules: %+v", c.Policy.Rules)
	}
}

func TestDurationsAndSizes(t *testing.T) {
	for s, want := range map[string]time.Duration{"7d": 7 * 24 * time.Hour, "1d12h": 36 * time.Hour, "90s": 90 * time.Second} {
		if d, err := read.ParseDuration(s); err != nil || d != want {
			t.Errorf("%s: %v %v", s, d, err)
		}
	}
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	for s, want := range map[string]time.Time{"1d12h": now.Add(-36 * time.Hour), " 90m": now.Add(-90 * time.Minute),
		"2026-11-01T00:00:00Z": time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)} {
		if got, err := read.ParseSince(s, now); err != nil || !got.Equal(want) {
			t.Errorf("since %q: %v %v", s, got, err)
		}
	}
	for _, bad := range []string{"yesterday", "-5m", "", "1.5d"} {
		if _, err := read.ParseSince(bad, now); err == nil || !strings.Contains(err.Error(), "neither an RFC 3339 time nor a duration") {
			t.Errorf("since %q: %v", bad, err)
		}
	}
	for s, want := range map[string]int64{"64MiB": 64 << 20, "10MB": 10e6, "1024": 1024, "1 KiB": 1024} {
		if n, err := read.ParseSize(s); err != nil || n != want {
			t.Errorf("%s: %v %v", s, n, err)
		}
	}
	for _, bad := range []string{"x", "10XB", ""} {
		if _, err := read.ParseSize(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// A client's token hash may be written in upper case; it is kept in lower.
func TestClientTokenHashCase(t *testing.T) {
	c, err := Parse([]byte("clients:\n  - {name: ci, token_sha256: "+strings.Repeat("AB", 32)+"}\n"), "c.yaml")
	if err != nil || len(c.Clients) != 1 || c.Clients[0].TokenSHA256 != strings.Repeat("ab", 32) {
		t.Fatalf("%+v %v", c, err)
	}
}

// A change of the sections that are not the policy's (a comment, ui,
// approval.wait) alters no decision: an engine applies it by itself.
func TestChangesOfOthersSections(t *testing.T) {
	cur, err := Parse([]byte("policy:\n  rules:\n    - {name: a, tool: x, action: deny}\nservers: {files: {trust_annotations: true}}\n"), "guard.yaml")
	if err != nil {
		t.Fatal(err)
	}
	moved, err := Parse([]byte("# a comment\nui: {listen: 127.0.0.1:9999}\napproval: {wait: 5s}\npolicy:\n  rules:\n    - {name: a, tool: x, action: deny}\nservers: {files: {trust_annotations: true}}\n"), "guard.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := policy.Changes(cur.PolicyConfig(), moved.PolicyConfig(), nil, nil, true); len(got) != 0 {
		t.Errorf("a comment, ui and approval.wait: %q", got)
	}
}

// approval.scope's values are guard's scopes.
func TestApprovalScopes(t *testing.T) {
	for _, scope := range []string{guard.ScopeSession, guard.ScopeAny} {
		c, err := Parse([]byte("approval: {scope: "+scope+", cli: false}\n"), "c.yaml")
		if err != nil || c.Approval.Scope != scope || !c.Approval.CLISet || c.Approval.CLI {
			t.Fatalf("%s: %+v %v", scope, c, err)
		}
	}
}

// telemetry: off by default; the receiver, the share sampled (1 unless
// said) and the headers, whose variables are guard's own secrets.
func TestTelemetry(t *testing.T) {
	c, err := Parse([]byte(""), "cfg.yaml")
	if err != nil || c.Telemetry.On() {
		t.Fatalf("default: %+v, %v", c.Telemetry, err)
	}
	t.Setenv("GUARD_TEST_OTLP_KEY", "k1")
	c, err = Parse([]byte("telemetry:\n  otlp: http://127.0.0.1:4318\n  headers: {X-Api-Key: \"${GUARD_TEST_OTLP_KEY}\"}\n"), "cfg.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tc := c.Telemetry
	if !tc.On() || tc.OTLP != "http://127.0.0.1:4318" || tc.Sample != 1 || tc.Headers["X-Api-Key"] != "k1" || c.Expanded["GUARD_TEST_OTLP_KEY"] != "k1" {
		t.Errorf("%+v, expanded %v", tc, c.Expanded)
	}
	c, err = Parse([]byte("telemetry: {otlp: http://h:4318, sample: 0.25}\n"), "cfg.yaml")
	if err != nil || c.Telemetry.Sample != 0.25 {
		t.Errorf("%+v, %v", c.Telemetry, err)
	}
}
