package policy

import (
	"fmt"
	"time"

	"cel.dev/cel-go/cel"
	guard "github.com/guard-mcp/guard"
)

// conditions compiles the `when:` expressions of rules. A condition sees:
//
//	server       string  the server's name
//	tool         string  the tool's name ("" for other methods)
//	method       string  the JSON-RPC method
//	uri          string  the resource of a resources/read ("" otherwise)
//	args         map     the call's arguments (a prompt's, for prompts/get)
//	annotations  map     the tool's hints as pinned, defaults filled in
//	client       map     name, version, protocol
//	user         map     sub, email (strings), groups (a list): who the
//	                     front authenticated; "", "" and [] where no one did
//	now          timestamp
type conditions struct {
	env *cel.Env
}

func newConditions() (*conditions, error) {
	env, err := cel.NewEnv(
		cel.Variable("server", cel.StringType),
		cel.Variable("tool", cel.StringType),
		cel.Variable("method", cel.StringType),
		cel.Variable("uri", cel.StringType),
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("annotations", cel.MapType(cel.StringType, cel.BoolType)),
		cel.Variable("client", cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable("user", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("now", cel.TimestampType),
	)
	if err != nil {
		return nil, fmt.Errorf("conditions: %w", err)
	}
	return &conditions{env: env}, nil
}

// condition is a compiled `when:` expression, in two forms: one that
// counts its cost and stops at costLimit, for arguments large enough that
// an expression over them (a comprehension within a comprehension) could
// run long, and one that does not count, for everything else.
type condition struct {
	fast, bounded cel.Program
}

// costLimit bounds the evaluation of a condition over large arguments.
const costLimit = 1_000_000

// boundedFrom is the size of arguments from which conditions count cost.
const boundedFrom = 2 << 10

// compile checks an expression and prepares it for evaluation. It must be
// a boolean expression over the variables above.
func (c *conditions) compile(expr string) (*condition, error) {
	ast, iss := c.env.Compile(expr)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	if ast.OutputType() != cel.BoolType && ast.OutputType() != cel.DynType {
		return nil, fmt.Errorf("the condition is a %s, not a boolean", ast.OutputType())
	}
	fast, err := c.env.Program(ast, cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, err
	}
	bounded, err := c.env.Program(ast, cel.EvalOptions(cel.OptOptimize), cel.CostLimit(costLimit))
	if err != nil {
		return nil, err
	}
	return &condition{fast: fast, bounded: bounded}, nil
}

// activation holds what a condition sees of one call, built on first use
// and shared by the rules evaluated for it.
type activation struct {
	call *guard.Call
	now  time.Time
	vars map[string]any
	err  error
}

func (a *activation) get() (map[string]any, error) {
	if a.vars != nil || a.err != nil {
		return a.vars, a.err
	}
	v, err := decodedArgs(a.call)
	if err != nil {
		a.err = fmt.Errorf("arguments: %w", err)
		return nil, a.err
	}
	args, ok := v.(map[string]any)
	if !ok {
		a.err = fmt.Errorf("arguments: not an object")
		return nil, a.err
	}
	ann := map[string]bool{}
	if a.call.Tool != nil {
		ro, de, id, ow := a.call.Tool.Annotations.Effective()
		ann = map[string]bool{"readOnlyHint": ro, "destructiveHint": de, "idempotentHint": id, "openWorldHint": ow}
	}
	a.vars = map[string]any{
		"server":      a.call.Server,
		"tool":        a.call.ToolName,
		"method":      a.call.Method,
		"uri":         a.call.URI,
		"args":        args,
		"annotations": ann,
		"client": map[string]string{
			"name": a.call.Client.Name, "version": a.call.Client.Version, "protocol": a.call.Client.Protocol,
		},
		"user": map[string]any{
			"sub": a.call.User.Subject, "email": a.call.User.Email, "groups": groupList(a.call.User.Groups),
		},
		"now": a.now,
	}
	return a.vars, nil
}

// eval runs a compiled condition. An error (a missing argument, a type
// mismatch, the cost limit) is returned: the caller fails closed.
func eval(cond *condition, a *activation) (bool, error) {
	vars, err := a.get()
	if err != nil {
		return false, err
	}
	prg := cond.fast
	if len(a.call.Arguments) >= boundedFrom {
		prg = cond.bounded
	}
	out, _, err := prg.Eval(vars)
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("the condition gave %v, not a boolean", out.Value())
	}
	return b, nil
}

// groupList is a caller's groups as a condition sees them: a list, empty
// (never null) where no one authenticated.
func groupList(g []string) []string {
	if g == nil {
		return []string{}
	}
	return g
}
