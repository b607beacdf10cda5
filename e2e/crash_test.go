package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// callerCount is how many calls the client of the crash test keeps under
// way at once: at most these are answered by guard and not yet seen by
// the client when guard is killed.
const callerCount = 8

// A guard run killed with SIGKILL in the middle of a stream of calls: right
// after, before any guard opens the database for writing, guard audit
// query and guard audit export show every call the client saw answered
// (at most the calls under way besides, whose answers guard had sent),
// and guard audit verify exits 3, saying that acknowledged records are
// not yet in the chain, rather than "ok".
func TestAKilledGuardsAcknowledgedCallsAreAllShown(t *testing.T) {
	sqliteOnly(t, "PostgreSQL acknowledges a record once committed: there is no journal")
	e := newEnv(t, "durability: normal\npolicy: {default: allow}\n")
	argv := e.wrap("notes", guardBin, "example-server")
	cmd := exec.Command(argv[0], argv[1:]...)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "crash", Version: "1"}, nil).
		Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const killAfter = 1500
	var mu sync.Mutex
	answered := map[string]bool{}
	var next atomic.Int64
	killed := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for range callerCount {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				text := fmt.Sprintf("call-%d", next.Add(1))
				res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": text}})
				if err != nil {
					return // guard is gone
				}
				if res.IsError {
					t.Errorf("%s: %v", text, res.Content)
					return
				}
				mu.Lock()
				answered[text] = true
				n := len(answered)
				mu.Unlock()
				if n == killAfter {
					once.Do(func() {
						if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
							t.Error(err)
						}
						close(killed)
					})
				}
			}
		}()
	}
	wg.Wait()
	<-killed
	_ = cs.Close()
	if cmd.ProcessState == nil || cmd.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("guard run was not killed: %v", cmd.ProcessState)
	}

	calls := regexp.MustCompile(`call-\d+`)
	shown := func(what string, lines string, ok func(string) bool) map[string]bool {
		t.Helper()
		got := map[string]bool{}
		for _, l := range strings.Split(lines, "\n") {
			if c := calls.FindString(l); c != "" && ok(l) {
				got[c] = true
			}
		}
		var missing []string
		for c := range answered {
			if !got[c] {
				missing = append(missing, c)
			}
		}
		if len(missing) > 0 || len(got) > len(answered)+callerCount {
			t.Errorf("%s shows %d calls answered ok, the client saw %d answered; missing: %v", what, len(got), len(answered), missing)
		}
		t.Logf("%s: %d calls answered ok; the client saw %d", what, len(got), len(answered))
		return got
	}
	out, code := e.guard("audit", "query", "--format", "jsonl")
	if code != 0 {
		t.Fatalf("guard audit query: exit %d\n%s", code, out)
	}
	queried := shown("guard audit query", out, func(l string) bool { return strings.Contains(l, `"outcome":"ok"`) })

	out, code = e.guard("audit", "export")
	if code != 0 {
		t.Fatalf("guard audit export: exit %d\n%s", code, out)
	}
	// A call's outcome record names its call id, its request its text.
	okCalls := map[string]bool{}
	callID := regexp.MustCompile(`"call_id":"([^"]+)"`)
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, `"kind":"outcome"`) && strings.Contains(l, `"outcome":"ok"`) {
			if m := callID.FindStringSubmatch(l); m != nil {
				okCalls[m[1]] = true
			}
		}
	}
	exported := shown("guard audit export", out, func(l string) bool {
		m := callID.FindStringSubmatch(l)
		return strings.Contains(l, `"kind":"request"`) && m != nil && okCalls[m[1]]
	})
	if len(exported) != len(queried) {
		t.Errorf("the export shows %d calls answered, the query %d", len(exported), len(queried))
	}

	out, code = e.guard("audit", "verify")
	if code != 3 || !strings.Contains(out, "acknowledged records not yet in the chain (journals of stopped processes); any writable guard command moves them in") {
		t.Errorf("guard audit verify right after the crash: exit %d\n%s", code, out)
	}
}
