package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/e2e/guardtest"
	"github.com/guard-mcp/guard/store"
)

// freePort returns a loopback address no one listens on now.
func freePort(t *testing.T) string { return guardtest.FreePort(t) }

// uiProcess is a guard run serving (or waiting to serve) the UI on addr.
func (e *env) uiProcess(ctx context.Context, addr string) (*mcp.ClientSession, *exec.Cmd) {
	e.t.Helper()
	cmd := exec.Command(guardBin, "run", "--config", e.cfg, "--db", e.db, "--name", "notes", "--ui", addr, "--", guardBin, "example-server")
	if e.environ != nil {
		cmd.Env = append(os.Environ(), e.environ...)
	}
	cmd.Stderr = os.Stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).
		Connect(ctx, &mcp.CommandTransport{Command: cmd}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := cs.ListTools(ctx, nil); err != nil {
		e.t.Fatal(err)
	}
	return cs, cmd
}

// browserSession logs in to the UI with the token from guard ui url.
func (e *env) browserSession(addr string) *http.Client {
	e.t.Helper()
	out, code := e.guard("ui", "url")
	if code != 0 {
		e.t.Fatalf("ui url: %s", out)
	}
	url := strings.Replace(strings.TrimSpace(out), "127.0.0.1:8931", addr, 1)
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 5 * time.Second}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return c
			}
			e.t.Fatalf("login: %s", resp.Status)
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the UI never answered on %s: %v", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func get(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Two guard processes share one UI: the first serves it, a call held by
// the second shows in it, and when the first exits the second takes over.
func TestOneUIForManyProcesses(t *testing.T) {
	e := newEnv(t, "approval: {wait: 30s}\n")
	addr := freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	first, firstCmd := e.uiProcess(ctx, addr)
	c := e.browserSession(addr)
	second, _ := e.uiProcess(ctx, addr)
	defer second.Close()

	got := goCall(func() (*mcp.CallToolResult, error) {
		return second.CallTool(ctx, &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"title": "welcome"}})
	})
	a := e.pendingFor(ctx, "delete_note")
	code, body := get(t, c, "http://"+addr+"/fragments/pending")
	if code != http.StatusOK || !strings.Contains(body, fmt.Sprintf(`data-approval-id="%s"`, a.ID)) {
		t.Fatalf("the UI served by the first process does not show the second's held call (%d):\n%.2000s", code, body)
	}

	// The first exits; the second takes over within seconds.
	first.Close()
	firstCmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		// A new login: the sessions of the old server are gone with it.
		if resp, err := http.Get("http://" + addr + "/"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusUnauthorized {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no process took the UI over")
		}
		time.Sleep(100 * time.Millisecond)
	}
	c = e.browserSession(addr)
	if code, body := get(t, c, "http://"+addr+"/fragments/pending"); code != http.StatusOK || !strings.Contains(body, a.ID) {
		t.Fatalf("after the takeover (%d):\n%.2000s", code, body)
	}
	// The servers and tools page says what the policy does with each.
	code, body = get(t, c, "http://"+addr+"/tools")
	for _, want := range []string{"held for approval by default: destructive tool (destructiveHint true)", "allowed by default: read-only tool (readOnlyHint true)"} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("the tools page lacks %q (%d)", want, code)
		}
	}
	if out, code := e.guard("approvals", "approve", a.ID, "--by", "dora"); code != 0 {
		t.Fatalf("approve: %s", out)
	}
	if r := awaitCall(t, got); r == nil || r.IsError {
		t.Fatalf("the approved call: %v", r)
	}
}

// With 10,000 calls pending, the guard that serves the UI stays under
// 100 MiB while it renders them (peak resident memory, from /proc).
func TestUIMemoryWith10000Pending(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 10,000 approvals")
	}
	e := newEnv(t, "approval: {timeout: 1h}\n")
	addr := freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cs, cmd := e.uiProcess(ctx, addr)
	defer cs.Close()
	o := e.storeOptions()
	o.Durability = "normal"
	db, err := store.Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for i := range 10000 {
		args := fmt.Sprintf(`{"path":"/srv/data/file-%05d.txt","content":"%s"}`, i, strings.Repeat("x", 200))
		if err := db.Holds().CreateApproval(ctx, &guard.Approval{ID: fmt.Sprintf("approval-%05d", i), Server: "files", Tool: "write_file",
			Arguments: args, Digest: fmt.Sprint(i), Rule: "default", HeldReason: "destructive tool", State: guard.ApprovalPending,
			CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	c := e.browserSession(addr)
	start := time.Now()
	code, body := get(t, c, "http://"+addr+"/")
	if code != http.StatusOK || !strings.Contains(body, `data-approval-id="approval-09999"`) {
		t.Fatalf("the pending page (%d, %d bytes)", code, len(body))
	}
	t.Logf("pending page with 10,000 calls: %d bytes in %v", len(body), time.Since(start))
	get(t, c, "http://"+addr+"/fragments/pending")
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			var kb int
			fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(line, "VmHWM:")), "%d", &kb)
			t.Logf("guard's peak resident memory: %d KiB", kb)
			if kb > 100<<10 {
				t.Fatalf("guard's peak resident memory %d KiB is over 100 MiB", kb)
			}
			return
		}
	}
	t.Fatal("no VmHWM in /proc status")
}
