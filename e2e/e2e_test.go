package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/e2e/guardtest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

var guardBin string

func TestMain(m *testing.M) {
	if os.Getenv(noUserNSEnv) != "" {
		// This binary is also the launcher of a process that cannot
		// create user namespaces (Linux).
		os.Exit(execWithoutUserNamespaces())
	}
	if name := os.Getenv("GUARD_E2E_SERVE"); name != "" {
		// This binary is also the test's own MCP servers (go-sdk).
		os.Exit(serveTestServer(name))
	}
	guardtest.Main(m, "../cmd/guard", &guardBin)
}

// filesystemServer is the reference filesystem server (npm).
func filesystemServer(t *testing.T) string {
	return guardtest.Peer(t, "GUARD_TEST_FILESYSTEM_SERVER", filepath.Join(guardtest.NodeModules(t), "@modelcontextprotocol/server-filesystem/dist/index.js"))
}

// env is a guard environment of its own: database and config in a temp dir
// (on PostgreSQL, a database of its own and its key in the temp dir).
type env struct {
	t   *testing.T
	dir string
	db  string // the --db value: an SQLite file, or a PostgreSQL URL
	cfg string
	// key is the checkpoint key's file on PostgreSQL (audit.key_file in
	// every configuration the env writes); "" on SQLite.
	key string
	// environ, when set, is added to guard serve's environment.
	environ []string
}

// newEnv makes a test's environment with config as its configuration.
func newEnv(t *testing.T, config string) *env {
	dir := t.TempDir()
	e := &env{t: t, dir: dir, cfg: filepath.Join(dir, "guard.yaml")}
	e.useEngine()
	e.writeConfig(e.cfg, config)
	return e
}

// wrap returns the command line that runs serverCmd behind guard.
func (e *env) wrap(name string, serverCmd ...string) []string {
	return append([]string{guardBin, "run", "--config", e.cfg, "--db", e.db, "--name", name, "--no-ui", "--"}, serverCmd...)
}

// guard runs a guard subcommand and returns its output and status.
func (e *env) guard(args ...string) (string, int) {
	e.t.Helper()
	args = guardtest.Args(e.cfg, e.db, args...)
	cmd := exec.Command(guardBin, args...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatal(err)
	}
	return string(out), code
}

// lineClient drives guard run with raw JSON-RPC lines.
type lineClient struct {
	t     *testing.T
	cmd   *exec.Cmd
	in    *os.File
	lines chan map[string]any
}

func startLines(t *testing.T, argv []string) *lineClient {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lc := &lineClient{t: t, cmd: cmd, lines: make(chan map[string]any, 64)}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				lc.lines <- m
			}
		}
		close(lc.lines)
	}()
	lc.in = stdin.(*os.File)
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
		}
	})
	return lc
}

func (lc *lineClient) send(s string) {
	lc.t.Helper()
	if _, err := lc.in.WriteString(s + "\n"); err != nil {
		lc.t.Fatal(err)
	}
}

// next returns the next message that is not a notification.
func (lc *lineClient) next(timeout time.Duration) map[string]any {
	lc.t.Helper()
	return lc.await(timeout, "answer", func(m map[string]any) bool { return !isNotification(m) })
}

// progress returns the next progress notification; an answer before it
// fails the test.
func (lc *lineClient) progress(timeout time.Duration) map[string]any {
	lc.t.Helper()
	return lc.await(timeout, "progress", func(m map[string]any) bool { return m["method"] == "notifications/progress" })
}

// await returns the next message that match takes, passing over the
// notifications it does not take; any other message fails the test.
func (lc *lineClient) await(timeout time.Duration, what string, match func(map[string]any) bool) map[string]any {
	lc.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case m, ok := <-lc.lines:
			if !ok {
				lc.t.Fatal("guard closed its output")
			}
			if match(m) {
				return m
			}
			if !isNotification(m) {
				lc.t.Fatalf("waiting for %s: %v", what, m)
			}
		case <-deadline:
			lc.t.Fatalf("no %s within %v", what, timeout)
		}
	}
}

// isNotification reports whether m is a notification: a method, no id.
func isNotification(m map[string]any) bool {
	_, hasMethod := m["method"]
	return hasMethod && m["id"] == nil
}

func (lc *lineClient) init() {
	lc.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"lines","version":"1"}}}`)
	lc.next(20 * time.Second)
	lc.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	lc.send(`{"jsonrpc":"2.0","id":"list","method":"tools/list"}`)
	lc.next(20 * time.Second)
}

func resultText(m map[string]any) (string, bool) {
	r, _ := m["result"].(map[string]any)
	if r == nil {
		return "", false
	}
	var b strings.Builder
	for _, c := range r["content"].([]any) {
		b.WriteString(c.(map[string]any)["text"].(string))
	}
	isErr, _ := r["isError"].(bool)
	return b.String(), isErr
}

// A held call is approved from another process and the client receives the
// server's real result; a second identical call is held again (single use).
func TestHeldCallApprovedFromAnotherProcess(t *testing.T) {
	e := newEnv(t, "approval: {wait: 30s}\n")
	lc := startLines(t, e.wrap("notes", guardBin, "example-server"))
	lc.init()
	lc.send(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"delete_note","arguments":{"title":"welcome"},"_meta":{"progressToken":"p7"}}}`)
	var id string
	deadline := time.Now().Add(10 * time.Second)
	for id == "" && time.Now().Before(deadline) {
		out, _ := e.guard("approvals", "list", "--format", "jsonl")
		if i := strings.Index(out, `"id":"`); i >= 0 {
			id = out[i+6 : i+6+36]
		}
		time.Sleep(50 * time.Millisecond)
	}
	if id == "" {
		t.Fatal("the call was not held")
	}
	out, code := e.guard("approvals", "approve", id, "--by", "alice")
	if code != 0 {
		t.Fatalf("approve: %d %s", code, out)
	}
	approved := time.Now()
	m := lc.next(10 * time.Second)
	// The 250 ms bound on seeing a decision is asserted where it can be
	// measured alone (approvals, store); here the lag also holds the
	// server's work and two pipe hops, on a machine running other tests.
	lag := time.Since(approved)
	t.Logf("the result arrived %v after the approval", lag)
	if lag > time.Second {
		t.Errorf("the waiting process saw the decision after %v", lag)
	}
	if text, isErr := resultText(m); isErr || text != "deleted welcome" || m["id"] != 7.0 {
		t.Fatalf("after approval: %v", m)
	}
	// First decision wins.
	out, code = e.guard("approvals", "deny", id, "--reason", "too late", "--by", "bob")
	if code != 1 || !strings.Contains(out, "approved by alice") {
		t.Fatalf("a second decision: %d %s", code, out)
	}
	out, _ = e.guard("audit", "query", "--format", "jsonl", "--tool", "delete_note")
	if !strings.Contains(out, `"decided_by":"alice"`) || !strings.Contains(out, `"outcome":"ok"`) {
		t.Fatalf("audit of the approved call: %s", out)
	}
}

// A call that waits longer than approval.wait gets the retry answer; once a
// person approves, the identical call passes once, and only once.
func TestWaitLimitThenRetryPassesOnce(t *testing.T) {
	e := newEnv(t, "approval: {wait: 300ms}\n")
	lc := startLines(t, e.wrap("notes", guardBin, "example-server"))
	lc.init()
	call := `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"run_task","arguments":{"task":"backup"}}}`
	lc.send(fmt.Sprintf(call, 1))
	text, isErr := resultText(lc.next(10 * time.Second))
	if !isErr || !strings.HasPrefix(text, "Waiting for approval (id ") {
		t.Fatalf("first call: %q", text)
	}
	id := text[len("Waiting for approval (id ") : len("Waiting for approval (id ")+36]
	if out, code := e.guard("approvals", "approve", id, "--by", "carol"); code != 0 {
		t.Fatalf("approve: %s", out)
	}
	lc.send(fmt.Sprintf(call, 2))
	if text, isErr := resultText(lc.next(10 * time.Second)); isErr || text != "done: backup" {
		t.Fatalf("retry after approval: %q", text)
	}
	lc.send(fmt.Sprintf(call, 3))
	if text, isErr := resultText(lc.next(10 * time.Second)); !isErr || !strings.HasPrefix(text, "Waiting for approval") {
		t.Fatalf("a third identical call passed without a new approval: %q", text)
	}
}

// A held call expires when no one decides within approval.timeout, and a
// cancelled held call is withdrawn.
func TestExpiryAndCancellation(t *testing.T) {
	e := newEnv(t, "approval: {timeout: 400ms, wait: 10s}\n")
	lc := startLines(t, e.wrap("notes", guardBin, "example-server"))
	lc.init()
	lc.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_note","arguments":{"title":"a"}}}`)
	if text, isErr := resultText(lc.next(10 * time.Second)); !isErr || text != "Expired: no one decided on this call within 400ms" {
		t.Fatalf("expiry: %q", text)
	}
	if out, _ := e.guard("approvals", "list", "--state", "all", "--format", "jsonl"); !strings.Contains(out, `"state":"expired"`) {
		t.Fatalf("approvals after expiry: %s", out)
	}

	// A cancellation, under a timeout no run of the test reaches first.
	e = newEnv(t, "approval: {timeout: 10m, wait: 10s}\n")
	lc = startLines(t, e.wrap("notes", guardBin, "example-server"))
	lc.init()
	// guard tells a client that set a progressToken once its call is held:
	// it is cancelled then.
	lc.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"delete_note","arguments":{"title":"b"},"_meta":{"progressToken":"p2"}}}`)
	params, _ := lc.progress(10 * time.Second)["params"].(map[string]any)
	held, _ := params["message"].(string)
	const waiting = "waiting for approval at the guard UI; approval id "
	if !strings.HasPrefix(held, waiting) {
		t.Fatalf("progress of the held call: %q", held)
	}
	lc.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"user gave up"}}`)
	lc.send(`{"jsonrpc":"2.0","id":3,"method":"ping"}`)
	if m := lc.next(10 * time.Second); m["id"] != 3.0 {
		t.Fatalf("a cancelled call was answered: %v", m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if a := e.approvalState(ctx, strings.TrimPrefix(held, waiting)); a["state"] != guard.ApprovalWithdrawn {
		t.Fatalf("the cancelled held call: %v", a)
	}
	out, _ := e.guard("approvals", "list", "--state", "all", "--format", "jsonl")
	if !strings.Contains(out, `"state":"withdrawn"`) {
		t.Fatalf("approvals after cancellation: %s", out)
	}
	out, code := e.guard("approvals", "approve", strings.TrimPrefix(held, waiting), "--by", "late")
	if code != 1 {
		t.Fatalf("deciding a withdrawn call: %d %s", code, out)
	}
}

// A server that dies mid-call: the pending call gets the contract's error,
// the exit is recorded, and guard exits with the server's status.
func TestServerCrashMidCall(t *testing.T) {
	e := newEnv(t, "policy: {default: allow}\n")
	lc := startLines(t, e.wrap("notes", guardBin, "example-server"))
	lc.init()
	// The server reports progress once it runs the call: it is killed then.
	lc.send(`{"jsonrpc":"2.0","id":"slow","method":"tools/call","params":{"name":"run_task","arguments":{"task":"long","seconds":30},"_meta":{"progressToken":"p"}}}`)
	lc.progress(10 * time.Second)
	child := childOf(t, lc.cmd.Process.Pid)
	if p, err := os.FindProcess(child); err != nil || p.Kill() != nil {
		t.Fatalf("killing the server %d: %v", child, err)
	}
	m := lc.next(10 * time.Second)
	errObj, _ := m["error"].(map[string]any)
	if m["id"] != "slow" || errObj == nil || errObj["code"] != -32603.0 ||
		errObj["message"] != "The server exited (signal 9, killed) before answering" {
		t.Fatalf("answer to the pending call: %v", m)
	}
	err := lc.cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 137 {
		t.Fatalf("guard's exit: %v", err)
	}
	out, _ := e.guard("audit", "query", "--format", "jsonl")
	if !strings.Contains(out, `"outcome":"upstream_failed"`) {
		t.Fatalf("the failed call was not recorded: %s", out)
	}
}

func childOf(t *testing.T, pid int) int {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		// The child may have been started by any of guard's threads.
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
		for _, task := range tasks {
			b, _ := os.ReadFile(task)
			if f := strings.Fields(string(b)); len(f) > 0 {
				var c int
				fmt.Sscan(f[0], &c)
				return c
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the server process was not found")
	return 0
}

// Self-protection: a call whose arguments name guard's database (on
// PostgreSQL, where the database is a server's, the checkpoint key) is
// denied.
func TestSelfProtection(t *testing.T) {
	e := newEnv(t, "policy: {default: allow}\n")
	own := e.db
	if e.key != "" {
		own = e.key
	}
	lc := startLines(t, e.wrap("notes", guardBin, "example-server"))
	lc.init()
	lc.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write_note","arguments":{"title":"x","body":"sqlite3 ` + own + ` 'delete from records'"}}}`)
	text, isErr := resultText(lc.next(10 * time.Second))
	if !isErr || text != `Denied by policy rule "guard-self-protection": arguments name guard's own files` {
		t.Fatalf("got %q", text)
	}
}

// A bad configuration exits 2 naming the file, line and problem.
func TestBadConfigExits2(t *testing.T) {
	e := newEnv(t, "policy:\n  default: allow\n  rules:\n    - {name: x, acton: deny}\n")
	out, code := e.guard("run", "--no-ui", "--", guardBin, "example-server")
	if code != 2 || !strings.Contains(out, e.cfg+":4: unknown key \"acton\"") {
		t.Fatalf("got %d: %s", code, out)
	}
}

// Several guard processes write one database at once without losing a
// record or breaking the chain.
func TestSeveralProcessesOneDatabase(t *testing.T) {
	e := newEnv(t, "durability: normal\npolicy: {default: allow}\n")
	const procs, calls = 3, 40
	done := make(chan error, procs)
	for p := range procs {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			argv := e.wrap(fmt.Sprintf("notes%d", p), guardBin, "example-server")
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Stderr = os.Stderr
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).
				Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
			if err != nil {
				done <- err
				return
			}
			for i := range calls {
				if _, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": fmt.Sprint(i)}}); err != nil {
					break
				}
			}
			// Each guard has ended before the test reads the log and
			// its directory goes.
			if cerr := cs.Close(); err == nil {
				err = cerr
			}
			done <- err
		}()
	}
	for range procs {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	out, code := e.guard("audit", "verify")
	if code != 0 {
		t.Fatalf("verify: %s", out)
	}
	out, _ = e.guard("audit", "query", "--format", "csv", "--tool", "echo")
	if n := strings.Count(out, "\n") - 1; n != procs*calls {
		t.Fatalf("%d echo calls recorded, want %d", n, procs*calls)
	}
}

// A server's notifications/tools/list_changed reaches the client and makes
// guard list the tools again: the new tool is in the catalog and callable.
func TestToolListChangedRefreshesTheCatalog(t *testing.T) {
	// A tool that appears after the first listing passes at once only
	// with new_tools: allow (by default it waits for a person).
	e := newEnv(t, "servers: {conformance: {new_tools: allow}}\npolicy: {default: allow}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	changed := make(chan struct{}, 4)
	client := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	argv := e.wrap("conformance", guardtest.EverythingServer(t))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-06-18"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "test_trigger_tool_change", Arguments: map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("the client never heard of the change")
	}
	db := e.open(ctx)
	defer db.Close()
	for {
		tools, err := db.Catalog().Tools(ctx, "conformance")
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, tl := range tools {
			found = found || tl.Name == "__transient_tool_for_list_changed" && strings.HasPrefix(tl.Pin, "sha256:")
		}
		if found {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("guard's catalog never learned the new tool")
		case <-time.After(50 * time.Millisecond):
		}
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "__transient_tool_for_list_changed", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("calling the new tool: %v %v", res, err)
	}
}

// SIGTERM sent to guard reaches the server, and guard exits with the
// server's status.
func TestSignalsAreForwarded(t *testing.T) {
	e := newEnv(t, "policy: {default: allow}\n")
	// The shell makes a file once its trap is set: the signal is sent then.
	ready := filepath.Join(t.TempDir(), "trap-set")
	argv := e.wrap("trap", "sh", "-c", `trap 'exit 3' TERM; : >"$1"; while true; do sleep 0.05; done`, "sh", ready)
	cmd := exec.Command(argv[0], argv[1:]...)
	stdin, _ := cmd.StdinPipe()
	defer stdin.Close()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	childOf(t, cmd.Process.Pid)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the server's shell never set its trap")
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Fatalf("guard's exit after SIGTERM: %v", err)
	}
}

// When the client closes its input, the server's input is closed; a server
// that neither exits nor heeds SIGTERM is killed.
func TestShutdownOfAServerThatWillNotStop(t *testing.T) {
	e := newEnv(t, "policy: {default: allow}\n")
	argv := e.wrap("stubborn", "sh", "-c", `trap '' TERM; exec 0<&-; while true; do sleep 0.05; done`)
	cmd := exec.Command(argv[0], argv[1:]...)
	stdin, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	childOf(t, cmd.Process.Pid)
	start := time.Now()
	stdin.Close()
	err := cmd.Wait()
	took := time.Since(start)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 137 {
		t.Fatalf("guard's exit: %v", err)
	}
	// stdin closed, 5 s, SIGTERM (ignored), 5 s, SIGKILL
	if took < 9*time.Second || took > 20*time.Second {
		t.Fatalf("the server was killed after %v, want about 10s", took)
	}
}

// A server that exits while a process it started keeps its stdout open:
// guard notices the exit and ends anyway.
func TestServerExitWhileItsChildHoldsStdout(t *testing.T) {
	e := newEnv(t, "policy: {default: allow}\n")
	argv := e.wrap("forker", "sh", "-c", `sleep 30 & exit 4`)
	cmd := exec.Command(argv[0], argv[1:]...)
	stdin, _ := cmd.StdinPipe()
	defer stdin.Close()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 4 {
			t.Fatalf("guard's exit: %v", err)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Fatalf("guard took %v to notice", took)
		}
	case <-time.After(15 * time.Second):
		cmd.Process.Kill()
		t.Fatal("guard waited for the server's child")
	}
}

// No call waits on guard's background work: over a few thousand calls, in
// both durabilities, none takes seconds. (A deadline for stalls, not a
// speed goal: those are the benchmark's.)
func TestNoCallStalls(t *testing.T) {
	for _, d := range []string{"normal", "full"} {
		t.Run(d, func(t *testing.T) {
			e := newEnv(t, "durability: "+d+"\npolicy: {default: allow}\n")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			argv := e.wrap("notes", guardBin, "example-server")
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Stderr = os.Stderr
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).
				Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			var worst time.Duration
			for i := range 1500 {
				t0 := time.Now()
				if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": fmt.Sprint(i)}}); err != nil {
					t.Fatal(err)
				}
				worst = max(worst, time.Since(t0))
			}
			t.Logf("slowest of 1500 calls: %v", worst)
			if worst > 2*time.Second {
				t.Fatalf("a call took %v", worst)
			}
		})
	}
}
