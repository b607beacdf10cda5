package proxy

import (
	"bytes"
	"encoding/json"
	"sync"

	"github.com/guard-mcp/guard/wire"
)

// What guard's HTTP front and its HTTP upstreams share about the
// Streamable HTTP transport.

// cutLines takes the complete lines out of buf (copies, without their
// newlines) and returns them with what is left of buf.
func cutLines(buf []byte) (lines [][]byte, rest []byte) {
	for {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			break
		}
		lines = append(lines, append([]byte(nil), buf[:i]...))
		buf = buf[i+1:]
	}
	if len(buf) == 0 {
		buf = nil
	}
	return lines, buf
}

// oneLine returns a message as one line, as the relay reads them: a
// pretty-printed body (or an SSE event whose data spans several lines)
// loses the whitespace between its tokens, nothing else, since a JSON
// string cannot hold a raw newline. Text that is not JSON is returned as
// is, for the relay to refuse.
func oneLine(b []byte) []byte {
	if bytes.IndexByte(b, '\n') < 0 && bytes.IndexByte(b, '\r') < 0 {
		return b
	}
	var out bytes.Buffer
	if json.Compact(&out, b) != nil {
		return b
	}
	return out.Bytes()
}

// requestName is the name a 2026-07-28 request carries in its Mcp-Name
// header: the tool's or prompt's name, or the resource's URI ("" for other
// methods).
func requestName(m wire.Message) string {
	var name string
	switch m.Method {
	case "tools/call", "prompts/get":
		name, _ = wire.String(wire.ParamsMember(m.Params, "name"))
	case "resources/read":
		name, _ = wire.String(wire.ParamsMember(m.Params, "uri"))
	}
	return name
}

// toolHeaders keeps which arguments of each tool a 2026-07-28 request
// mirrors in Mcp-Param-* headers (x-mcp-header in the inputSchema), as
// learned from the tools lists that pass. Safe for concurrent use.
type toolHeaders struct {
	mu sync.Mutex
	m  map[string]map[string]string // tool → argument → header name
}

// learn reads a response that may be a tools/list result.
func (t *toolHeaders) learn(line []byte, m wire.Message) {
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

// of returns a tool's mirrored arguments.
func (t *toolHeaders) of(tool string) map[string]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[tool]
}
