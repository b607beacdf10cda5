package app

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// DemoOptions are guard demo's flags.
type DemoOptions struct {
	UI      string        // --ui: the approval UI's address
	Dir     string        // --dir: the demo's directory ("": a new temporary one)
	Wait    time.Duration // --wait: approval.wait
	Timeout time.Duration // --timeout: approval.timeout
	Stay    bool          // --stay: keep the UI open after the tour
}

// Demo is guard demo: the example server behind guard, the UI, and a
// scripted client.
func (m *Main) Demo(ctx context.Context, o DemoOptions) int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(m.Stderr, "guard demo: %v\n", err)
		return ExitFailure
	}
	d := o.Dir
	if d == "" {
		if d, err = os.MkdirTemp("", "guard-demo-"); err != nil {
			fmt.Fprintf(m.Stderr, "guard demo: %v\n", err)
			return ExitFailure
		}
		defer os.RemoveAll(d)
	}
	cfgPath := filepath.Join(d, "guard.yaml")
	dbPath := filepath.Join(d, "guard.db")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(demoConfig, o.Wait.String(), o.Timeout.String())), 0o600); err != nil {
		fmt.Fprintf(m.Stderr, "guard demo: %v\n", err)
		return ExitFailure
	}
	token, err := uiToken(d)
	if err != nil {
		fmt.Fprintf(m.Stderr, "guard demo: %v\n", err)
		return ExitFailure
	}
	out := m.Stdout
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }

	cmd := exec.Command(self, "run", "--config", cfgPath, "--db", dbPath, "--name", "notes", "--ui", o.UI, "--", self, "example-server")
	cmd.Stderr = m.Stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "guard-demo", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		fmt.Fprintf(m.Stderr, "guard demo: %v\n", err)
		return ExitFailure
	}
	defer cs.Close()

	say("guard demo: the example notes server, wrapped by guard.")
	say("")
	// guard run has tried to serve the UI before it answered: its record
	// says where it serves (a port 0 chosen), or that it does not yet.
	if served, err := m.servedUI(ctx, dbPath, ""); err == nil {
		say("  Approval UI:  %s", uiURL("", served, token))
		say("  Open it now: a call will wait for you there.")
	} else {
		say("  Approval UI:  not served yet: %s is in use (another guard?); it is served there once free,", o.UI)
		say("                or run guard demo --ui 127.0.0.1:0 for an address of its own.")
	}
	say("  Database:     %s   (guard audit query --db %s)", dbPath, dbPath)
	say("")
	call := func(step, tool string, args map[string]any, why string) {
		say("%s %s %s", step, tool, compactJSON(args))
		say("   %s", why)
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		switch {
		case err != nil:
			say("   → error: %v", err)
		case res.IsError:
			say("   → refused: %s", contentText(res))
		default:
			say("   → ok: %s", contentText(res))
		}
		say("")
	}
	if _, err := cs.ListTools(ctx, nil); err != nil {
		fmt.Fprintf(m.Stderr, "guard demo: %v\n", err)
		return ExitFailure
	}
	call("1.", "list_notes", map[string]any{}, "read-only (readOnlyHint): allowed by the annotations default")
	call("2.", "write_note", map[string]any{"title": "plan"}, "no body: the arguments break the tool's inputSchema, so the server never sees them")
	call("3.", "send_message", map[string]any{"to": "someone@elsewhere.org", "message": "hello"}, "denied by the rule no-outside-messages (a CEL condition on args.to)")
	call("4.", "delete_note", map[string]any{"title": "welcome"}, fmt.Sprintf("destructive: held for a person. Approve or deny it in the UI: the call waits %s for you "+
		"(approval.wait), then its client is told to retry; the hold stays open %s from now (approval.timeout), "+
		"and once approved, the same call made again passes.", guard.HumanDuration(o.Wait), guard.HumanDuration(o.Timeout)))
	call("5.", "send_message", map[string]any{"to": "ops@example.com", "message": "the plan is ready"}, "an open-world write: held as well; or not, if you chose \"allow from now on\" for it")

	say("Everything above is in the audit log: the Activity page, or")
	say("  guard audit query --db %s", dbPath)
	if !o.Stay {
		return ExitOK
	}
	say("")
	say("The UI stays open until Ctrl-C.")
	<-ctx.Done()
	return ExitOK
}

// demoConfig is the tour's policy: the annotations default plus one rule
// with a condition.
const demoConfig = `# guard demo: the example server behind guard.
durability: normal
approval: {wait: %s, timeout: %s}
policy:
  default: annotations
  rules:
    - name: no-outside-messages
      tool: send_message
      when: '!args.to.endsWith("@example.com")'
      action: deny
      reason: "messages leave the company only with a person's say-so"
`

func compactJSON(v map[string]any) string {
	keys := slices.Sorted(maps.Keys(v))
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%v", k, v[k]))
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

func contentText(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}
