package policy

import (
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
)

func TestConditions(t *testing.T) {
	c, err := Parse([]byte(`
policy:
  default: allow
  rules:
    - {name: no-etc, tool: write_file, when: 'args.path.startsWith("/etc")', action: deny, reason: "no writes under /etc"}
    - {name: big-query, tool: "*", when: 'has(args.query) && size(args.query) > 20', action: approve}
    - {name: destructive, tool: "*", when: 'annotations.destructiveHint && !annotations.readOnlyHint', action: approve}
    - {name: old-client, tool: "*", when: 'client.protocol < "2025-06-18"', action: deny}
    - {name: claude-only, tool: send, when: 'client.name != "claude-ai"', action: deny}
    - {name: night, tool: deploy, when: 'now.getHours("UTC") < 6', action: deny}
    - {name: secrets, method: resources/read, uri: "file:///home/*/.ssh/*", action: deny}
    - {name: prompt-admin, method: prompts/get, tool: "admin_*", when: 'args.level == "root"', action: approve}
    - {name: sampling, method: sampling/createMessage, when: 'server == "untrusted"', action: deny}
`), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := Compile(c, nil, nil)
	ro := tool(`{"readOnlyHint":true}`)
	wr := tool(`{"readOnlyHint":false,"destructiveHint":false}`)
	noon := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	cl := guard.ClientInfo{Name: "claude-ai", Version: "1", Protocol: "2025-11-25"}
	for _, tc := range []struct {
		name string
		call guard.Call
		rule string
		act  string
	}{
		{"condition true", guard.Call{Method: "tools/call", ToolName: "write_file", Arguments: []byte(`{"path":"/etc/passwd"}`), Tool: wr, Client: cl}, "no-etc", "deny"},
		{"condition false falls through", guard.Call{Method: "tools/call", ToolName: "write_file", Arguments: []byte(`{"path":"/home/me/x"}`), Tool: wr, Client: cl}, "default", "allow"},
		{"missing argument fails closed", guard.Call{Method: "tools/call", ToolName: "write_file", Arguments: []byte(`{"content":"x"}`), Tool: wr, Client: cl}, "no-etc", "deny"},
		{"wrong type fails closed", guard.Call{Method: "tools/call", ToolName: "write_file", Arguments: []byte(`{"path":42}`), Tool: wr, Client: cl}, "no-etc", "deny"},
		{"arguments not an object fail closed", guard.Call{Method: "tools/call", ToolName: "write_file", Arguments: []byte(`[1]`), Tool: wr, Client: cl}, "no-etc", "deny"},
		{"arguments a string fail closed", guard.Call{Method: "tools/call", ToolName: "write_file", Arguments: []byte(`"x"`), Tool: wr, Client: cl}, "no-etc", "deny"},
		{"arguments not JSON fail closed", guard.Call{Method: "tools/call", ToolName: "write_file", Arguments: []byte(`nope`), Tool: wr, Client: cl}, "no-etc", "deny"},
		{"size", guard.Call{Method: "tools/call", ToolName: "q", Arguments: []byte(`{"query":"select * from users where 1=1"}`), Tool: ro, Client: cl}, "big-query", "approve"},
		{"has guards absence", guard.Call{Method: "tools/call", ToolName: "q", Arguments: []byte(`{}`), Tool: ro, Client: cl}, "default", "allow"},
		{"annotations defaults filled in", guard.Call{Method: "tools/call", ToolName: "rm", Arguments: []byte(`{}`), Tool: tool(`{}`), Client: cl}, "destructive", "approve"},
		{"annotations as pinned", guard.Call{Method: "tools/call", ToolName: "rm", Arguments: []byte(`{}`), Tool: wr, Client: cl}, "default", "allow"},
		{"client protocol", guard.Call{Method: "tools/call", ToolName: "x", Arguments: []byte(`{}`), Tool: ro, Client: guard.ClientInfo{Name: "claude-ai", Protocol: "2024-11-05"}}, "old-client", "deny"},
		{"client name", guard.Call{Method: "tools/call", ToolName: "send", Arguments: []byte(`{}`), Tool: ro, Client: guard.ClientInfo{Name: "cursor", Protocol: "2025-11-25"}}, "claude-only", "deny"},
		{"now at noon", guard.Call{Method: "tools/call", ToolName: "deploy", Arguments: []byte(`{}`), Tool: ro, Client: cl, Time: noon}, "default", "allow"},
		{"now at night", guard.Call{Method: "tools/call", ToolName: "deploy", Arguments: []byte(`{}`), Tool: ro, Client: cl, Time: noon.Add(-9 * time.Hour)}, "night", "deny"},
		{"uri glob", guard.Call{Method: "resources/read", URI: "file:///home/me/.ssh/id_rsa", Client: cl}, "secrets", "deny"},
		{"uri glob no match", guard.Call{Method: "resources/read", URI: "file:///home/me/notes.md", Client: cl}, "default", "allow"},
		{"prompt", guard.Call{Method: "prompts/get", ToolName: "admin_shell", Arguments: []byte(`{"level":"root"}`), Client: cl}, "prompt-admin", "approve"},
		{"server request", guard.Call{Server: "untrusted", Method: "sampling/createMessage", Client: cl}, "sampling", "deny"},
		{"server request other server", guard.Call{Server: "files", Method: "sampling/createMessage", Client: cl}, "default", "allow"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := p.Decide(&tc.call)
			if v.Rule != tc.rule || v.Action != tc.act {
				t.Fatalf("got %+v, want %s by %s", v, tc.act, tc.rule)
			}
		})
	}
	v := p.Decide(&guard.Call{Method: "tools/call", ToolName: "write_file", Arguments: []byte(`{"content":"x"}`), Tool: wr, Client: cl})
	if !strings.Contains(v.Reason, "could not be evaluated") || !strings.Contains(v.Reason, "path") {
		t.Fatalf("a failed condition should say why: %q", v.Reason)
	}
}

func TestMonitorModeAllowsAndSaysWhatWouldHappen(t *testing.T) {
	const conf = `
policy:
  mode: monitor
  default: approve
  rules:
    - {name: no-rm, tool: rm, action: deny, reason: "never"}
    - {name: ok, tool: ls, action: allow}
`
	c, err := Parse([]byte(conf), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := Compile(c, nil, NewProtected("/var/lib/guard/guard.db"))
	for _, tc := range []struct {
		tool, args, rule, would string
		action                  string
	}{
		{"rm", `{}`, "no-rm", "deny", "allow"},
		{"ls", `{}`, "ok", "", "allow"},
		{"other", `{}`, "default", "approve", "allow"},
		// guard's own protection is never merely monitored.
		{"ls", `{"path":"/var/lib/guard/guard.db"}`, guard.SelfProtectionRule, "", "deny"},
	} {
		v := p.Decide(&guard.Call{Method: "tools/call", ToolName: tc.tool, Arguments: []byte(tc.args), Tool: tool(`{}`)})
		if v.Action != tc.action || v.Would != tc.would || v.Rule != tc.rule {
			t.Errorf("%s: got %+v", tc.tool, v)
		}
	}
	enforce, _ := Parse([]byte(strings.Replace(conf, "monitor", "enforce", 1)), "c.yaml")
	if Compile(c, nil, nil).Version() == Compile(enforce, nil, nil).Version() {
		t.Fatal("monitor and enforce share a policy version")
	}
}

// A condition over large arguments is bounded: one that would run for
// long is stopped, and the call is denied.
func TestConditionCostIsBounded(t *testing.T) {
	c, err := Parse([]byte(`
policy:
  default: allow
  rules:
    - {name: dup, tool: "*", when: 'args.items.exists(x, args.items.exists(y, x != y && x == y))', action: deny}
`), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := Compile(c, nil, nil)
	items := strings.Repeat(`"aaaa",`, 5000)
	big := []byte(`{"items":[` + items + `"b"]}`)
	start := time.Now()
	v := p.Decide(&guard.Call{Method: "tools/call", ToolName: "x", Arguments: big, Tool: tool(`{}`)})
	if v.Action != guard.ActionDeny || !strings.Contains(v.Reason, "could not be evaluated") {
		t.Fatalf("a condition over the cost limit: %+v", v)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the bound took effect only after %v", d)
	}
	small := []byte(`{"items":["a","b"]}`)
	if v := p.Decide(&guard.Call{Method: "tools/call", ToolName: "x", Arguments: small, Tool: tool(`{}`)}); v.Rule != "default" {
		t.Fatalf("small arguments: %+v", v)
	}
}
