package policy

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	guard "github.com/guard-mcp/guard"
)

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
	e, err := NewEngine(f, c, reload, EngineOptions{RulesDir: filepath.Join(dir, "rules.d"), Isolated: func() bool { return true }})
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

func TestRulesSeeTheUser(t *testing.T) {
	const rules = `
policy:
  default: allow
  rules:
    - {name: contractors-approve, tool: "write_*", when: "'contractors' in user.groups", action: approve}
    - {name: alice-only, tool: deploy, users: [alice@example.com], action: allow}
    - {name: no-deploy, tool: deploy, action: deny}
    - {name: sre-drop, tool: drop_table, groups: [sre, dba], action: allow}
    - {name: no-drop, tool: drop_table, action: deny}
    - {name: anonymous, tool: whoami, when: 'user.sub == "" && size(user.groups) == 0 && user.email == ""', action: deny, reason: nobody}
    - {name: by-subject, tool: whoami, users: [u-123], action: approve}
`
	c, err := Parse([]byte(rules), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := Compile(c, nil, nil)
	alice := guard.Identity{Subject: "u-123", Email: "alice@example.com", Groups: []string{"sre"}}
	bob := guard.Identity{Subject: "u-456", Email: "bob@example.com", Groups: []string{"contractors"}}
	ro := tool(`{"readOnlyHint":true}`)
	for _, tc := range []struct {
		name string
		tool string
		user guard.Identity
		rule string
		act  string
	}{
		{"a group in a condition", "write_file", bob, "contractors-approve", "approve"},
		{"not in the group", "write_file", alice, "default", "allow"},
		{"no one authenticated: an empty user, no error", "write_file", guard.Identity{}, "default", "allow"},
		{"users by email", "deploy", alice, "alice-only", "allow"},
		{"another user", "deploy", bob, "no-deploy", "deny"},
		{"no user matches no users:", "deploy", guard.Identity{}, "no-deploy", "deny"},
		{"groups", "drop_table", alice, "sre-drop", "allow"},
		{"not in the groups", "drop_table", bob, "no-drop", "deny"},
		{"no one in no group", "drop_table", guard.Identity{}, "no-drop", "deny"},
		{"the empty user's fields", "whoami", guard.Identity{}, "anonymous", "deny"},
		{"users by subject", "whoami", alice, "by-subject", "approve"},
	} {
		v := p.Decide(&guard.Call{Method: "tools/call", ToolName: tc.tool, Arguments: []byte(`{}`), Tool: ro, User: tc.user})
		if v.Rule != tc.rule || v.Action != tc.act {
			t.Errorf("%s: got %s by %s (%s), want %s by %s", tc.name, v.Action, v.Rule, v.Reason, tc.act, tc.rule)
		}
	}
	// users: and groups: are part of what a change shows, and of the
	// policy's version.
	c2, err := Parse([]byte(strings.Replace(rules, "users: [alice@example.com]", "users: [bob@example.com]", 1)), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ch := Changes(c, c2, nil, nil, false)
	if len(ch) != 1 || !strings.Contains(ch[0], `rule "alice-only" changed`) || !strings.Contains(ch[0], "users=bob@example.com, was allow tools/call server=* tool=deploy users=alice@example.com") {
		t.Fatalf("changes: %q", ch)
	}
	if Compile(c2, nil, nil).Version() == p.Version() {
		t.Fatal("the same version for other users")
	}
	b, err := MarshalRules(c.Policy.Rules[1:2])
	if err != nil || !strings.Contains(string(b), "users: [alice@example.com]") {
		t.Fatalf("marshalled: %s %v", b, err)
	}
}
