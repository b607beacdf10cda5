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
		c, err := parse([]byte(src), "guard.yaml", func(string) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	cur := parseT("policy:\n  rules:\n    - {name: a, tool: x, action: deny}\nservers: {files: {trust_annotations: true}}\n")
	// ui and approval are not the policy's (package config checks that
	// they change nothing here).
	moved := parseT("# a comment\npolicy:\n  rules:\n    - {name: a, tool: x, action: deny}\nservers: {files: {trust_annotations: true}}\n")
	if got := Changes(cur, moved, nil, nil, true); len(got) != 0 {
		t.Errorf("a comment: %q", got)
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

// What a listing shows is a change a person applies when it shows more
// than was accepted (review.listing, each server's too); hiding denied
// tools or not alters nothing a call meets.
func TestChangesOfTheListing(t *testing.T) {
	cur, err := Parse([]byte("servers: {files: {}}\n"), "guard.yaml")
	if err != nil {
		t.Fatal(err)
	}
	next, err := Parse([]byte("review: {listing: as_served}\npolicy: {hide_denied: false}\nservers: {files: {review: {listing: accepted}}}\n"), "guard.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"review.listing: accepted → as_served", "servers.files: review changed"}
	if got := Changes(cur, next, nil, nil, true); !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if Compile(cur, nil, nil).Version() != Compile(next, nil, nil).Version() {
		t.Error("the listing's settings changed the policy version, which binds approvals")
	}
}
