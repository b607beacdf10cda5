package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/guard-mcp/guard/e2e/guardtest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A local program that opens more connections to the approval UI than
// guard may have descriptors, each a POST whose body trickles in, cannot
// take isolation away: guard serve, limited here to 128 descriptors,
// accepts no more connections than its share of them and cuts each slow
// body, so that a session started meanwhile has its server isolated (its
// filesystem server cannot read the UI token), and the UI answers again
// once the flood is cut. The UI used to bound only the headers: guard ran
// out of descriptors, the next session's sandbox could not be set up
// ("too many open files"), and the server ran without it.
func TestAConnectionFloodCannotTakeIsolationAway(t *testing.T) {
	sqliteOnly(t, "the UI token is a file of the default data directory")
	node, js := guardtest.Node(t), filesystemServer(t)
	base := t.TempDir()
	home := filepath.Join(base, "home")
	data := filepath.Join(home, ".local/share/guard")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	token := strings.Repeat("ab", 32)
	if err := os.WriteFile(filepath.Join(data, "ui.token"), []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(base, "guard.yaml")
	cfg := fmt.Sprintf("policy: {default: allow}\nservers:\n  files:\n    command: [%q, %q, %q]\n", node, js, home)
	if err := os.WriteFile(config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, ui := guardtest.FreePort(t), guardtest.FreePort(t)
	// The descriptor limit is set for guard alone, soft and hard, so that
	// Go does not raise it at start.
	serve := exec.Command("/bin/sh", "-c", `ulimit -n 128 && exec "$@"`, "sh", guardBin, "serve", "--config", config,
		"--ui", ui, "--header-timeout", "200ms", "--body-timeout", "200ms", "--listen", addr)
	serve.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}
	var log lockedLog
	serve.Stderr = &log
	guardtest.StartServeCmd(t, addr, serve)

	// The flood: more connections than guard may have descriptors, each
	// a POST to the UI whose body never comes.
	const flood = 150
	for range flood {
		conn, err := net.Dial("tcp", ui)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST /approvals/x/approve HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100000\r\n\r\ncsrf=", ui)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "attacker", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp/files"}, nil)
	if err != nil {
		t.Fatalf("a session during the flood: %v\n%s", err, log.String())
	}
	defer cs.Close()
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "read_text_file", Arguments: map[string]any{"path": ".local/share/guard/ui.token"}})
	if err != nil {
		t.Fatal(err)
	}
	if text := r.Content[0].(*mcp.TextContent).Text; !r.IsError || strings.Contains(text, token) {
		t.Fatalf("the server read the UI token: %q\n%s", text, log.String())
	}
	if l := log.String(); !strings.Contains(l, "isolation in force") || strings.Contains(l, "WITHOUT isolation") || strings.Contains(l, "not started") {
		t.Fatalf("guard's log:\n%s", l)
	}

	// The UI answers again: the flood's connections ahead of this one
	// were cut, a share of them at a time.
	conn, err := net.Dial("tcp", ui)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(60 * time.Second)) // a failure's bound, not the test's clock
	fmt.Fprintf(conn, "GET /login HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", ui)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("the UI does not answer after the flood: %v\n%s", err, log.String())
	}
	resp.Body.Close()
}
