package policy

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
)

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

// Only sandbox: on in so many words makes a server one that never runs
// without isolation; the default (on) falls back where the system has none.
func TestMustIsolate(t *testing.T) {
	c, err := Parse([]byte("servers:\n  strict: {command: [x], sandbox: on}\n  plain: {command: [x]}\n  open: {command: [x], sandbox: off}\n"), "cfg.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Servers["strict"].MustIsolate() || c.Servers["plain"].MustIsolate() || c.Servers["open"].MustIsolate() || c.Servers["none"].MustIsolate() {
		t.Fatalf("MustIsolate: strict %v, plain %v, open %v", c.Servers["strict"].MustIsolate(), c.Servers["plain"].MustIsolate(), c.Servers["open"].MustIsolate())
	}
	if c.Servers["plain"].Sandbox != "on" {
		t.Fatalf("the default is sandbox: on, got %q", c.Servers["plain"].Sandbox)
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

func tool(ann string) *guard.Tool {
	t := &guard.Tool{Name: "t", Def: []byte(`{"name":"t","annotations":` + ann + `}`)}
	var a struct{ Annotations guard.Annotations }
	json.Unmarshal(t.Def, &a)
	t.Annotations = a.Annotations
	return t
}

func TestDefaultFollowsAnnotations(t *testing.T) {
	c, _ := Parse([]byte("servers:\n  wary: {trust_annotations: false}\n"), "c.yaml")
	p := Compile(c, nil, nil)
	for _, tc := range []struct {
		server, ann string
		unknown     bool
		want        string
	}{
		{"s", `{"readOnlyHint":true}`, false, "allow"},
		{"s", `{"readOnlyHint":true,"destructiveHint":true}`, false, "allow"},
		{"s", `{}`, false, "approve"},
		{"s", `{"destructiveHint":true}`, false, "approve"},
		{"s", `{"readOnlyHint":false}`, false, "approve"},
		{"s", `{"readOnlyHint":false,"destructiveHint":false}`, false, "approve"},
		{"s", `{"readOnlyHint":false,"destructiveHint":false,"openWorldHint":true}`, false, "approve"},
		{"s", `{"readOnlyHint":false,"destructiveHint":false,"openWorldHint":false}`, false, "allow"},
		{"s", ``, true, "approve"},
		{"wary", `{"readOnlyHint":true}`, false, "approve"},
	} {
		call := &guard.Call{Server: tc.server, Method: "tools/call", ToolName: "t"}
		if !tc.unknown {
			call.Tool = tool(tc.ann)
		}
		if v := p.Decide(call); v.Action != tc.want || v.Rule != "default" || v.Reason == "" {
			t.Errorf("%s %s: got %+v, want %s", tc.server, tc.ann, v, tc.want)
		}
	}
}

func TestRulesFirstMatchWins(t *testing.T) {
	c, err := Parse([]byte(`
policy:
  default: deny
  rules:
    - {name: no-etc, server: files, tool: "write_*", action: deny, reason: "no writes"}
    - {name: files-ok, server: "fil*", action: allow}
    - {name: prompts, method: prompts/get, action: approve}
`), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := Compile(c, []Rule{{Name: "learned", Server: "*", Tool: "echo", Method: "tools/call", Action: "allow"}}, nil)
	for _, tc := range []struct {
		server, method, tool, rule, action string
	}{
		{"files", "tools/call", "write_file", "no-etc", "deny"},
		{"files", "tools/call", "read_file", "files-ok", "allow"},
		{"other", "tools/call", "echo", "learned", "allow"},
		{"other", "tools/call", "rm", "default", "deny"},
		{"other", "prompts/get", "", "prompts", "approve"},
	} {
		v := p.Decide(&guard.Call{Server: tc.server, Method: tc.method, ToolName: tc.tool, Tool: tool(`{"readOnlyHint":true}`)})
		if v.Rule != tc.rule || v.Action != tc.action || v.PolicyVersion == "" {
			t.Errorf("%+v: got %+v", tc, v)
		}
	}
	if got := guard.DenialText(guard.Verdict{Rule: "no-etc", Reason: "no writes under /etc"}); got != `Denied by policy rule "no-etc": no writes under /etc` {
		t.Fatal(got)
	}
	if got := guard.DenialText(guard.Verdict{Rule: "default"}); got != "Denied by the default policy (deny)" {
		t.Fatal(got)
	}
}

func TestSelfProtection(t *testing.T) {
	home := t.TempDir()
	data := filepath.Join(home, ".local/share/guard")
	p := NewProtected(filepath.Join(data, "guard.db"), data, filepath.Join(home, ".config/guard/guard.yaml"))
	p.Home, p.Dir = home, filepath.Join(home, "work")
	// q is a JSON string: a path of Windows' has backslashes.
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	for _, tc := range []struct {
		args string
		deny bool
	}{
		{`{"path":` + q(data+`/guard.db`) + `}`, true},
		{`{"path":"~/.local/share/guard/guard.db-wal"}`, true},
		{`{"command":` + q("sqlite3 "+home+`/.local/share/guard/guard.db 'delete from records'`) + `}`, true},
		{`{"command":"cat ~/.config/guard/guard.yaml"}`, true},
		{`{"path":"../.local/share/guard/audit.key"}`, true},
		{`{"cmd":["sh","-c","guard approvals approve 0193"]}`, true},
		{`{"cmd":"/usr/local/bin/guard audit verify"}`, true},
		{`{"path":"/home/other/guardrails.txt"}`, false},
		{`{"text":"the guard at the gate approves visitors"}`, false},
		{`{"path":` + q(home+`/.local/share/guardian/x`) + `}`, false},
		{`{"n":1}`, false},
	} {
		got := p.Check([]byte(tc.args)) != ""
		if got != tc.deny {
			t.Errorf("%s: denied=%v, want %v", tc.args, got, tc.deny)
		}
	}
	// file: URLs have slashes, and a drive after one: file:///C:/...
	data, home = filepath.ToSlash(data), filepath.ToSlash(home)
	if !strings.HasPrefix(data, "/") {
		data, home = "/"+data, "/"+home
	}
	for uri, deny := range map[string]bool{
		"file://" + data + "/guard.db":                                            true,
		"file://localhost" + data + "/guard.db":                                   true,
		"file://" + data + "/guard%2edb":                                          true,
		"file://" + strings.ReplaceAll(data, "/guard", "/guard%2F") + "audit.key": true,
		"file:" + data + "/guard.db":                                              true,
		"file://" + home + "/notes.txt":                                           false,
		"notes://welcome":                                                         false,
	} {
		if got := p.CheckURI(uri) != ""; got != deny {
			t.Errorf("%s: denied=%v, want %v", uri, got, deny)
		}
	}
	c := Default()
	if v := Compile(c, nil, p).Decide(&guard.Call{Method: "resources/read", URI: "file://localhost" + data + "/guard%2edb"}); v.Rule != guard.SelfProtectionRule || v.Action != guard.ActionDeny {
		t.Fatalf("a resource read of guard's database: %+v", v)
	}
	v := Compile(c, nil, p).Decide(&guard.Call{Method: "tools/call", Arguments: []byte(`{"path":"` + data + `/guard.db"}`), Tool: tool(`{"readOnlyHint":true}`)})
	if v.Action != guard.ActionDeny || v.Rule != guard.SelfProtectionRule {
		t.Fatalf("self-protection did not come first: %+v", v)
	}
}

// With isolation in force, a valid change is applied by itself.
func TestEngineReloadsValidChangesOnly(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "guard.yaml")
	os.WriteFile(f, []byte("policy: {default: allow}\n"), 0o600)
	c, err := Load(f, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(f, c, EngineOptions{RulesDir: filepath.Join(dir, "rules.d"), Isolated: func() bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	// Each look at the files (what Watch does every so often) applies a
	// valid change before it returns: the test looks, then checks.
	ctx := context.Background()
	call := &guard.Call{Method: "tools/call", ToolName: "x", Tool: tool(`{}`)}
	lookFor := func(want string) {
		t.Helper()
		e.look(ctx)
		if got := e.Decide(call).Action; got != want {
			t.Fatalf("policy is %s, want %s", got, want)
		}
	}
	os.WriteFile(f, []byte("policy: {default: deny}\n"), 0o600)
	lookFor("deny")
	os.WriteFile(f, []byte("policy: {default: nonsense}\n"), 0o600)
	lookFor("deny") // an invalid change is not applied
	// A rule learned from an approval, written by another process.
	os.WriteFile(f, []byte("policy: {default: deny}\n"), 0o600)
	if added, err := AppendApprovedRule(filepath.Join(dir, "rules.d"), Rule{Name: "allow-x", Server: "*", Tool: "x", Action: "allow"}, nil); err != nil || !added {
		t.Fatal(added, err)
	}
	lookFor("allow")
}

// Appending a learned rule keeps every field of the rules already there,
// adds nothing when the same rule is there, and numbers a taken name.
func TestAppendApprovedRule(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rules.d")
	os.MkdirAll(dir, 0o700)
	os.WriteFile(filepath.Join(dir, ApprovedRulesFile), []byte("rules:\n  - {name: approved-a-b-c, server: a, tool: b-c, when: 'args.n < 3', action: allow}\n"+
		"  - {name: read-etc, method: resources/read, uri: 'file:///etc/*', action: deny, reason: not etc}\n"), 0o600)
	add := func(r Rule) bool {
		t.Helper()
		added, err := AppendApprovedRule(dir, r, nil)
		if err != nil {
			t.Fatal(err)
		}
		return added
	}
	if !add(Rule{Name: "approved-a-b-c", Server: "a-b", Tool: "c", Action: "allow"}) {
		t.Fatal("a rule for another tool whose name collides was not added")
	}
	if add(Rule{Name: "approved-a-b-c", Server: "a-b", Tool: "c", Method: "tools/call", Action: "allow"}) {
		t.Fatal("the same rule was added twice")
	}
	rules, err := LoadRules(filepath.Join(dir, ApprovedRulesFile), os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) != 3 || rules[0].When != "args.n < 3" || rules[1].Method != "resources/read" || rules[1].URI != "file:///etc/*" ||
		rules[2].Name != "approved-a-b-c-2" || rules[2].Server != "a-b" {
		t.Fatalf("rules after appending: %+v", rules)
	}
}

func TestRedact(t *testing.T) {
	r := Default().Redactor()
	for _, tc := range []struct{ in, want string }{
		{`{"path":"/x","password":"hunter2"}`, `{"password":"[REDACTED]","path":"/x"}`},
		{`{"auth":{"API-Key":"k","Token":["a"]},"list":[{"client_secret":1}]}`, `{"auth":{"API-Key":"[REDACTED]","Token":"[REDACTED]"},"list":[{"client_secret":1}]}`},
		{`{"headers":{"Authorization":"Bearer abc"}}`, `{"headers":{"Authorization":"[REDACTED]"}}`},
		{`{"path":"/x"}`, `{"path":"/x"}`},
		{`not json with password`, `not json with password`},
		{`{"n":12345678901234567890,"secret":"s"}`, `{"n":12345678901234567890,"secret":"[REDACTED]"}`},
	} {
		if got := r.Redact([]byte(tc.in)); got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.in, got, tc.want)
		}
	}
	// A configuration not read by Parse, with a pattern the masker
	// refuses, keeps its other patterns.
	c := Default()
	c.Redact.Patterns = []string{"corp-[0-9]{6}", "x*"}
	if got := c.Redactor().Redact([]byte(`{"note":"ticket corp-123456"}`)); strings.Contains(got, "corp-123456") {
		t.Errorf("a configured pattern was dropped: %s", got)
	}
}

func TestDurationsAndSizes(t *testing.T) {
	for s, want := range map[string]time.Duration{"7d": 7 * 24 * time.Hour, "1d12h": 36 * time.Hour, "90s": 90 * time.Second} {
		if d, err := ParseDuration(s); err != nil || d != want {
			t.Errorf("%s: %v %v", s, d, err)
		}
	}
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	for s, want := range map[string]time.Time{"1d12h": now.Add(-36 * time.Hour), " 90m": now.Add(-90 * time.Minute),
		"2026-11-01T00:00:00Z": time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)} {
		if got, err := ParseSince(s, now); err != nil || !got.Equal(want) {
			t.Errorf("since %q: %v %v", s, got, err)
		}
	}
	for _, bad := range []string{"yesterday", "-5m", "", "1.5d"} {
		if _, err := ParseSince(bad, now); err == nil || !strings.Contains(err.Error(), "neither an RFC 3339 time nor a duration") {
			t.Errorf("since %q: %v", bad, err)
		}
	}
	for s, want := range map[string]int64{"64MiB": 64 << 20, "10MB": 10e6, "1024": 1024, "1 KiB": 1024} {
		if n, err := ParseSize(s); err != nil || n != want {
			t.Errorf("%s: %v %v", s, n, err)
		}
	}
	for _, bad := range []string{"x", "10XB", ""} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func FuzzDecide(f *testing.F) {
	f.Add([]byte(`{"path":"/x","cmd":"guard approvals approve 1"}`), "write_file")
	f.Add([]byte(`{"path":"/etc/x","n":3}`), "edit")
	f.Add([]byte(`{"path":7}`), "edit")
	c, err := Parse([]byte(`policy:
  rules:
    - {name: r, tool: "w*", action: deny}
    - {name: etc, tool: "edit", when: 'args.path.startsWith("/etc")', action: deny}
    - {name: big, tool: "*", when: 'has(args.n) && args.n > 2', action: approve}
`), "c.yaml")
	if err != nil {
		f.Fatal(err)
	}
	p := Compile(c, nil, NewProtected("/var/lib/guard/guard.db"))
	f.Fuzz(func(t *testing.T, args []byte, name string) {
		v := p.Decide(&guard.Call{Server: "s", Method: "tools/call", ToolName: name, Arguments: args, Tool: tool(`{}`)})
		switch v.Action {
		case guard.ActionAllow, guard.ActionDeny, guard.ActionApprove:
		default:
			t.Fatalf("no decision: %+v", v)
		}
		// A condition that cannot be evaluated denies (fail closed).
		if strings.Contains(v.Reason, "could not be evaluated") && v.Action != guard.ActionDeny {
			t.Fatalf("an evaluation error did not deny: %+v", v)
		}

	})
}

func BenchmarkDecide(b *testing.B) {
	c, _ := Parse([]byte("policy:\n  rules:\n    - {name: a, tool: \"read_*\", action: allow}\n    - {name: b, tool: \"write_*\", action: approve}\n"), "c.yaml")
	p := Compile(c, nil, NewProtected("/var/lib/guard/guard.db", "/etc/guard/guard.yaml"))
	call := &guard.Call{Server: "files", Method: "tools/call", ToolName: "write_file", Tool: tool(`{"destructiveHint":true}`),
		Arguments: []byte(`{"path":"/home/me/notes/todo.md","content":"buy milk"}`)}
	b.ReportAllocs()
	for b.Loop() {
		p.Decide(call)
	}
}

// A client's token hash may be written in upper case; it is kept in lower.
func TestClientTokenHashCase(t *testing.T) {
	c, err := Parse([]byte("clients:\n  - {name: ci, token_sha256: "+strings.Repeat("AB", 32)+"}\n"), "c.yaml")
	if err != nil || len(c.Clients) != 1 || c.Clients[0].TokenSHA256 != strings.Repeat("ab", 32) {
		t.Fatalf("%+v %v", c, err)
	}
}

// review.listing is each server's own, else the top level's, else
// accepted; policy.hide_denied is true unless the file says false.
func TestListingAndHideDenied(t *testing.T) {
	c, err := Parse([]byte(""), "guard.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Listing("files") != ListingAccepted || !c.Policy.HideDenied {
		t.Fatalf("defaults: listing %q, hide_denied %t", c.Listing("files"), c.Policy.HideDenied)
	}
	c, err = Parse([]byte(`
review: {listing: as_served}
policy: {hide_denied: false}
servers:
  files: {review: {listing: accepted}}
  db: {trust_annotations: false}
`), "guard.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for server, want := range map[string]string{"files": ListingAccepted, "db": ListingAsServed, "unnamed": ListingAsServed} {
		if got := c.Listing(server); got != want {
			t.Errorf("%s: listing %q, want %q", server, got, want)
		}
	}
	if c.Policy.HideDenied {
		t.Error("hide_denied: false read as true")
	}
}
