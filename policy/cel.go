package policy

import (
	"fmt"
	"slices"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
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

// condition is a compiled `when:` expression, in three forms: one that
// counts its cost and stops at costLimit, for arguments large enough that
// an expression over them (a comprehension within a comprehension) could
// run long, one that does not count, for everything else, and one that
// evaluates with some variables unknown (evalWhatever), planned once
// here since a listing asks it of every rule for every tool.
type condition struct {
	fast, bounded, partial cel.Program
	// same is the outcome of evalWhatever when it is the same for every
	// tool and caller (a condition on the arguments alone); nil when
	// they decide it.
	same *outcome
}

// outcome is what evalWhatever says.
type outcome struct {
	w   whatever
	err error
}

// knownVars are the variables a condition reads of the tool and its
// caller: known when a listing is made.
var knownVars = []string{"server", "tool", "method", "uri", "annotations", "client", "user"}

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
	partial, err := c.env.Program(ast, cel.EvalOptions(cel.OptOptimize, cel.OptPartialEval))
	if err != nil {
		return nil, err
	}
	cond := &condition{fast: fast, bounded: bounded, partial: partial}
	cond.same = c.same(cond, ast)
	return cond, nil
}

// same works out once what evalWhatever says of a condition when no
// tool or caller can change it: what it gives with every variable unknown,
// when that is known (it reads none of them), and "some calls" when it
// reads the arguments or the time and none of knownVars. A reference
// overlooked here costs nothing: "some calls" never hides a tool.
func (c *conditions) same(cond *condition, ast *cel.Ast) *outcome {
	if w, err := cond.whatever(c.env.UnknownVars()); w != holdsForSome {
		return &outcome{w, err}
	}
	for _, r := range ast.NativeRep().ReferenceMap() {
		if len(r.OverloadIDs) == 0 && slices.Contains(knownVars, r.Name) {
			return nil
		}
	}
	return &outcome{w: holdsForSome}
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
	a.vars = callVars(a.call)
	a.vars["args"], a.vars["now"] = args, a.now
	return a.vars, nil
}

// callVars are the variables a condition sees of a call that do not
// depend on its arguments nor on its time, in a map with room for those
// two.
func callVars(call *guard.Call) map[string]any {
	ann := map[string]bool{}
	if call.Tool != nil {
		ro, de, id, ow := call.Tool.Annotations.Effective()
		ann = map[string]bool{"readOnlyHint": ro, "destructiveHint": de, "idempotentHint": id, "openWorldHint": ow}
	}
	vars := make(map[string]any, 10)
	vars["server"], vars["tool"], vars["method"], vars["uri"] = call.Server, call.ToolName, call.Method, call.URI
	vars["annotations"] = ann
	vars["client"] = map[string]string{
		"name": call.Client.Name, "version": call.Client.Version, "protocol": call.Client.Protocol,
	}
	vars["user"] = map[string]any{
		"sub": call.User.Subject, "email": call.User.Email, "groups": groupList(call.User.Groups),
	}
	return vars
}

// callers is what the conditions see of every call to one tool by one
// caller: the call's variables, its arguments and its time unknown, built
// on first use and shared by the rules evaluated for it. The time is
// unknown too because a listing outlives the moment it was made: a tool a
// rule denies at night must not stay hidden in the morning.
type callers struct {
	call *guard.Call
	vars cel.PartialActivation
	err  error
}

func (a *callers) get() (cel.PartialActivation, error) {
	if a.vars == nil && a.err == nil {
		a.vars, a.err = cel.PartialVars(callVars(a.call), cel.AttributePattern("args"), cel.AttributePattern("now"))
	}
	return a.vars, a.err
}

// Outcomes of a condition over every call (evalWhatever).
type whatever int

const (
	holdsForNone whatever = iota // false whatever the arguments
	holdsForAll                  // true whatever the arguments
	holdsForSome                 // the arguments (or the time) decide
	failsForAll                  // an error whatever the arguments: Decide fails closed
)

// evalWhatever says what a condition gives of every call that a (callers)
// stands for, by partial evaluation: what is known (user, client, tool,
// annotations) is evaluated, and whatever depends on the arguments or the
// time is unknown. CEL's logic makes this exact where it says known: &&
// and || give false and true whatever their unknown side, and an unknown
// wins over an error there, so an error or a value comes from the known
// variables alone and is what every call gets. err says why it fails for
// every call.
func evalWhatever(cond *condition, a *callers) (whatever, error) {
	if cond.same != nil {
		return cond.same.w, cond.same.err
	}
	vars, err := a.get()
	if err != nil {
		return holdsForSome, nil // cannot tell: the arguments may decide
	}
	return cond.whatever(vars)
}

// whatever evaluates the partial form of a condition over vars.
func (cond *condition) whatever(vars cel.PartialActivation) (whatever, error) {
	out, _, err := cond.partial.Eval(vars)
	switch {
	case out != nil && types.IsUnknown(out):
		return holdsForSome, nil
	case err != nil:
		return failsForAll, err
	}
	b, err := boolOf(out)
	switch {
	case err != nil:
		return failsForAll, err
	case b:
		return holdsForAll, nil
	}
	return holdsForNone, nil
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
	return boolOf(out)
}

// boolOf is a condition's value: a condition that gives anything but a
// boolean (its type may be dyn) fails.
func boolOf(out ref.Val) (bool, error) {
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
