package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/e2e/guardtest"
)

// callClient starts testdata/node/call-client.mjs, the official TypeScript
// SDK's client, calling tool with args through target ("-- COMMAND..." or
// "--url URL"), and returns it with its output's lines.
func callClient(t *testing.T, tool, args string, target ...string) (*exec.Cmd, <-chan map[string]any) {
	t.Helper()
	guardtest.Peer(t, "", "testdata/node/node_modules/@modelcontextprotocol/sdk")
	c := exec.Command(guardtest.Node(t), append([]string{filepath.Join(guardtest.RepoRoot(), "testdata/node/call-client.mjs"),
		"--tool", tool, "--args", args}, target...)...)
	c.Dir = filepath.Join(guardtest.RepoRoot(), "testdata/node")
	c.Stderr = os.Stderr
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	lines := make(chan map[string]any, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				lines <- m
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	return c, lines
}

// approvalState waits until an approval has left pending (or, under scope
// any, is marked as its client gone) and returns its jsonl line.
func (e *env) approvalState(ctx context.Context, id string) map[string]any {
	e.t.Helper()
	for {
		if l := e.approvalsAll()[id]; l != nil && (l["state"] != guard.ApprovalPending || l["session_ended"] != "") {
			return l
		}
		select {
		case <-ctx.Done():
			e.t.Fatalf("approval %s is still pending: %v", id, e.approvalsAll()[id])
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// withdrawalOf returns the reason of the decision record that withdrew an
// approval.
func (e *env) withdrawalOf(ctx context.Context, id string) string {
	reason, _ := e.withdrawal(ctx, id)
	return reason
}

// withdrawal returns the reason and time of the decision record that
// withdrew an approval.
func (e *env) withdrawal(ctx context.Context, id string) (string, time.Time) {
	e.t.Helper()
	db := e.openReadOnly(ctx)
	defer db.Close()
	reason, at := "", time.Time{}
	if err := db.Reader().Records(ctx, func(r *guard.Record) error {
		if r.Kind == guard.KindDecision && r.Approval == id && r.Decision == guard.ApprovalWithdrawn {
			reason, at = r.Reason, r.Time
		}
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
	return reason, at
}

// A TypeScript SDK client makes a held write_file through guard run in
// front of the reference filesystem server, and is killed while it waits:
// the hold is withdrawn at once (not after approval.wait, five minutes
// here) and recorded so, approving it afterwards fails with why (exit 1),
// the file is never written, and guard run ends with its server.
func TestAKilledClientsHeldCallNeverRuns(t *testing.T) {
	e := newEnv(t, "approval: {wait: 5m}\n")
	root := t.TempDir()
	target := filepath.Join(root, "planted.txt")
	node, js := guardtest.Node(t), filesystemServer(t)
	client, lines := callClient(t, "write_file", `{"path":"`+target+`","content":"from a client that is gone"}`,
		append([]string{"--"}, e.wrap("files", node, js, root)...)...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if m := <-lines; m["step"] != "listed" {
		t.Fatalf("the client's first step: %v", m)
	}
	a := e.pendingFor(ctx, "write_file")
	guardPID := childOf(t, client.Process.Pid)
	killed := time.Now()
	if err := client.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	client.Wait()
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second) // well before approval.wait
	defer wcancel()
	if l := e.approvalState(wctx, a.ID); l["state"] != guard.ApprovalWithdrawn {
		t.Fatalf("the hold of a killed client: %v", l)
	}
	why, at := e.withdrawal(ctx, a.ID)
	if !strings.HasPrefix(why, "the call's client is gone") {
		t.Fatalf("the withdrawal's reason: %q", why)
	}
	t.Logf("the withdrawal was recorded %v after the client was killed", at.Sub(killed).Round(time.Millisecond))
	out, code := e.guard("approvals", "approve", a.ID, "--by", "erin")
	if code != 1 || !strings.Contains(out, "the call's client is gone") {
		t.Fatalf("approving the call of a killed client: exit %d\n%s", code, out)
	}
	// guard run ends (its server with it) once the client is gone.
	for deadline := time.Now().Add(20 * time.Second); ; {
		if _, err := os.Stat("/proc/" + strconv.Itoa(guardPID)); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("guard run did not end after its client was killed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Fatalf("the held write reached the server: %v", err)
	}
}

// The same through guard serve: the client's response stream drops with it
// and is not resumed within 10s, so its held call counts as its client's
// gone.
func TestAKilledHTTPClientsHeldCallNeverRuns(t *testing.T) {
	root := t.TempDir()
	target := filepath.Join(root, "planted.txt")
	node, js := guardtest.Node(t), filesystemServer(t)
	e := newEnv(t, "approval: {wait: 5m}\nservers:\n  files:\n    command: ["+node+", "+js+", "+root+"]\n")
	url := e.serve() + "/mcp/files"
	client, lines := callClient(t, "write_file", `{"path":"`+target+`","content":"from a client that is gone"}`, "--url", url)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if m := <-lines; m["step"] != "listed" {
		t.Fatalf("the client's first step: %v", m)
	}
	a := e.pendingFor(ctx, "write_file")
	if err := client.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	client.Wait()
	if l := e.approvalState(ctx, a.ID); l["state"] != guard.ApprovalWithdrawn {
		t.Fatalf("the hold of a killed client: %v", l)
	}
	if why := e.withdrawalOf(ctx, a.ID); !strings.Contains(why, "not resumed within 10s") {
		t.Fatalf("the withdrawal's reason: %q", why)
	}
	if out, code := e.guard("approvals", "approve", a.ID, "--by", "erin"); code != 1 || !strings.Contains(out, "the call's client is gone") {
		t.Fatalf("approving the call of a killed client: exit %d\n%s", code, out)
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Fatalf("the held write reached the server: %v", err)
	}
}

// On 2026-07-28 a hold belongs to the client as the front knows it: once
// guard has told the call to retry, the request's stream has ended and
// nothing is withdrawn; approved, the client's next identical call passes.
func TestAHoldToldToRetryOn20260728OutlivesItsStream(t *testing.T) {
	e, url := serveExample(t, "approval: {wait: 1s}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "http", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	args := &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"title": "welcome"}}
	r, err := cs.CallTool(ctx, args)
	if err != nil || !r.IsError || !strings.HasPrefix(r.Content[0].(*mcp.TextContent).Text, "Waiting for approval (id ") {
		t.Fatalf("the held call: %v %v", r, err)
	}
	a := e.pendingFor(ctx, "delete_note")
	if out, code := e.guard("approvals", "approve", a.ID, "--by", "erin"); code != 0 {
		t.Fatalf("approving a hold whose stream ended after its retry answer: %s", out)
	}
	if r, err = cs.CallTool(ctx, args); err != nil || r.IsError || r.Content[0].(*mcp.TextContent).Text != "deleted welcome" {
		t.Fatalf("the call made again after approval: %v %v", r, err)
	}
}
