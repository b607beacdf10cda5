package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/guard-mcp/guard/e2e/guardtest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/pelletier/go-toml/v2"
	"github.com/tailscale/hujson"
)

// wrapToken is the credential the test's remote server asks for.
const wrapToken = "s3cret-0123456789abcdef"

// bearerServer is a real go-sdk Streamable HTTP server with an echo
// tool, which answers only requests that carry Authorization: Bearer
// wrapToken.
func bearerServer(t *testing.T) string {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "1"}, nil)
	type args struct {
		Message string `json:"message"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, a args) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "Echo: " + a.Message}}}, nil, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+wrapToken {
			http.Error(w, "wrong or no credential", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp"
}

// oauthServer asks for OAuth, as a server whose client authorises it
// does: 401 and its protected-resource metadata.
func oauthServer(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="http://`+r.Host+`/.well-known/oauth-protected-resource/mcp"`)
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp"
}

// entryOf reads the server name of a client's file, as its client would:
// its command, its arguments and its env.
func entryOf(t *testing.T, path, name string) (command string, args []string, env map[string]string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var servers map[string]struct {
		Command string            `json:"command" toml:"command"`
		Args    []string          `json:"args" toml:"args"`
		Env     map[string]string `json:"env" toml:"env"`
		EnvVars []string          `toml:"env_vars"`
	}
	if strings.HasSuffix(path, ".toml") {
		var doc struct {
			Servers map[string]struct {
				Command string            `toml:"command"`
				Args    []string          `toml:"args"`
				Env     map[string]string `toml:"env"`
				EnvVars []string          `toml:"env_vars"`
			} `toml:"mcp_servers"`
		}
		if err := toml.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		s := doc.Servers[name]
		env = map[string]string{}
		for k, v := range s.Env {
			env[k] = v
		}
		// Codex gives a server the variables env_vars names, from its own
		// environment (here, the test's codexEnv).
		for _, k := range s.EnvVars {
			env[k] = codexEnv[k]
		}
		return s.Command, s.Args, env
	}
	std, err := hujson.Standardize(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var doc map[string]json.RawMessage
	json.Unmarshal(std, &doc)
	key := "mcpServers"
	if _, ok := doc["servers"]; ok {
		key = "servers"
	}
	if err := json.Unmarshal(doc[key], &servers); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	s := servers[name]
	return s.Command, s.Args, s.Env
}

// codexEnv is the environment of the Codex the test plays: the bearer
// token its remote entry names by variable.
var codexEnv = map[string]string{"REMOTE_TOKEN": wrapToken}

// callAsClient starts a server as its client would, from its entry alone,
// with an environment of HOME and PATH and the entry's env, and calls its
// echo tool through the official TypeScript SDK's client.
func callAsClient(t *testing.T, home, command string, args []string, env map[string]string, message string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	argv := append([]string{filepath.Join(guardtest.RepoRoot(), "testdata/node/call-client.mjs"),
		"--tool", "echo", "--args", fmt.Sprintf(`{"message":%q}`, message), "--", command}, args...)
	c := exec.CommandContext(ctx, guardtest.Node(t), argv...)
	c.Dir = filepath.Join(guardtest.RepoRoot(), "testdata/node")
	c.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		c.Env = append(c.Env, k+"="+v)
	}
	var stderr strings.Builder
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s\n%s", command, args, err, out, stderr.String())
	}
	return string(out)
}

// Every client's file, each in its place under a home of the test's own:
// guard wrap wraps their servers, and each wrapped entry, started exactly
// as its client would start it (its command, arguments and env, with HOME
// and PATH only), answers a tool call through guard, recorded in guard's
// audit log: server-everything over stdio, and a Streamable HTTP server
// whose credential the entry carries from its env. A server that asks for
// OAuth is left, and a legacy SSE server is reached by its own transport;
// a second wrap changes nothing; unwrap gives every file back, and after
// an edit by hand, keeps the edit.
func TestWrappedEntriesAnswerThroughGuard(t *testing.T) {
	sqliteOnly(t, "the entries start with HOME and PATH only, as a desktop client's do, without the database's credentials")
	node := guardtest.Node(t)
	everything := filepath.Join(guardtest.NodeModules(t), "@modelcontextprotocol/server-everything/dist/index.js")
	remote, oauth, sse := bearerServer(t), oauthServer(t), everythingSSE(t)
	e := newEnv(t, "policy: {default: allow}\nui: {listen: \""+freePort(t)+"\"}\n")
	home := t.TempDir()
	stdio := func(name string) string {
		return fmt.Sprintf(`"%s": {"command": %q, "args": [%q, "stdio"]}`, name, node, everything)
	}
	files := map[string]string{
		".config/Claude/claude_desktop_config.json": `{"mcpServers": {` + stdio("claude-desktop-everything") + `}}`,
		".claude.json": `{"numStartups": 3, "mcpServers": {` + stdio("claude-code-everything") + `,
  "claude-code-remote": {"type": "http", "url": "` + remote + `", "headers": {"Authorization": "Bearer ` + wrapToken + `"}},
  "claude-code-oauth": {"type": "http", "url": "` + oauth + `"}}}`,
		".cursor/mcp.json": `{"mcpServers": {` + stdio("cursor-everything") + `,
  "cursor-remote": {"url": "` + remote + `", "headers": {"Authorization": "Bearer ` + wrapToken + `"}}}}`,
		".config/Code/User/mcp.json": "{\n  // VS Code's own\n  \"servers\": {" + stdio("vscode-everything") + `,
    "vscode-remote": {"type": "http", "url": "` + remote + `", "headers": {"Authorization": "Bearer ` + wrapToken + `"},},
  },
}`,
		".codeium/windsurf/mcp_config.json": `{"mcpServers": {` + stdio("windsurf-everything") + `,
  "windsurf-remote": {"serverUrl": "` + remote + `", "headers": {"Authorization": "Bearer ` + wrapToken + `"}}}}`,
		".gemini/settings.json": `{"mcpServers": {` + stdio("gemini-cli-everything") + `,
  "gemini-cli-remote": {"httpUrl": "` + remote + `", "headers": {"Authorization": "Bearer ` + wrapToken + `"}},
  "gemini-cli-sse": {"url": "` + sse + `"}}}`,
		".codex/config.toml": fmt.Sprintf("# Codex\n[mcp_servers.codex-everything]\ncommand = %q\nargs = [%q, \"stdio\"]\n\n"+
			"[mcp_servers.codex-remote]\nurl = %q\nbearer_token_env_var = \"REMOTE_TOKEN\"\n", node, everything, remote),
	}
	original := map[string]string{}
	for rel, content := range files {
		p := filepath.Join(home, filepath.FromSlash(rel))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		original[p] = content
	}
	guard := func(args ...string) string {
		t.Helper()
		c := exec.Command(guardBin, args...)
		c.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("guard %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	out := guard("wrap", "--config", e.cfg, "--db", e.db)
	if strings.Count(out, ": wrapped\n") != 14 || !strings.Contains(out, "claude-code-oauth: left as it is: its server asks for OAuth, which Claude Code does itself") {
		t.Fatalf("guard wrap:\n%s", out)
	}
	wrapped := map[string]string{}
	for p := range original {
		b, _ := os.ReadFile(p)
		wrapped[p] = string(b)
	}
	for rel := range files {
		p := filepath.Join(home, filepath.FromSlash(rel))
		client := map[string]string{".config": "", ".claude.json": "claude-code", ".cursor": "cursor", ".codeium": "windsurf", ".gemini": "gemini-cli", ".codex": "codex"}[strings.SplitN(rel, "/", 2)[0]]
		if client == "" {
			client = map[bool]string{true: "claude-desktop", false: "vscode"}[strings.Contains(rel, "Claude")]
		}
		names := []string{client + "-everything"}
		if client != "claude-desktop" {
			names = append(names, client+"-remote")
		}
		if client == "gemini-cli" {
			// Gemini CLI's url is the legacy HTTP+SSE transport.
			names = append(names, client+"-sse")
		}
		for _, name := range names {
			command, args, env := entryOf(t, p, name)
			if command != guardBin || len(args) < 2 || args[0] != "run" || !strings.Contains(strings.Join(args, " "), "--config "+e.cfg+" --db "+e.db) {
				t.Fatalf("%s: %s is not wrapped: %s %v", p, name, command, args)
			}
			if strings.Contains(strings.Join(args, " "), wrapToken) {
				t.Fatalf("%s: %s has its credential in its arguments: %v", p, name, args)
			}
			got := callAsClient(t, home, command, args, env, "hello from "+name)
			if !strings.Contains(got, `"step":"result"`) || !strings.Contains(got, "Echo: hello from "+name) {
				t.Fatalf("%s through guard: %s", name, got)
			}
		}
	}
	log, _ := e.guard("audit", "query", "--format", "jsonl", "--tool", "echo")
	for _, client := range []string{"claude-desktop", "claude-code", "cursor", "vscode", "windsurf", "gemini-cli", "codex"} {
		for _, kind := range []string{"everything", "remote"} {
			if client == "claude-desktop" && kind == "remote" {
				continue
			}
			if !strings.Contains(log, `"server":"`+client+"-"+kind+`"`) {
				t.Errorf("the audit log has no call of %s-%s", client, kind)
			}
		}
	}
	if !strings.Contains(log, `"server":"gemini-cli-sse"`) {
		t.Error("the audit log has no call of gemini-cli-sse")
	}
	if strings.Contains(log, wrapToken) {
		t.Error("the audit log shows the remote server's credential")
	}

	out = guard("wrap", "--config", e.cfg, "--db", e.db)
	for p, w := range wrapped {
		if b, _ := os.ReadFile(p); string(b) != w {
			t.Errorf("a second wrap changed %s", p)
		}
	}
	if strings.Contains(out, ": wrapped\n") || strings.Contains(out, "Restart") {
		t.Errorf("a second wrap wrapped again:\n%s", out)
	}

	// A server added by hand to one file between wrap and unwrap stays.
	desktop := filepath.Join(home, ".config/Claude/claude_desktop_config.json")
	added := `"time": {"command": "uvx", "args": ["mcp-server-time"]}, `
	os.WriteFile(desktop, []byte(strings.Replace(wrapped[desktop], `{"mcpServers": {`, `{"mcpServers": {`+added, 1)), 0o600)
	guard("unwrap")
	for p, o := range original {
		if p == desktop {
			o = strings.Replace(o, `{"mcpServers": {`, `{"mcpServers": {`+added, 1)
		}
		if b, _ := os.ReadFile(p); string(b) != o {
			t.Errorf("unwrap did not give back %s:\n%s\nwant:\n%s", p, b, o)
		}
	}
}
