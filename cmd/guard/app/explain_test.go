package app

import (
	"encoding/json"
	"fmt"
	"testing"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/config"
	"github.com/guard-mcp/guard/policy"
)

// The tools page says what the policy does with a tool's calls whatever
// their arguments: a tool held by the default is "held for approval", and
// a rule with a condition on an argument is named as deciding only when
// the condition holds, not as denying the tool because an empty call
// fails its test.
func TestToolsPageDescribesHeldToolsAsHeld(t *testing.T) {
	c, err := config.Parse(fmt.Appendf(nil, demoConfig, "50s", "10m"), "demo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := policy.Compile(c, nil, nil)
	for _, tc := range []struct{ tool, annotations, want string }{
		{"send_message", `{"readOnlyHint":false,"destructiveHint":false,"openWorldHint":true}`,
			"when its condition holds, denied by no-outside-messages: messages leave the company only with a person's say-so; " +
				"otherwise held for approval by default: open-world write (openWorldHint true)"},
		{"delete_note", `{"destructiveHint":true}`, "held for approval by default: destructive tool (destructiveHint true)"},
		{"list_notes", `{"readOnlyHint":true}`, "allowed by default: read-only tool (readOnlyHint true)"},
	} {
		tool := guard.Tool{Server: "notes", Name: tc.tool}
		if err := json.Unmarshal([]byte(tc.annotations), &tool.Annotations); err != nil {
			t.Fatal(err)
		}
		call := &guard.Call{Server: "notes", Method: "tools/call", ToolName: tc.tool, Arguments: []byte("{}"),
			Args: map[string]any{}, Tool: &tool}
		if got := policyText(p, call); got != tc.want {
			t.Errorf("%s: %q\nwant %q", tc.tool, got, tc.want)
		}
	}
}
