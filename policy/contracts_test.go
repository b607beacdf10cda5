package policy

import (
	"strings"
	"testing"

	guard "github.com/guard-mcp/guard"
)

func TestContracts(t *testing.T) {
	def := func(in, out string) *guard.Tool {
		d := `{"name":"t","inputSchema":` + in
		if out != "" {
			d += `,"outputSchema":` + out
		}
		return &guard.Tool{Name: "t", Pin: "sha256:" + in + out, Def: []byte(d + `}`)}
	}
	email := def(`{"type":"object","properties":{"to":{"type":"string","format":"email"}}}`, "")
	for _, tc := range []struct {
		assert bool
		want   string
	}{{false, ""}, {true, "/to"}} {
		v, err := NewContracts(tc.assert).Arguments(email, &guard.Call{Arguments: []byte(`{"to":"not an address"}`)})
		if err != nil || (tc.want == "") != (v == "") || !strings.Contains(v, tc.want) {
			t.Errorf("assert formats %v: %q %v", tc.assert, v, err)
		}
	}
	c := NewContracts(false)
	if _, err := c.Arguments(def(`{"type":7}`, ""), &guard.Call{Arguments: []byte(`{}`)}); err == nil || !strings.Contains(err.Error(), "inputSchema of t") {
		t.Errorf("a schema that does not compile: %v", err)
	}
	if _, err := c.Arguments(def(`{"$ref":"https://example.com/s.json"}`, ""), &guard.Call{Arguments: []byte(`{}`)}); err == nil {
		t.Error("a remote reference compiled")
	}
	call := &guard.Call{Arguments: []byte(`{"n":"x","extra":1}`)}
	v, err := c.Arguments(def(`{"type":"object","additionalProperties":false,"required":["m"],"properties":{"n":{"type":"integer"}}}`, ""), call)
	if err != nil || !strings.Contains(v, "/n: ") || !strings.Contains(v, `"m"`) || !strings.Contains(v, `"extra"`) {
		t.Errorf("violations: %q %v", v, err)
	}
	if call.Args == nil {
		t.Error("the decoded arguments were not kept for the conditions")
	}
	out := def(`{"type":"object"}`, `{"type":"object","required":["count"],"properties":{"count":{"type":"integer"}}}`)
	for _, tc := range []struct{ result, want string }{
		{`{"content":[],"structuredContent":{"count":3}}`, ""},
		{`{"content":[],"structuredContent":{"count":"3"}}`, "/count"},
		{`{"content":[{"type":"text","text":"3"}]}`, "no structuredContent"},
	} {
		if v, err := c.Result(out, []byte(tc.result)); err != nil || (tc.want == "") != (v == "") || !strings.Contains(v, tc.want) {
			t.Errorf("%s: %q %v", tc.result, v, err)
		}
	}
	if v, err := c.Result(def(`{"type":"object"}`, ""), []byte(`{"content":[]}`)); v != "" || err != nil {
		t.Errorf("no outputSchema: %q %v", v, err)
	}
}
