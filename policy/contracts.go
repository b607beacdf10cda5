package policy

import (
	"encoding/json"
	"errors"
	"fmt"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/policy/schema"
	"github.com/guard-mcp/guard/wire"
)

// Contracts validates arguments against a tool's pinned inputSchema and
// final results against its outputSchema. Each schema is compiled once per
// pin. Safe for concurrent use.
type Contracts struct {
	in, out *schema.Cache
}

// NewContracts returns an empty set of compiled schemas. Formats
// ("format": "email") are annotations only, unless assertFormats.
func NewContracts(assertFormats bool) *Contracts {
	var opts []schema.Option
	if assertFormats {
		opts = append(opts, schema.AssertFormats())
	}
	return &Contracts{in: schema.NewCache(opts...), out: schema.NewCache(opts...)}
}

// Arguments returns how the call's arguments break the tool's
// inputSchema, or "". An error says the schema cannot be compiled (the
// caller fails closed). The decoded arguments are kept in call.Args for
// the rules' conditions.
func (c *Contracts) Arguments(tool *guard.Tool, call *guard.Call) (string, error) {
	s, err := c.in.CompileFrom(tool.Pin, func() []byte {
		if raw := wire.ParamsMember(tool.Def, "inputSchema"); len(raw) > 0 {
			return raw
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("inputSchema of %s: %w", tool.Name, err)
	}
	if s == nil {
		return "", nil
	}
	args, err := decodedArgs(call)
	var re *schema.RangeError
	if errors.As(err, &re) {
		return schema.Violation{Path: re.Path, Message: re.Message()}.String(), nil
	}
	if err != nil {
		return "not JSON: " + err.Error(), nil
	}
	return schema.Summary(s.ValidateValue(args)), nil
}

// decodedArgs decodes a call's arguments once.
func decodedArgs(call *guard.Call) (any, error) {
	if call.Args != nil {
		return call.Args, nil
	}
	raw := call.Arguments
	if len(raw) == 0 {
		raw = []byte("{}")
	}
	v, err := schema.Decode(raw)
	if err != nil {
		return nil, err
	}
	call.Args = v
	return v, nil
}

// Result returns how a tools/call result breaks the tool's outputSchema,
// or "" (also when the tool declares none). A tool with an outputSchema
// must return structuredContent.
func (c *Contracts) Result(tool *guard.Tool, result []byte) (string, error) {
	s, err := c.out.CompileFrom(tool.Pin, func() []byte {
		if raw := wire.ParamsMember(tool.Def, "outputSchema"); len(raw) > 0 && string(raw) != "null" {
			return raw
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("outputSchema of %s: %w", tool.Name, err)
	}
	if s == nil {
		return "", nil
	}
	sc := wire.ParamsMember(result, "structuredContent")
	if len(sc) == 0 || string(sc) == "null" {
		return "the tool declares an outputSchema but returned no structuredContent", nil
	}
	return schema.Summary(s.Validate(json.RawMessage(sc))), nil
}
