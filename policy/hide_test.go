package policy

import (
	"context"
	"fmt"
	"strings"
	"testing"

	guard "github.com/guard-mcp/guard"
)

// Arguments that a tool's calls may carry, to check DeniesEveryCall
// against Decide: each case's conditions read these members.
var sampleArgs = []string{
	`{}`,
	`{"path": "/etc/passwd", "data": "x", "x": 1, "team": "ops"}`,
	`{"path": "/home/me/notes", "data": "` + strings.Repeat("y", 200) + `", "x": 2, "team": "dev"}`,
	`{"path": 42, "x": "1"}`,
}

// hideCase is a policy, a caller asking for a tool, and whether the policy
// denies every call of that tool to the caller, by which rule ("" for a
// zero verdict: the arguments decide).
type hideCase struct {
	name    string
	conf    string
	learned string // a rules file of rules learned from approvals
	server  string // "files" unless set
	tool    string
	ann     string // the tool's annotations; read-only unless set
	user    guard.Identity
	client  string
	denied  bool
	rule    string
}

var (
	alice      = guard.Identity{Subject: "alice", Email: "alice@example.com", Groups: []string{"dev"}}
	contractor = guard.Identity{Subject: "carol", Email: "carol@example.com", Groups: []string{"dev", "contractors"}}
	financier  = guard.Identity{Subject: "fred", Email: "fred@example.com", Groups: []string{"finance"}}
	nobody     = guard.Identity{}
)

// Policies that several cases ask about.
const (
	denyRmOnFiles   = "policy:\n  rules: [{name: no-rm, server: files, tool: rm, action: deny}]\n"
	noContractors   = "policy:\n  rules: [{name: no-contractors, tool: deploy, groups: [contractors], action: deny}]\n"
	devsRm          = "policy:\n  rules:\n    - {name: devs-rm, tool: rm, groups: [dev], action: allow}\n    - {name: nothing, tool: '*', action: deny}\n"
	financeOnly     = "policy:\n  rules: [{name: finance-only, tool: billing, when: \"!('finance' in user.groups)\", action: deny}]\n"
	financeFirst    = "policy:\n  rules:\n    - {name: finance, tool: billing, when: \"'finance' in user.groups\", action: allow}\n    - {name: nothing, action: deny}\n"
	contractorsAndX = "policy:\n  rules:\n    - {name: contractors-x, tool: shell, when: \"'contractors' in user.groups && args.x == 1\", action: allow}\n    - {name: nothing, action: deny}\n"
	contractorsOrX  = "policy:\n  rules: [{name: contractors-or-x, tool: shell, when: \"'contractors' in user.groups || args.x == 1\", action: deny}]\n"
	ownTeam         = "policy:\n  rules:\n    - {name: own-team, tool: team, when: 'user.groups.exists(g, g == args.team)', action: allow}\n    - {name: nothing, action: deny}\n"
	claudeOnly      = "policy:\n  rules: [{name: claude-only, tool: send, when: 'client.name != \"claude-ai\"', action: deny}]\n"
)

func TestDeniesEveryCall(t *testing.T) {
	for _, tc := range []hideCase{
		{name: "a deny rule on the tool", tool: "rm", denied: true, rule: "no-rm",
			conf: denyRmOnFiles},
		{name: "a deny rule on another server", server: "db", tool: "rm", rule: "default",
			conf: denyRmOnFiles},
		{name: "a deny rule on another tool", tool: "ls", rule: "default",
			conf: denyRmOnFiles},
		{name: "a deny rule on another method", tool: "rm", rule: "default",
			conf: "policy:\n  rules: [{name: no-prompt, method: prompts/get, tool: rm, action: deny}]\n"},
		{name: "a deny rule for a group the caller is in", tool: "deploy", user: contractor, denied: true, rule: "no-contractors",
			conf: noContractors},
		{name: "a deny rule for a group the caller is not in", tool: "deploy", user: alice, rule: "default",
			conf: noContractors},
		{name: "a deny rule for a group, no one authenticated", tool: "deploy", user: nobody, rule: "default",
			conf: noContractors},
		{name: "a deny rule for a user, by email", tool: "deploy", user: alice, denied: true, rule: "not-alice",
			conf: "policy:\n  rules: [{name: not-alice, tool: deploy, users: [alice@example.com], action: deny}]\n"},
		{name: "an earlier allow shadows a later deny", tool: "rm", rule: "rm-ok",
			conf: "policy:\n  rules:\n    - {name: rm-ok, tool: rm, action: allow}\n    - {name: nothing, tool: '*', action: deny}\n"},
		{name: "an earlier approve shadows a later deny", tool: "rm", rule: "rm-held",
			conf: "policy:\n  rules:\n    - {name: rm-held, tool: rm, action: approve}\n    - {name: nothing, tool: '*', action: deny}\n"},
		{name: "an earlier allow for a group the caller is in", tool: "rm", user: alice, rule: "devs-rm",
			conf: devsRm},
		{name: "an earlier allow for a group the caller is not in", tool: "rm", user: financier, denied: true, rule: "nothing",
			conf: devsRm},

		// Conditions: what the caller, the client and the tool are is
		// known; the arguments and the time are not.
		{name: "when on user.groups, caller outside: decides", tool: "billing", user: alice, denied: true, rule: "finance-only",
			conf: financeOnly},
		{name: "when on user.groups, caller inside: passed", tool: "billing", user: financier, rule: "default",
			conf: financeOnly},
		{name: "when on user.groups, an allow before a deny-all", tool: "billing", user: financier, rule: "finance",
			conf: financeFirst},
		{name: "when on user.groups, an allow the caller misses", tool: "billing", user: alice, denied: true, rule: "nothing",
			conf: financeFirst},
		{name: "when on args.path: a deny does not hide", tool: "write_file", rule: "default",
			conf: "policy:\n  default: allow\n  rules: [{name: no-etc, tool: write_file, when: 'args.path.startsWith(\"/etc\")', action: deny}]\n"},
		{name: "when on args: an allow before a deny-all does not hide", tool: "upload",
			conf: "policy:\n  rules:\n    - {name: small, tool: upload, when: 'size(args.data) < 100', action: allow}\n    - {name: no-upload, tool: upload, action: deny}\n"},
		{name: "when on args: a deny before a deny-all default", tool: "write_file", denied: true, rule: "default",
			conf: "policy:\n  default: deny\n  rules: [{name: no-etc, tool: write_file, when: 'args.path.startsWith(\"/etc\")', action: deny}]\n"},
		{name: "when on args: a deny before a deny-all rule", tool: "write_file", denied: true, rule: "nothing",
			conf: "policy:\n  rules:\n    - {name: no-etc, tool: write_file, when: 'args.path.startsWith(\"/etc\")', action: deny}\n    - {name: nothing, action: deny}\n"},
		{name: "group && args, an allow, caller outside: the group decides", tool: "shell", user: alice, denied: true, rule: "nothing",
			conf: contractorsAndX},
		{name: "group && args, an allow, caller inside: the arguments decide", tool: "shell", user: contractor,
			conf: contractorsAndX},
		{name: "group && args, a deny, caller inside: the arguments decide", tool: "shell", user: contractor, rule: "default",
			conf: "policy:\n  rules: [{name: contractors-x, tool: shell, when: \"'contractors' in user.groups && args.x == 1\", action: deny}]\n"},
		{name: "group || args, a deny, caller inside: the group decides", tool: "shell", user: contractor, denied: true, rule: "contractors-or-x",
			conf: contractorsOrX},
		{name: "group || args, a deny, caller outside: the arguments decide", tool: "shell", user: alice, rule: "default",
			conf: contractorsOrX},
		{name: "a comprehension over no groups", tool: "team", user: nobody, denied: true, rule: "nothing",
			conf: ownTeam},
		{name: "a comprehension over groups and args", tool: "team", user: alice,
			conf: ownTeam},
		{name: "when on the client", tool: "send", client: "cursor", denied: true, rule: "claude-only",
			conf: claudeOnly},
		{name: "when on the client, another one", tool: "send", client: "claude-ai", rule: "default",
			conf: claudeOnly},
		{name: "when on the tool's name and annotations", tool: "rm", ann: `{"destructiveHint":true}`, denied: true, rule: "no-destruction",
			conf: "policy:\n  rules: [{name: no-destruction, when: 'annotations.destructiveHint && tool != \"ls\"', action: deny}]\n"},
		{name: "when on the annotations of a harmless tool", tool: "ls", ann: `{"readOnlyHint":true,"destructiveHint":false}`, rule: "default",
			conf: "policy:\n  rules: [{name: no-destruction, when: 'annotations.destructiveHint', action: deny}]\n"},
		{name: "when on the time: a listing outlives it", tool: "deploy", rule: "default",
			conf: "policy:\n  default: allow\n  rules: [{name: by-day, tool: deploy, when: 'now.getHours(\"UTC\") < 24', action: deny}]\n"},
		{name: "a condition that fails whatever the arguments", tool: "deploy", denied: true, rule: "broken",
			conf: "policy:\n  default: allow\n  rules: [{name: broken, tool: deploy, when: 'user.nosuch == \"x\"', action: allow}]\n"},
		{name: "a condition that fails for some arguments", tool: "write_file",
			conf: "policy:\n  default: allow\n  rules: [{name: only-etc, tool: write_file, when: 'args.path == \"/etc\" || user.nosuch == \"x\"', action: allow}]\n"},

		// The default.
		{name: "a deny-all default", tool: "ls", denied: true, rule: "default",
			conf: "policy: {default: deny}\n"},
		{name: "an approve default", tool: "ls", rule: "default",
			conf: "policy: {default: approve}\n"},
		{name: "the annotations default, a destructive tool", tool: "rm", ann: `{"destructiveHint":true}`, rule: "default",
			conf: "policy: {default: annotations}\n"},
		{name: "monitor mode", tool: "rm",
			conf: "policy:\n  mode: monitor\n  default: deny\n  rules: [{name: no-rm, tool: rm, action: deny}]\n"},

		// Learned rules come after the configured ones, before the default.
		{name: "a configured deny before a learned allow", tool: "rm", denied: true, rule: "no-rm",
			conf:    "policy:\n  rules: [{name: no-rm, tool: rm, action: deny}]\n",
			learned: "rules: [{name: approved-rm, tool: rm, action: allow}]\n"},
		{name: "a learned allow before a deny-all default", tool: "fetch", rule: "approved-fetch",
			conf:    "policy:\n  default: deny\n  rules: [{name: no-rm, tool: rm, action: deny}]\n",
			learned: "rules: [{name: approved-fetch, tool: fetch, action: allow}]\n"},
		{name: "a learned allow for another tool", tool: "rm", denied: true, rule: "default",
			conf:    "policy: {default: deny}\n",
			learned: "rules: [{name: approved-fetch, tool: fetch, action: allow}]\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := hidePolicy(t, tc.conf, tc.learned)
			call := tc.call()
			denied, v := p.DeniesEveryCall(call)
			if denied != tc.denied || v.Rule != tc.rule {
				t.Fatalf("got %t by %q (%+v), want %t by %q", denied, v.Rule, v, tc.denied, tc.rule)
			}
			if denied && (v.Action != guard.ActionDeny || v.PolicyVersion != p.Version()) {
				t.Fatalf("the verdict that denies: %+v", v)
			}
			if hidden, _ := p.Hides(call); hidden != denied {
				t.Fatalf("hide_denied is on by default: Hides %t, DeniesEveryCall %t", hidden, denied)
			}
			// A tool it says is denied whatever the arguments, Decide
			// denies with each (an earlier rule may deny some first).
			for _, args := range sampleArgs {
				c := tc.call()
				c.Arguments = []byte(args)
				if d := p.Decide(c); denied && d.Action != guard.ActionDeny {
					t.Errorf("%s: Decide gave %+v", args, d)
				}
			}
		})
	}
}

// call is the case's call, its arguments unknown.
func (tc hideCase) call() *guard.Call {
	server := tc.server
	if server == "" {
		server = "files"
	}
	ann := tc.ann
	if ann == "" {
		ann = `{"readOnlyHint":true}`
	}
	client := tc.client
	if client == "" {
		client = "claude-ai"
	}
	return &guard.Call{Server: server, Method: "tools/call", ToolName: tc.tool, Tool: tool(ann), User: tc.user,
		Client: guard.ClientInfo{Name: client, Version: "1", Protocol: "2025-11-25"}}
}

// hidePolicy compiles a configuration with learned rules (a rules file's
// text, or "").
func hidePolicy(t testing.TB, conf, learned string) *Policy {
	t.Helper()
	c, err := Parse([]byte(conf), "guard.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var approved []Rule
	if learned != "" {
		if approved, err = ParseRules("approved.yaml", []byte(learned), func(string) string { return "" }); err != nil {
			t.Fatal(err)
		}
	}
	return Compile(c, approved, nil)
}

// With policy.hide_denied false a listing hides nothing, what the policy
// denies notwithstanding; the engine answers with the policy in force, its
// learned rules included.
func TestEngineHides(t *testing.T) {
	denyRm := "policy:\n  default: deny\n  rules: [{name: no-rm, tool: rm, action: deny}]\n"
	p := hidePolicy(t, denyRm+"  hide_denied: false\n", "")
	call := hideCase{tool: "rm"}.call()
	if denied, v := p.DeniesEveryCall(call); !denied || v.Rule != "no-rm" {
		t.Fatalf("DeniesEveryCall: %t %+v", denied, v)
	}
	if hidden, v := p.Hides(call); hidden || v.Rule != "" {
		t.Fatalf("hide_denied: false hides: %+v", v)
	}

	c, err := Parse([]byte(denyRm), "guard.yaml")
	if err != nil {
		t.Fatal(err)
	}
	learned := &learnedList{}
	e, err := NewEngine("", c, reload, EngineOptions{Learned: learned})
	if err != nil {
		t.Fatal(err)
	}
	fetch := hideCase{tool: "fetch"}.call()
	if hidden, v := e.Hides(fetch); !hidden || v.Rule != "default" {
		t.Fatalf("fetch under a deny-all default: %t %+v", hidden, v)
	}
	learned.add(Rule{Name: "approved-fetch", Server: "*", Tool: "fetch", Method: "tools/call", Action: guard.ActionAllow})
	e.learnedChanged(context.Background())
	if hidden, v := e.Hides(fetch); hidden || v.Rule != "approved-fetch" {
		t.Fatalf("fetch once an allow is learned: %t %+v", hidden, v)
	}
	if hidden, _ := e.Hides(call); !hidden {
		t.Fatal("rm: the configured deny comes before the learned rules")
	}
}

// BenchmarkDeniesEveryCall is one tool of a listing against 50 rules:
// most target other tools, some the caller's groups, some test arguments,
// and the tool is decided by the default after them all.
func BenchmarkDeniesEveryCall(b *testing.B) {
	var conf strings.Builder
	conf.WriteString("policy:\n  default: annotations\n  rules:\n")
	for i := range 50 {
		switch i % 5 {
		case 0:
			fmt.Fprintf(&conf, "    - {name: r%d, server: db, tool: 'drop_%d', action: deny}\n", i, i)
		case 1:
			fmt.Fprintf(&conf, "    - {name: r%d, tool: 'write_*', groups: [contractors], action: deny}\n", i)
		case 2:
			fmt.Fprintf(&conf, "    - {name: r%d, tool: 'write_*', when: 'args.path.startsWith(\"/etc/%d\")', action: deny}\n", i, i)
		case 3:
			fmt.Fprintf(&conf, "    - {name: r%d, tool: '*', when: \"'ops%d' in user.groups && size(args) > 100\", action: deny}\n", i, i)
		case 4:
			fmt.Fprintf(&conf, "    - {name: r%d, server: files, tool: 'read_%d', action: allow}\n", i, i)
		}
	}
	p := hidePolicy(b, conf.String(), "")
	call := &guard.Call{Server: "files", Method: "tools/call", ToolName: "write_file", Tool: tool(`{"destructiveHint":false}`),
		User: alice, Client: guard.ClientInfo{Name: "claude-ai", Version: "1", Protocol: "2025-11-25"}}
	if denied, v := p.DeniesEveryCall(call); denied || v.Rule != "default" {
		b.Fatalf("%t %+v", denied, v)
	}
	b.ReportAllocs()
	for b.Loop() {
		p.DeniesEveryCall(call)
	}
}
