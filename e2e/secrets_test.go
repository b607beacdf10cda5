package e2e

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The values of the variables guard's configuration expands, its secrets.
const (
	remoteToken = "remote-token-4f9a1c77e2"
	listedToken = "listed-token-8b3d0e51aa"
)

// secretsConfig expands two variables (a remote server's credentials) and
// lets the server "everything" see one of them.
func secretsConfig(extra string) string {
	return `policy: {default: allow}
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
	if _, ok := env["E2E_LISTED_TOKEN"]; !ok {
		t.Errorf("the server does not see E2E_LISTED_TOKEN, which its env list names")
	}
	if env["PATH"] == "" || env["HOME"] == "" {
		t.Errorf("the server lacks PATH or HOME: %v", env)
	}
}

func everythingArgv(t *testing.T) []string {
	return []string{nodeBin(t), filepath.Join(nodeModules(t), "@modelcontextprotocol/server-everything/dist/index.js"), "stdio"}
}

// A server run by guard run does not see guard's secrets.
func TestServerEnvironmentThroughRun(t *testing.T) {
	e := newEnv(t, secretsConfig(""))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs := e.connect(ctx, mcp.NewClient(&mcp.Implementation{Name: "env", Version: "1"}, nil), "2025-11-25", secretsEnv, "everything", everythingArgv(t)...)
	checkServerEnv(t, serverEnv(t, cs))
}

// A server run by guard serve, one process per session, does not see them
// either.
func TestServerEnvironmentThroughServe(t *testing.T) {
	argv, _ := json.Marshal(everythingArgv(t))
	e := newEnv(t, secretsConfig("    command: "+string(argv)+"\n"))
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
