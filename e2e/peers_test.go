package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/guard-mcp/guard/e2e/guardtest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// transcript is what a client saw of a server in one scenario, with the
// values that change from run to run left out.
type transcript = map[string]any

// scenario runs a real client against the server that serverCmd starts.
type scenario func(t *testing.T, serverCmd []string) transcript

// compareThroughGuard runs the scenario against serverCmd directly, then
// through `guard run` with a policy that allows everything, and fails if the
// client saw anything different. It returns the direct transcript and the
// guard environment, whose audit log the caller may examine.
//
// invalid names calls whose arguments break the tool's inputSchema: the
// server refuses them in its own words, guard before them in its own
// ("Invalid arguments for TOOL: ..."); both must be tool errors.
func compareThroughGuard(t *testing.T, sc scenario, name string, serverCmd []string, invalid ...string) (transcript, *env) {
	t.Helper()
	direct := sc(t, serverCmd)
	e := newEnv(t, "policy: {default: allow}\n")
	through := sc(t, e.wrap(name, serverCmd...))
	for _, k := range invalid {
		d, _ := direct["calls"].(map[string]any)[k].(map[string]any)
		g, _ := through["calls"].(map[string]any)[k].(map[string]any)
		// From 2025-11-25 a tool error the model reads; before, -32602.
		text, _ := g["text"].(string)
		perr, _ := g["error"].(string)
		toolErr := g["isError"] == true && strings.HasPrefix(text, "Invalid arguments for ")
		rpcErr := strings.Contains(perr, "-32602") && strings.Contains(perr, "Invalid arguments for ")
		if d["isError"] != true || !(toolErr || rpcErr) {
			t.Fatalf("%s: direct %v, through guard %v: want the server's refusal, and guard's naming the invalid arguments", k, d, g)
		}
		delete(direct["calls"].(map[string]any), k)
		delete(through["calls"].(map[string]any), k)
	}
	if !reflect.DeepEqual(direct, through) {
		a, _ := json.MarshalIndent(direct, "", " ")
		b, _ := json.MarshalIndent(through, "", " ")
		t.Fatalf("through guard differs from direct:\ndirect: %s\nthrough: %s", a, b)
	}
	if out, code := e.guard("audit", "verify"); code != 0 || !strings.HasPrefix(out, "ok, unwitnessed: ") {
		t.Fatalf("audit verify: %d %s", code, out)
	}
	return direct, e
}

// tsScenario is testdata/node/client.mjs, the official TypeScript SDK's
// client, running one of its scenarios (auto, everything, example) and
// offering protocol (the SDK's latest if empty).
func tsScenario(name, protocol string, flags ...string) scenario {
	return func(t *testing.T, serverCmd []string) transcript {
		t.Helper()
		args := append([]string{filepath.Join(guardtest.RepoRoot(), "testdata/node/client.mjs"), "--scenario", name}, flags...)
		if protocol != "" {
			args = append(args, "--protocol", protocol)
		}
		// A command runs the server on stdio; "url URL" or "sse URL"
		// reaches one over HTTP.
		if len(serverCmd) == 2 && (serverCmd[0] == "url" || serverCmd[0] == "sse") {
			args = append(args, "--"+serverCmd[0], serverCmd[1])
		} else {
			args = append(append(args, "--"), serverCmd...)
		}
		c := exec.Command(guardtest.Node(t), args...)
		c.Dir = filepath.Join(guardtest.RepoRoot(), "testdata/node")
		// Node resolves client.mjs's imports next to it, whatever
		// GUARD_TEST_NODE_MODULES says.
		guardtest.Peer(t, "", "testdata/node/node_modules/@modelcontextprotocol/sdk")
		var stderr strings.Builder
		c.Stderr = &stderr
		out, err := c.Output()
		if err != nil {
			t.Fatalf("TypeScript client: %v\n%s", err, stderr.String())
		}
		var m transcript
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("TypeScript client output: %v\n%s", err, out)
		}
		return m
	}
}

// The TypeScript SDK's client protocol revisions, newest first.
var tsRevisions = []string{"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

// The official TypeScript SDK client and the reference server-everything
// see the same session through guard as directly, in every revision the SDK
// speaks; sampling, elicitation and roots requests from the server reach the
// client and are audited.
func TestTypeScriptClientAndServerEverythingThroughGuard(t *testing.T) {
	node := guardtest.Node(t)
	server := []string{node, filepath.Join(guardtest.NodeModules(t), "@modelcontextprotocol/server-everything/dist/index.js"), "stdio"}
	for _, v := range tsRevisions {
		t.Run(v, func(t *testing.T) {
			direct, e := compareThroughGuard(t, tsScenario("everything", v), "everything", server)
			seen := direct["seen"].(map[string]any)
			if len(direct["tools"].([]any)) < 10 || seen["sampling"] != true || seen["elicitation"] != true ||
				seen["roots"] != true || direct["progress"] != true || direct["protocol"] != v {
				t.Fatalf("the direct run is too thin to compare: %v", direct)
			}
			out, _ := e.guard("audit", "query", "--format", "jsonl")
			for _, m := range []string{`"method":"sampling/createMessage"`, `"method":"elicitation/create"`, `"method":"roots/list"`, `"tool":"get-sum"`, `"protocol":"` + v + `"`} {
				if !strings.Contains(out, m) {
					t.Errorf("the audit log has no %s", m)
				}
			}
		})
	}
}

// The TypeScript SDK client sees guard's example server the same through
// guard as directly: every tool, progress, log notifications, a tool error
// and the SDK's own refusal of a call that lacks a required argument.
func TestTypeScriptClientAndExampleServerThroughGuard(t *testing.T) {
	server := []string{guardBin, "example-server"}
	for _, v := range []string{tsRevisions[0], tsRevisions[len(tsRevisions)-1]} {
		t.Run(v, func(t *testing.T) {
			direct, e := compareThroughGuard(t, tsScenario("example", v), "example", server, "write_note without body")
			calls := direct["calls"].(map[string]any)
			stats, _ := calls["note_stats"].(map[string]any)
			after, _ := calls["read_note after delete_note"].(map[string]any)
			if len(calls) != 9 || stats == nil || stats["structured"] == nil || after == nil || after["isError"] != true ||
				direct["progress"] != true || direct["seen"].(map[string]any)["logs"] != 2.0 || direct["protocol"] != v {
				t.Fatalf("the direct run is not what the example scenario does: %v", direct)
			}
			out, _ := e.guard("audit", "query", "--format", "jsonl", "--tool", "delete_note")
			if !strings.Contains(out, `"outcome":"ok"`) {
				t.Fatalf("the audit log has no successful delete_note:\n%s", out)
			}
		})
	}
}

// goScenario is a go-sdk client pinned to a protocol revision, run against
// the go-sdk conformance server: tools (with sampling, elicitation, progress
// and logging), resources, prompts and ping.
func goScenario(version string) scenario {
	return func(t *testing.T, serverCmd []string) transcript {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		progress, logs := 0, 0
		client := mcp.NewClient(&mcp.Implementation{Name: "guard-go-client", Version: "1.0"}, &mcp.ClientOptions{
			CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
				return &mcp.CreateMessageResult{Role: "assistant", Model: "m", Content: &mcp.TextContent{Text: "sampled"}}, nil
			},
			ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				return &mcp.ElicitResult{Action: "accept", Content: cannedAnswer(req.Params.RequestedSchema)}, nil
			},
			ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { progress++ },
			LoggingMessageHandler:       func(context.Context, *mcp.LoggingMessageRequest) { logs++ },
		})
		client.AddRoots(&mcp.Root{URI: "file:///tmp/root", Name: "root"})
		c := exec.Command(serverCmd[0], serverCmd[1:]...)
		c.Stderr = os.Stderr
		cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: c}, &mcp.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			t.Fatalf("%s: connect: %v", version, err)
		}
		defer cs.Close()
		out := transcript{"protocol": cs.InitializeResult().ProtocolVersion}
		if version < "2026-07-28" { // from 2026-07-28 on a request carries its own level
			if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
				t.Fatalf("%s: logging/setLevel: %v", version, err)
			}
		}
		tools, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatalf("%s: tools/list: %v", version, err)
		}
		var names []string
		for _, tl := range tools.Tools {
			names = append(names, tl.Name)
		}
		slices.Sort(names)
		out["tools"] = names
		calls := map[string]any{}
		args := map[string]map[string]any{
			"test_sampling":    {"prompt": "hi"},
			"test_elicitation": {"message": "Who are you?"},
		}
		for _, name := range []string{"test_simple_text", "test_image_content", "test_embedded_resource", "test_error_handling",
			"test_tool_with_progress", "test_tool_with_logging", "test_sampling", "test_elicitation",
			"test_input_required_result_elicitation", "test_input_required_result_sampling", "test_input_required_result_multi_round"} {
			if !slices.Contains(names, name) {
				continue
			}
			a := args[name]
			if a == nil {
				a = map[string]any{}
			}
			params := &mcp.CallToolParams{Name: name, Arguments: a}
			params.SetProgressToken("progress-" + name)
			res, err := cs.CallTool(ctx, params)
			if err != nil {
				calls[name] = "error: " + err.Error()
				continue
			}
			b, _ := json.Marshal(res.Content)
			calls[name] = map[string]any{"isError": res.IsError, "content": string(b)}
		}
		out["calls"] = calls
		if res, err := cs.ListResources(ctx, nil); err == nil {
			out["resources"] = len(res.Resources)
			if r, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "test://static-text"}); err == nil {
				out["static-text"] = len(r.Contents)
			}
		} else {
			out["resources"] = err.Error()
		}
		if res, err := cs.ListPrompts(ctx, nil); err == nil {
			out["prompts"] = len(res.Prompts)
			if p, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "test_simple_prompt"}); err == nil {
				out["simple-prompt"] = len(p.Messages)
			}
		}
		out["ping"] = cs.Ping(ctx, nil) == nil
		out["progress"] = progress > 0
		out["logs"] = logs > 0
		return out
	}
}

// cannedAnswer answers an elicitation with a fixed value of the right type
// for each property the requested schema names.
func cannedAnswer(schema any) map[string]any {
	var s struct {
		Properties map[string]struct {
			Type    string `json:"type"`
			Format  string `json:"format"`
			Enum    []any  `json:"enum"`
			Default any    `json:"default"`
		} `json:"properties"`
	}
	b, _ := json.Marshal(schema)
	_ = json.Unmarshal(b, &s)
	answer := map[string]any{}
	for name, p := range s.Properties {
		switch {
		case p.Default != nil:
			answer[name] = p.Default
		case len(p.Enum) > 0:
			answer[name] = p.Enum[0]
		case p.Type == "boolean":
			answer[name] = true
		case p.Type == "integer" || p.Type == "number":
			answer[name] = 36
		case p.Format == "email":
			answer[name] = "ada@example.com"
		default:
			answer[name] = "ada"
		}
	}
	return answer
}

// go-sdk clients pinned to each revision see the go-sdk conformance server
// through guard as they see it directly.
func TestGoClientsOfEveryRevisionThroughGuard(t *testing.T) {
	server := guardtest.EverythingServer(t)
	for _, v := range []string{"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"} {
		t.Run(v, func(t *testing.T) {
			direct, e := compareThroughGuard(t, goScenario(v), "conformance", []string{server})
			calls := direct["calls"].(map[string]any)
			if len(direct["tools"].([]string)) < 10 || len(calls) < 8 || direct["protocol"] != v ||
				direct["progress"] != true || direct["ping"] != true || (v < "2026-07-28" && direct["logs"] != true) {
				t.Fatalf("the direct run is too thin: %v", direct)
			}
			// Before 2026-07-28 a server asks the client in the middle of a
			// call; from 2026-07-28 on it answers input_required and the
			// client calls again.
			succeed := []string{"test_simple_text", "test_tool_with_progress", "test_tool_with_logging", "test_sampling", "test_elicitation"}
			if v >= "2026-07-28" {
				succeed = []string{"test_simple_text", "test_tool_with_progress", "test_input_required_result_elicitation",
					"test_input_required_result_sampling", "test_input_required_result_multi_round"}
			}
			for _, name := range succeed {
				if r, ok := calls[name].(map[string]any); !ok || r["isError"] != false {
					t.Errorf("%s did not succeed directly: %v", name, calls[name])
				}
			}
			out, _ := e.guard("audit", "query", "--format", "jsonl")
			if !strings.Contains(out, `"protocol":"`+v+`"`) || !strings.Contains(out, `"client":"guard-go-client/1.0"`) {
				t.Fatalf("the audit log does not name revision %s and the client:\n%.2000s", v, out)
			}
			if v == "2026-07-28" {
				// input_required answers are rounds of one call.
				rounds, _ := e.guard("audit", "query", "--format", "jsonl", "--tool", "test_input_required_result_sampling")
				lines := strings.Split(strings.TrimSpace(rounds), "\n")
				if len(lines) != 1 || !strings.Contains(lines[0], `"outcome":"ok"`) {
					t.Fatalf("the rounds of one call are not one invocation ending ok:\n%s", rounds)
				}
			}
		})
	}
}
