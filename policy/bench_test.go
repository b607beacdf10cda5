package policy

import (
	"slices"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
)

// benchTool has ten typed properties.
var benchDef = []byte(`{"name":"create_ticket","description":"Creates a ticket.","inputSchema":{"type":"object","additionalProperties":false,
"required":["title","project","priority"],"properties":{
"title":{"type":"string","maxLength":200},"body":{"type":"string"},"project":{"type":"string","pattern":"^[A-Z]{2,5}$"},
"priority":{"type":"integer","minimum":1,"maximum":5},"labels":{"type":"array","items":{"type":"string"}},
"assignee":{"type":"string"},"due":{"type":"string","format":"date"},"estimate":{"type":"number","minimum":0},
"private":{"type":"boolean"},"parent":{"type":["integer","null"]}}},"annotations":{"destructiveHint":false,"openWorldHint":true}}`)

var benchArgs = []byte(`{"title":"Login fails on Safari","body":"Steps: open the page, sign in.","project":"WEB","priority":2,
"labels":["bug","auth"],"assignee":"alice","due":"2026-12-01","estimate":1.5,"private":false,"parent":null}`)

const benchConf = `
policy:
  default: annotations
  rules:
    - {name: no-etc, tool: write_file, when: 'args.path.startsWith("/etc")', action: deny}
    - {name: huge, tool: "*", when: 'has(args.body) && size(args.body) > 10000', action: approve}
    - {name: p1, tool: create_ticket, when: 'args.priority == 1 && !args.private', action: approve}
    - {name: old-clients, tool: "*", when: 'client.protocol < "2025-03-26"', action: deny}
    - {name: tickets, tool: create_ticket, when: 'args.project in ["WEB", "API"] && annotations.openWorldHint', action: allow}
`

// BenchmarkDecideAndValidate is one tool call's decision: input
// validation against a 10-property schema, then 5 rules with conditions.
func BenchmarkDecideAndValidate(b *testing.B) {
	c, err := Parse([]byte(benchConf), "c.yaml")
	if err != nil {
		b.Fatal(err)
	}
	p := Compile(c, nil, NewProtected("/var/lib/guard/guard.db", "/etc/guard/guard.yaml"))
	contracts := NewContracts(false)
	tool := &guard.Tool{Name: "create_ticket", Def: benchDef, Pin: "sha256:bench"}
	ro := false
	tool.Annotations.DestructiveHint = &ro
	b.ReportAllocs()
	var lat []time.Duration
	for b.Loop() {
		t0 := time.Now()
		call := &guard.Call{Server: "tracker", Method: "tools/call", ToolName: "create_ticket", Arguments: benchArgs,
			Tool: tool, Client: guard.ClientInfo{Name: "claude-ai", Version: "1", Protocol: "2025-11-25"}}
		v, err := contracts.Arguments(tool, call)
		if err != nil || v != "" {
			b.Fatalf("%q %v", v, err)
		}
		if d := p.Decide(call); d.Rule != "tickets" {
			b.Fatalf("%+v", d)
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
}
