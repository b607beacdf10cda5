package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/guard-mcp/guard/e2e/guardtest"
	"github.com/guard-mcp/guard/internal/pgtest"
	"github.com/guard-mcp/guard/store"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// execWithoutUserNamespaces runs its arguments (os.Args[1:]) where no
// user namespace can be created: it runs in a user namespace of its own
// (withoutUserNamespaces), sets that namespace's user.max_user_namespaces
// to 0 (the limit is per namespace: the machine's is untouched), and
// executes them.
func execWithoutUserNamespaces() int {
	os.Unsetenv(noUserNSEnv)
	if err := os.WriteFile("/proc/sys/user/max_user_namespaces", []byte("0\n"), 0); err != nil {
		fmt.Fprintln(os.Stderr, "setting max_user_namespaces in the test's user namespace:", err)
		return 125
	}
	path, err := exec.LookPath(os.Args[1])
	if err == nil {
		err = syscall.Exec(path, os.Args[1:], os.Environ())
	}
	fmt.Fprintln(os.Stderr, "exec:", err)
	return 126
}

// withoutUserNamespaces returns argv as a command that runs where user
// namespaces cannot be created, so that guard's sandbox cannot be set up
// (a real failure: the kernel refuses, ENOSPC).
func withoutUserNamespaces(env []string, argv ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], argv...)
	cmd.Env = append(env, noUserNSEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
	}
	return cmd
}

// Where the sandbox cannot be set up, guard run says so at error level,
// naming the server and the cause, and runs the server without isolation:
// guard's files are reachable by the server (here by a relative path), and
// only the path rule guard-self-protection protects them (an absolute
// path is denied). guard policy check says NOT AVAILABLE, warns on stderr
// and exits 0 (the configuration itself is valid).
func TestSandboxUnavailableFallsBackLoudly(t *testing.T) {
	node, js := guardtest.Node(t), filesystemServer(t)
	base := t.TempDir()
	home, cwd := filepath.Join(base, "home"), filepath.Join(base, "cwd")
	config := filepath.Join(home, ".config/guard/guard.yaml")
	for _, d := range []string{filepath.Dir(config), filepath.Join(home, ".local/share/guard"), cwd} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	cfg := fmt.Sprintf("policy: {default: allow}\nservers:\n  files:\n    command: [%q, %q, %q]\n", node, js, home)
	if err := os.WriteFile(config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	environ := []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}
	// guard's database: the default, or on PostgreSQL a database of the
	// test's own with the default key in the data directory.
	opts := store.Options{Path: filepath.Join(home, ".local/share/guard/guard.db")}
	if pgtest.Postgres() {
		opts = store.Options{Path: pgtest.Database(t), KeyPath: filepath.Join(home, ".local/share/guard/audit.key")}
		environ = append(environ, "GUARD_DB="+opts.Path)
	}

	// guard policy check, where the sandbox cannot be set up.
	check := withoutUserNamespaces(environ, guardBin, "policy", "check")
	var stdout, stderr strings.Builder
	check.Stdout, check.Stderr = &stdout, &stderr
	if err := check.Run(); err != nil {
		t.Fatalf("guard policy check: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "files: NOT AVAILABLE: the sandbox is not available") ||
		!strings.Contains(stderr.String(), "WARNING: server files would run without isolation") {
		t.Fatalf("guard policy check without user namespaces:\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}

	logFile := filepath.Join(base, "guard.log")
	logw, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer logw.Close()
	cmd := withoutUserNamespaces(environ, guardBin, "run", "--no-ui", "--name", "files", "--", node, js, home)
	cmd.Dir = cwd
	cmd.Stderr = logw
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		log, _ := os.ReadFile(logFile)
		t.Fatalf("connect: %v\n%s", err, log)
	}
	defer cs.Close()
	// The server was started before it answered initialize: the log
	// line is written.
	log, _ := os.ReadFile(logFile)
	var loud string
	for _, l := range strings.Split(string(log), "\n") {
		if strings.Contains(l, "WITHOUT isolation") {
			loud = l
		}
	}
	if !strings.Contains(loud, "level=ERROR") || !strings.Contains(loud, "server=files") || !strings.Contains(loud, "cause=") ||
		!strings.Contains(loud, "no space left on device") {
		t.Fatalf("guard's log does not say loudly that files runs without isolation, and why:\n%s", log)
	}

	call := func(args map[string]any) (string, bool) {
		t.Helper()
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "read_text_file", Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		return r.Content[0].(*mcp.TextContent).Text, r.IsError
	}
	// No isolation: the configuration, which the sandbox would hide, is
	// read by a path the rule cannot know for guard's.
	if text, isErr := call(map[string]any{"path": ".config/guard/guard.yaml"}); isErr || !strings.Contains(text, "default: allow") {
		t.Fatalf("reading guard's configuration by a relative path without isolation: error=%v %q", isErr, text)
	}
	// The path rule still stands.
	if text, isErr := call(map[string]any{"path": config}); !isErr || !strings.Contains(text, `"guard-self-protection"`) {
		t.Fatalf("reading guard's configuration by its absolute path: error=%v %q", isErr, text)
	}

	// A server could have written the configuration: a change waits for
	// a person, and the running guard goes on with the old one.
	changed := strings.Replace(cfg, "policy: {default: allow}", "policy:\n  default: allow\n  rules: [{name: no-reads, tool: read_text_file, action: deny}]", 1)
	if err := os.WriteFile(config, []byte(changed), 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for {
		pending, err := db.Configs().PendingConfigChange(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if pending != nil {
			if !strings.Contains(pending.Summary, `rule "no-reads" added`) {
				t.Fatalf("the pending change says %q", pending.Summary)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the running guard never noted the change")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if text, isErr := call(map[string]any{"path": ".config/guard/guard.yaml"}); isErr {
		t.Fatalf("the change was applied before a person did: %s", text)
	}
}

// A server whose settings say sandbox: on in so many words never runs
// without isolation: where the sandbox cannot be set up, guard run
// answers the client's initialize with an error that says the server
// could not be isolated, says why on stderr and exits 1; guard serve
// answers a session's initialize so; guard policy check says REFUSED.
// The server never starts (it would create a file).
func TestSandboxRequiredButUnavailableRefuses(t *testing.T) {
	sqliteOnly(t, "the database is the default one in the home directory")
	base := t.TempDir()
	home := filepath.Join(base, "home")
	ran := filepath.Join(base, "ran")
	config := filepath.Join(home, ".config/guard/guard.yaml")
	if err := os.MkdirAll(filepath.Dir(config), 0o700); err != nil {
		t.Fatal(err)
	}
	server := []string{"/bin/sh", "-c", `: > "$0"; exec cat`, ran}
	cfg := fmt.Sprintf("servers:\n  files:\n    command: [%q, %q, %q, %q]\n    sandbox: on\n", server[0], server[1], server[2], server[3])
	if err := os.WriteFile(config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	environ := []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}

	check := withoutUserNamespaces(environ, guardBin, "policy", "check")
	var stdout, stderr strings.Builder
	check.Stdout, check.Stderr = &stdout, &stderr
	if err := check.Run(); err != nil {
		t.Fatalf("guard policy check: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "files: REFUSED: sandbox: on, and this system cannot isolate servers") ||
		!strings.Contains(stderr.String(), "WARNING: server files would not be started (sandbox: on)") {
		t.Fatalf("guard policy check:\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}

	// guard run, driven line by line: the answer to initialize, then the
	// client closes its input and guard exits.
	run := withoutUserNamespaces(environ, append([]string{guardBin, "run", "--no-ui", "--name", "files", "--"}, server...)...)
	stderr.Reset()
	run.Stderr = &stderr
	in, err := run.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := run.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	io.WriteString(in, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`+"\n")
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("no answer to initialize: %v\n%s", err, stderr.String())
	}
	var answer struct {
		ID    int
		Error struct {
			Code    int
			Message string
		}
	}
	if err := json.Unmarshal([]byte(line), &answer); err != nil || answer.ID != 1 || answer.Error.Code != -32603 ||
		!strings.Contains(answer.Error.Message, "the server could not be isolated from guard's files, so guard did not start it") {
		t.Fatalf("guard run answered initialize with %s", line)
	}
	in.Close()
	err = run.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "guard: the server could not be started: /bin/sh: the server could not be isolated") ||
		!strings.Contains(stderr.String(), "sandbox: on") {
		t.Fatalf("guard run ended with %v, stderr:\n%s", err, stderr.String())
	}

	// guard serve: the session's initialize.
	addr := guardtest.FreePort(t)
	serve := withoutUserNamespaces(environ, guardBin, "serve", "--no-ui", "--listen", addr)
	var log lockedLog
	serve.Stderr = &log
	guardtest.StartServeCmd(t, addr, serve)
	resp, err := http.Post("http://"+addr+"/mcp/files", "application/json",
		strings.NewReader(`{"jsonrpc":"2.0","id":"i","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(body), `"id":"i"`) ||
		!strings.Contains(string(body), "The server could not be started: the server could not be isolated from guard's files, so guard did not start it") {
		t.Fatalf("guard serve answered initialize with %d %s\n%s", resp.StatusCode, body, log.String())
	}
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("the server ran")
	}
	said := []string{`level=ERROR msg="the server will not be started: its settings say sandbox: on`,
		`level=ERROR msg="server not started: it could not be isolated from guard's files" server=files`}
	if l := log.waitFor(10*time.Second, said...); !strings.Contains(l, said[0]) || !strings.Contains(l, said[1]) {
		t.Fatalf("guard serve's log does not say it:\n%s", l)
	}
}
