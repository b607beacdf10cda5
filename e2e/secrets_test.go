package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/guard-mcp/guard/e2e/guardtest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The values of the variables guard's configuration expands, its secrets.
const (
	remoteToken = "remote-token-4f9a1c77e2"
	listedToken = "listed-token-8b3d0e51aa"
)

// secretsConfig expands two variables (a remote server's credentials) and
// lets the server "everything" see one of them; top comes first, extra
// last (more of everything's settings).
func secretsConfig(top, extra string) string {
	return top + `
servers:
  remote:
    url: http://127.0.0.1:9/mcp
    headers: {Authorization: "Bearer ${E2E_REMOTE_TOKEN}", X-Listed: "${E2E_LISTED_TOKEN}"}
  everything:
    env: [E2E_LISTED_TOKEN]
` + extra
}

var secretsEnv = []string{"E2E_REMOTE_TOKEN=" + remoteToken, "E2E_LISTED_TOKEN=" + listedToken, "GUARD_DB=/nowhere/guard.db"}

// serverEnv calls server-everything's get-env and returns the environment
// its process reports.
func serverEnv(t *testing.T, cs *mcp.ClientSession) map[string]string {
	t.Helper()
	text, isErr := callText(t, cs, "get-env", map[string]any{})
	var env map[string]string
	if err := json.Unmarshal([]byte(text), &env); isErr || err != nil {
		t.Fatalf("get-env answered %q (%v)", text, err)
	}
	return env
}

// checkServerEnv: the variables the configuration expanded and guard's own
// are not in the server's environment unless its env list names them;
// ordinary ones are.
func checkServerEnv(t *testing.T, env map[string]string) {
	t.Helper()
	if _, ok := env["E2E_REMOTE_TOKEN"]; ok {
		t.Errorf("the server sees E2E_REMOTE_TOKEN, which the configuration expands")
	}
	if _, ok := env["GUARD_DB"]; ok {
		t.Errorf("the server sees GUARD_DB")
	}
	// The server sees it; the client reads its value masked, as guard's.
	if v, ok := env["E2E_LISTED_TOKEN"]; !ok || v != "[REDACTED:guard-secret]" {
		t.Errorf("E2E_LISTED_TOKEN, which the server's env list names, reads %q (present: %v), want it masked", v, ok)
	}
	if env["PATH"] == "" || env["HOME"] == "" {
		t.Errorf("the server lacks PATH or HOME: %v", env)
	}
}

func everythingArgv(t *testing.T) []string {
	return []string{guardtest.Node(t), filepath.Join(guardtest.NodeModules(t), "@modelcontextprotocol/server-everything/dist/index.js"), "stdio"}
}

// A server run by guard run does not see guard's secrets.
func TestServerEnvironmentThroughRun(t *testing.T) {
	e := newEnv(t, secretsConfig("policy: {default: allow}", ""))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs := e.connect(ctx, mcp.NewClient(&mcp.Implementation{Name: "env", Version: "1"}, nil), "2025-11-25", secretsEnv, "everything", everythingArgv(t)...)
	checkServerEnv(t, serverEnv(t, cs))
}

// A server run by guard serve, one process per session, does not see them
// either.
func TestServerEnvironmentThroughServe(t *testing.T) {
	argv, _ := json.Marshal(everythingArgv(t))
	e := newEnv(t, secretsConfig("policy: {default: allow}", "    command: "+string(argv)+"\n"))
	e.environ = secretsEnv
	url := e.serve() + "/mcp/everything"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "env", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	checkServerEnv(t, serverEnv(t, cs))
}

// guard's own secrets — the UI's login token, the checkpoint key, the
// values its configuration expanded — are masked in what the client reads
// (redact_results is off) and in the audit log's arguments and results, and
// in the arguments a pending approval keeps.
func TestOwnSecretsMasked(t *testing.T) {
	e := newEnv(t, secretsConfig(`policy:
  default: allow
  rules: [{name: hold-writes, tool: write_note, action: approve}]
approval: {wait: 30s}`, ""))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs := e.connect(ctx, mcp.NewClient(&mcp.Implementation{Name: "own", Version: "1"}, nil), "2025-11-25", secretsEnv, "notes", guardBin, "example-server")
	// The token is the login link's (on SQLite a file beside the
	// database, on PostgreSQL derived from the key), which guard ui url
	// prints while a UI serves; the key is beside the database, or the
	// configuration's key_file.
	e.environ = secretsEnv
	ui, _ := e.uiProcess(ctx, freePort(t))
	defer ui.Close()
	out, code := e.guard("ui", "url")
	_, token, found := strings.Cut(strings.TrimSpace(out), "token=")
	if code != 0 || !found {
		t.Fatalf("ui url: %d %s", code, out)
	}
	keyFile := filepath.Join(filepath.Dir(e.db), "audit.key")
	if e.key != "" {
		keyFile = e.key
	}
	key, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	own := map[string]string{"ui token": token, "checkpoint key": strings.TrimSpace(string(key)), "expanded variable": remoteToken}
	var text string
	for _, v := range own {
		text += "[" + v + "] "
	}
	got, _ := callText(t, cs, "echo", map[string]any{"text": text})
	audit, _ := e.guard("audit", "query", "--format", "jsonl", "--tool", "echo")
	for what, v := range own {
		if strings.Contains(got, v) {
			t.Errorf("the client read the %s: %q", what, got)
		}
		if strings.Contains(audit, v) {
			t.Errorf("the audit log holds the %s:\n%s", what, audit)
		}
	}
	if strings.Count(got, "[[REDACTED:guard-secret]]") != 3 || strings.Count(audit, "[[REDACTED:guard-secret]]") != 6 {
		t.Errorf("want each secret masked: the client read %q; the audit holds:\n%s", got, audit)
	}

	held := goCall(func() (*mcp.CallToolResult, error) {
		return cs.CallTool(ctx, &mcp.CallToolParams{Name: "write_note", Arguments: map[string]any{"title": "t", "body": own["ui token"]}})
	})
	a := e.pendingFor(ctx, "write_note")
	if strings.Contains(a.Arguments, own["ui token"]) || !strings.Contains(a.Arguments, "[REDACTED:guard-secret]") {
		t.Errorf("the pending approval keeps %s", a.Arguments)
	}
	if out, code := e.guard("approvals", "deny", a.ID, "--reason", "no"); code != 0 {
		t.Fatal(out)
	}
	awaitCall(t, held)
}
