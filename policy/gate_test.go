package policy

import (
	"slices"
	"testing"
)

// Changes names what alters decisions, and nothing else: moved lines and
// settings read at start are no change; learned rules count unless guard
// wrote them.
func TestChanges(t *testing.T) {
	parseT := func(src string) *Config {
		c, err := parse([]byte(src), "guard.yaml", func(string) string { return "" }, false)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	cur := parseT("policy:\n  rules:\n    - {name: a, tool: x, action: deny}\nservers: {files: {trust_annotations: true}}\n")
	moved := parseT("# a comment\nui: {listen: 127.0.0.1:9999}\napproval: {wait: 5s}\npolicy:\n  rules:\n    - {name: a, tool: x, action: deny}\nservers: {files: {trust_annotations: true}}\n")
	if got := Changes(cur, moved, nil, nil, true); len(got) != 0 {
		t.Errorf("a comment, ui and approval.wait: %q", got)
	}
	weaker := parseT("policy:\n  default: allow\n  mode: monitor\n  rules:\n    - {name: a, tool: x, action: allow}\n    - {name: b, tool: y, action: allow}\nservers: {files: {trust_annotations: false}}\nlimits: [{rate: 1/s}]\n")
	want := []string{
		"policy.default: annotations → allow",
		"policy.mode: enforce → monitor",
		`rule "a" changed (guard.yaml:5): allow tools/call server=* tool=x, was deny tools/call server=* tool=x`,
		`rule "b" added (guard.yaml:6): allow tools/call server=* tool=y`,
		"limits changed",
		"servers.files: trust_annotations changed",
	}
	if got := Changes(cur, weaker, nil, nil, true); !slices.Equal(got, want) {
		t.Errorf("got\n%q\nwant\n%q", got, want)
	}
	learned := []Rule{{Name: "approved-x", Server: "*", Tool: "x", Method: "tools/call", Action: "allow"}}
	if got := Changes(cur, cur, nil, learned, false); len(got) != 0 {
		t.Errorf("rules guard learned: %q", got)
	}
	if got := Changes(cur, cur, nil, learned, true); len(got) != 1 {
		t.Errorf("learned rules guard did not write: %q", got)
	}
}
