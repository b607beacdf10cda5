// Package mcpheader holds what the 2026-07-28 revision's HTTP headers
// mirror of a request's body: the name a request carries in Mcp-Name, and
// which arguments of each tool travel in Mcp-Param-* headers, as the tools
// lists that pass declare them (x-mcp-header). Guard's HTTP front checks
// them on the way in; its HTTP upstreams set them on the way out.
package mcpheader

import (
	"bytes"
	"encoding/json"
	"sync"

	"github.com/guard-mcp/guard/wire"
)

// Name is the name a 2026-07-28 request carries in its Mcp-Name
// header: the tool's or prompt's name, or the resource's URI ("" for other
// methods).
func Name(m wire.Message) string {
	var name string
	switch m.Method {
	case "tools/call", "prompts/get":
		name, _ = wire.String(wire.ParamsMember(m.Params, "name"))
	case "resources/read":
		name, _ = wire.String(wire.ParamsMember(m.Params, "uri"))
	}
	return name
}

// Tools keeps which arguments of each tool a 2026-07-28 request
// mirrors in Mcp-Param-* headers (x-mcp-header in the inputSchema), as
// learned from the tools lists that pass. Safe for concurrent use.
type Tools struct {
	mu sync.Mutex
	m  map[string]map[string]string // tool → argument → header name
}

// Learn reads a response that may be a tools/list result.
func (t *Tools) Learn(line []byte, m wire.Message) {
	if m.Kind != wire.KindResponse || m.Result == nil || !bytes.Contains(line, []byte(`"x-mcp-header"`)) {
		return
	}
	var page struct {
		Tools []struct {
			Name        string `json:"name"`
			InputSchema struct {
				Properties map[string]struct {
					Header string `json:"x-mcp-header"`
				} `json:"properties"`
			} `json:"inputSchema"`
		} `json:"tools"`
	}
	if json.Unmarshal(m.Result, &page) != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]map[string]string{}
	}
	for _, tool := range page.Tools {
		args := map[string]string{}
		for arg, p := range tool.InputSchema.Properties {
			if p.Header != "" {
				args[arg] = p.Header
			}
		}
		t.m[tool.Name] = args
	}
}

// Of returns a tool's mirrored arguments.
func (t *Tools) Of(tool string) map[string]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[tool]
}
