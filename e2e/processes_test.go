package e2e

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	guard "github.com/guard-mcp/guard"
)

// heartbeat is the beat of the guard processes these tests start
// (GUARD_TEST_HEARTBEAT): a killed one is found gone within a second.
const heartbeat = "GUARD_TEST_HEARTBEAT=100ms"

// A guard run killed (SIGKILL) while a call it holds, scoped to its
// session, waits for a person: no one withdraws the hold while no guard
// runs, and the next guard on the database does, once it has beaten for
// the killed one's lapse, recording why and naming the process; approving
// it then exits 1 saying the process is gone.
func TestTheHoldOfAKilledGuardIsWithdrawn(t *testing.T) {
	e := newEnv(t, "approval: {wait: 300ms}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	argv := e.wrap("notes", guardBin, "example-server")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), heartbeat)
	cmd.Stderr = os.Stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "doomed", Version: "1"}, nil).
		Connect(ctx, &mcp.CommandTransport{Command: cmd}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	id := retryID(t, cs)
	pid := cmd.Process.Pid
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cs.Close()
	if a := e.approvalsAll()[id]; a["state"] != guard.ApprovalPending {
		t.Fatalf("the hold once its guard was killed, before another runs: %v", a)
	}

	e.connect(ctx, mcp.NewClient(&mcp.Implementation{Name: "next", Version: "1"}, nil), "2025-11-25", []string{heartbeat},
		"notes", guardBin, "example-server")
	var a map[string]any
	for a = e.approvalsAll()[id]; a["state"] == guard.ApprovalPending; a = e.approvalsAll()[id] {
		select {
		case <-ctx.Done():
			t.Fatalf("the hold of the killed guard was not withdrawn: %v", a)
		case <-time.After(100 * time.Millisecond):
		}
	}
	why := "the guard process that held the call is gone: guard run (pid " + strconv.Itoa(pid) + " on "
	if a["state"] != guard.ApprovalWithdrawn || !strings.HasPrefix(a["reason"].(string), why) {
		t.Fatalf("the hold of the killed guard: %v, want withdrawn: %s...", a, why)
	}
	out, _ := e.guard("audit", "query", "--kind", "decision", "--format", "jsonl", "--approval", id)
	if !strings.Contains(out, `"decision":"withdrawn"`) || !strings.Contains(out, why) {
		t.Fatalf("no record of the withdrawal: %s", out)
	}
	out, code := e.guard("approvals", "approve", id, "--by", "alice")
	if code != 1 || !strings.Contains(out, "already decided: withdrawn at ") || !strings.Contains(out, why) {
		t.Fatalf("approving the withdrawn hold: %d %s", code, out)
	}
}
