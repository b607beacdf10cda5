package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/guard-mcp/guard/e2e/guardtest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// connectExample runs guard's example server behind guard with a go-sdk
// client.
func (e *env) connectExample(ctx context.Context) *mcp.ClientSession {
	e.t.Helper()
	return e.connect(ctx, mcp.NewClient(&mcp.Implementation{Name: "replayer", Version: "2"}, nil), "2025-11-25", nil, "notes", guardBin, "example-server")
}

// connect runs serverCmd behind guard run as server name (with env added
// to guard's environment), connects client in the given revision, lists
// the tools, and closes the session when the test ends.
func (e *env) connect(ctx context.Context, client *mcp.Client, version string, env []string, name string, serverCmd ...string) *mcp.ClientSession {
	e.t.Helper()
	argv := e.wrap(name, serverCmd...)
	cmd := exec.Command(argv[0], argv[1:]...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stderr = os.Stderr
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { cs.Close() })
	if _, err := cs.ListTools(ctx, nil); err != nil {
		e.t.Fatal(err)
	}
	return cs
}

func callText(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (string, bool) {
	t.Helper()
	r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return r.Content[0].(*mcp.TextContent).Text, r.IsError
}

// Monitor mode records what enforcement would do and allows everything;
// policy test decides a call described on the command line; policy replay
// runs another policy over the calls recorded through real sessions.
func TestMonitorTestAndReplay(t *testing.T) {
	e := newEnv(t, `
policy:
  mode: monitor
  default: annotations
  rules:
    - {name: no-secret-notes, tool: write_note, when: 'args.title.startsWith("secret")', action: deny, reason: "no secret notes"}
`)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs := e.connectExample(ctx)
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"echo", map[string]any{"text": "a"}},
		{"echo", map[string]any{"text": "b"}},
		{"write_note", map[string]any{"title": "plan", "body": "ship"}},
		{"write_note", map[string]any{"title": "secret-plan", "body": "x"}},
		{"delete_note", map[string]any{"title": "plan"}},
		{"send_message", map[string]any{"to": "ops@example.com", "message": "hi"}},
	} {
		// Monitor mode: every call reaches the server.
		if text, isErr := callText(t, cs, c.tool, c.args); isErr {
			t.Fatalf("%s was not allowed in monitor mode: %s", c.tool, text)
		}
	}
	out, _ := e.guard("audit", "query", "--format", "jsonl", "--tool", "write_note")
	if !strings.Contains(out, `monitor mode: enforcement would deny (no-secret-notes): no secret notes`) {
		t.Fatalf("the audit does not say what enforcement would have done:\n%s", out)
	}

	out, code := e.guard("policy", "test", "--call", `{"server":"notes","tool":"write_note","args":{"title":"secret-x","body":"y"}}`)
	if code != 0 || !strings.Contains(out, "decision: allow") || !strings.Contains(out, "monitor mode: enforcement would deny") ||
		!strings.Contains(out, "rule:     no-secret-notes ("+e.cfg+":6)") || !strings.Contains(out, `the client reads: Denied by policy rule "no-secret-notes": no secret notes`) {
		t.Fatalf("policy test (%d):\n%s", code, out)
	}
	out, code = e.guard("policy", "test", "--call", `{"server":"notes","tool":"write_note","args":{"title":7}}`)
	if code != 0 || !strings.Contains(out, "rule:     guard-input-schema (built in)") {
		t.Fatalf("policy test of invalid arguments (%d):\n%s", code, out)
	}
	if _, code := e.guard("policy", "test", "--call", `{"server":"notes","tol":"x"}`); code != 2 {
		t.Fatalf("a misspelt --call must be a usage error, got %d", code)
	}

	// Replay an enforcing policy that allows writes and holds echo.
	newCfg := filepath.Join(e.dir, "new.yaml")
	e.writeConfig(newCfg, "db: "+e.db+"\npolicy:\n  rules:\n    - {name: hold-echo, tool: echo, action: approve}\n    - {name: writes, tool: write_note, action: allow}\n")
	cmd := exec.Command(guardBin, "policy", "replay", "--since", "1h", "--config", newCfg)
	b, err := cmd.CombinedOutput()
	out = string(b)
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, out)
	}
	for _, want := range []string{
		"replayed 6 calls",
		"same decision:      3",       // delete_note and send_message held, write plan allowed
		"different decision: 3",       // two echoes, the secret note
		"allowed → held: 2",           // echo was allowed by annotations
		"denied → allowed: 1",         // the secret note (monitored deny)
		"notes/echo {\"text\":\"a\"}", // an example
		"now rule hold-echo",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("replay output lacks %q:\n%s", want, out)
		}
	}
}

// Secrets in arguments and results are masked in the audit log; with
// redact_results they are masked in what the client reads too.
func TestSecretsMasked(t *testing.T) {
	const key = "AKIAIOSFODNN7EXAMPLE"
	for _, results := range []bool{false, true} {
		conf := "policy: {default: allow}\nredact: {patterns: ['corp-[0-9]{6}']}\n"
		if results {
			conf += "redact_results: true\n"
		}
		e := newEnv(t, conf)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cs := e.connectExample(ctx)
		text, _ := callText(t, cs, "echo", map[string]any{"text": "key " + key + " id corp-123456"})
		cancel()
		if results != !strings.Contains(text, key) || results != strings.Contains(text, "[REDACTED:aws_access_key]") {
			t.Errorf("redact_results %v: the client read %q", results, text)
		}
		out, _ := e.guard("audit", "query", "--format", "jsonl", "--tool", "echo")
		if strings.Contains(out, key) || strings.Contains(out, "corp-123456") ||
			!strings.Contains(out, "[REDACTED:aws_access_key]") || !strings.Contains(out, "[REDACTED:pattern]") {
			t.Errorf("redact_results %v: the audit log holds:\n%s", results, out)
		}
	}
}

// Rules decide more than tool calls: resources/read by URI, prompts/get by
// name, and the server's own sampling requests, against the go-sdk
// conformance server.
func TestRulesForOtherMethods(t *testing.T) {
	e := newEnv(t, `
policy:
  default: allow
  rules:
    - {name: no-static, method: resources/read, uri: "test://static-*", action: deny, reason: "not that one"}
    - {name: no-simple-prompt, method: prompts/get, tool: "test_simple_*", action: deny}
    - {name: no-sampling, method: sampling/createMessage, server: conformance, action: deny, reason: "no model calls"}
`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var sampled atomic.Bool
	client := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, &mcp.ClientOptions{
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			sampled.Store(true)
			return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "ok"}}, nil
		},
	})
	cs := e.connect(ctx, client, "2025-11-25", nil, "conformance", guardtest.EverythingServer(t))
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "test://static-text"}); err == nil ||
		!strings.Contains(err.Error(), `Denied by policy rule "no-static": not that one`) {
		t.Errorf("resources/read: %v", err)
	}
	if _, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "test_simple_prompt"}); err == nil || !strings.Contains(err.Error(), `"no-simple-prompt"`) {
		t.Errorf("prompts/get: %v", err)
	}
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "test_sampling", Arguments: map[string]any{"prompt": "hi"}})
	if sampled.Load() || (err == nil && !r.IsError) {
		t.Errorf("the server's sampling request reached the client: %v %v", r, err)
	}
	out, _ := e.guard("audit", "query", "--format", "jsonl", "--decision", "denied")
	for _, m := range []string{"resources/read", "prompts/get", "sampling/createMessage"} {
		if !strings.Contains(out, `"method":"`+m+`"`) {
			t.Errorf("no denied %s in the audit:\n%s", m, out)
		}
	}
}

// Rate limits are shared by the guard processes on one database.
func TestRateLimitAcrossProcesses(t *testing.T) {
	e := newEnv(t, "limits:\n  - {tool: echo, rate: 3/hour}\npolicy: {default: allow}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b := e.connectExample(ctx), e.connectExample(ctx)
	var limited []string
	for i, cs := range []*mcp.ClientSession{a, b, a, b} {
		text, isErr := callText(t, cs, "echo", map[string]any{"text": "x"})
		if isErr {
			limited = append(limited, text)
			if i != 3 {
				t.Fatalf("call %d was limited: %s", i, text)
			}
		}
	}
	if len(limited) != 1 || !strings.HasPrefix(limited[0], "Rate limit: echo allows 3 calls per hour; retry in ") {
		t.Fatalf("limited: %q", limited)
	}
	if text, isErr := callText(t, a, "list_notes", map[string]any{}); isErr {
		t.Fatalf("another tool is not limited: %s", text)
	}
}
