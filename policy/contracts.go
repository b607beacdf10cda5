package policy

import (
	"encoding/json"
	"fmt"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/policy/schema"
	"github.com/guard-mcp/guard/proxy/wire"
)

// Contracts validates arguments against a tool's pinned inputSchema and
// final results against its outputSchema. Each schema is compiled once per
// pin. Safe for concurrent use.
type Contracts struct {
	in, out *schema.Cache
}

// NewContracts returns an empty set of compiled schemas.
func NewContracts() *Contracts {
	return &Contracts{in: schema.NewCache(), out: schema.NewCache()}
}

// Arguments returns how args break the tool's inputSchema, or "". An error
// says the schema cannot be compiled (the caller fails closed).
func (c *Contracts) Arguments(tool *guard.Tool, args []byte) (string, error) {
	raw := wire.ParamsMember(tool.Def, "inputSchema")
	if len(raw) == 0 {
		return "", nil
	}
	s, err := c.in.Compile(tool.Pin, raw)
	if err != nil {
		return "", fmt.Errorf("inputSchema of %s: %w", tool.Name, err)
	}
	return schema.Summary(s.Validate(args)), nil
}

// Result returns how a tools/call result breaks the tool's outputSchema,
// or "" (also when the tool declares none). A tool with an outputSchema
// must return structuredContent.
func (c *Contracts) Result(tool *guard.Tool, result []byte) (string, error) {
	raw := wire.ParamsMember(tool.Def, "outputSchema")
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	s, err := c.out.Compile(tool.Pin, raw)
	if err != nil {
		return "", fmt.Errorf("outputSchema of %s: %w", tool.Name, err)
	}
	sc := wire.ParamsMember(result, "structuredContent")
	if len(sc) == 0 || string(sc) == "null" {
		return "the tool declares an outputSchema but returned no structuredContent", nil
	}
	return schema.Summary(s.Validate(json.RawMessage(sc))), nil
}
