package policy

import (
	"errors"
	"slices"
	"strings"
	"testing"

	guard "github.com/guard-mcp/guard"
)

const approversConfig = `
servers:
  db:
    approvers: {users: [alice@example.com, bob]}
policy:
  default: approve
  rules:
    - name: prod-writes
      server: db
      tool: "write_*"
      action: approve
      approvers: {groups: [sre], users: [carol@example.com], count: 2}
    - {name: reads, server: db, tool: "read_*", action: allow}
`

func TestApproversParsedAndCarriedByTheVerdict(t *testing.T) {
	c, err := Parse([]byte(approversConfig), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := c.Policy.Rules[0]
	if !slices.Equal(r.Approvers.Groups, []string{"sre"}) || !slices.Equal(r.Approvers.Users, []string{"carol@example.com"}) || r.Approvers.Count != 2 {
		t.Fatalf("rule approvers: %+v", r.Approvers)
	}
	p := Compile(c, nil, nil)
	for _, tc := range []struct {
		server, tool string
		want         guard.Approvers
	}{
		{"db", "write_rows", r.Approvers}, // the rule's
		{"db", "drop_table", guard.Approvers{Users: []string{"alice@example.com", "bob"}, Count: 1}}, // the server's, by the default
		{"files", "write_file", guard.Approvers{}},                                                   // neither
		{"db", "read_rows", guard.Approvers{}},                                                       // allowed: no approvers
	} {
		v := p.Decide(&guard.Call{Server: tc.server, Method: "tools/call", ToolName: tc.tool})
		if !slices.Equal(v.Approvers.Groups, tc.want.Groups) || !slices.Equal(v.Approvers.Users, tc.want.Users) || v.Approvers.Count != tc.want.Count {
			t.Errorf("%s/%s: got %+v, want %+v", tc.server, tc.tool, v.Approvers, tc.want)
		}
	}
	// A call held for its tool's review is not held under approvers.
	v := p.Decide(&guard.Call{Server: "db", Method: "tools/call", ToolName: "write_rows",
		Review: &guard.Review{State: guard.ReviewPending}})
	if v.Rule != guard.ToolReviewRule || !v.Approvers.IsZero() {
		t.Fatalf("tool review: %+v", v)
	}
	// The approvers are part of the policy's version: an approval given
	// under one set is not used under another.
	c2, err := Parse([]byte(strings.Replace(approversConfig, "count: 2", "count: 3", 1)), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if Compile(c2, nil, nil).Version() == p.Version() {
		t.Fatal("the policy version does not change with the approvers")
	}
}

func TestApproversErrorsNameFileAndLine(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		line int
		want string
	}{
		{"policy:\n  rules:\n    - {name: a, action: approve, approvers: {count: 0}}\n", 3, `"0" is not a positive whole number`},
		{"policy:\n  rules:\n    - {name: a, action: approve, approvers: {count: two}}\n", 3, "not a positive whole number"},
		{"policy:\n  rules:\n    - name: a\n      action: allow\n      approvers: {groups: [sre]}\n", 3, "approvers apply to action approve only"},
		{"policy:\n  rules:\n    - name: a\n      action: approve\n      approvers:\n        users: [alice]\n        count: 2\n", 6, "count 2, but only 1 users may approve"},
		{"policy:\n  rules:\n    - name: a\n      action: approve\n      approvers: {grups: [sre]}\n", 5, `unknown key "grups"`},
		{"policy:\n  rules:\n    - name: a\n      action: approve\n      approvers: {groups: sre}\n", 5, "groups: expected a list"},
		{"policy:\n  rules:\n    - name: a\n      action: approve\n      approvers:\n        users: [alice, '']\n", 6, "users: expected a name"},
		{"policy:\n  rules:\n    - name: a\n      action: approve\n      approvers:\n        groups: [sre, sre]\n", 6, `"sre" is listed twice`},
		{"servers:\n  db:\n    approvers: {count: -1}\n", 3, "not a positive whole number"},
	} {
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

// A change of a rule's or a server's approvers is a change of the
// configuration, named as such; NeedVerified says where approvals take
// verified identities only.
func TestApproversInChangesAndNeedVerified(t *testing.T) {
	cur, err := Parse([]byte(approversConfig), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	next, err := Parse([]byte(strings.NewReplacer("count: 2", "count: 3", "users: [alice@example.com, bob]", "users: [alice@example.com]").
		Replace(approversConfig)), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(Changes(cur, next, nil, nil, false), "\n")
	for _, want := range []string{`rule "prod-writes" changed (c.yaml:8): approve tools/call server=db tool=write_* needing 3 approvals from members of sre, or carol@example.com, was approve tools/call server=db tool=write_* needing 2 approvals`,
		"servers.db: approvers changed"} {
		if !strings.Contains(got, want) {
			t.Errorf("changes: missing %q in\n%s", want, got)
		}
	}
	var where []string
	for _, e := range cur.NeedVerified() {
		where = append(where, e.Error())
	}
	want := []string{`c.yaml:8: rule "prod-writes" holds calls for 2 approvals from members of sre, or carol@example.com, each a verified identity`,
		`c.yaml:4: server "db" holds calls for 1 approval from alice@example.com, bob, each a verified identity`}
	if !slices.Equal(where, want) {
		t.Fatalf("need verified:\n%s\nwant\n%s", strings.Join(where, "\n"), strings.Join(want, "\n"))
	}
}
