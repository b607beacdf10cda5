// Package soak runs sustained load through guard run and guard serve and
// checks that the audit path keeps up: every call is answered (none refused
// because the audit log fell behind), every call is recorded, and the log
// verifies. Size it with GUARD_SOAK_CALLS (calls per configuration).
package soak

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	_ "modernc.org/sqlite" // the database/sql driver "sqlite"

	"github.com/guard-mcp/guard/e2e/guardtest"
)

// defaultCalls is the calls per configuration when GUARD_SOAK_CALLS is not
// set: each configuration crosses the ~39,000 calls at which the journal
// of earlier versions filled for good, and the package stays within a few
// minutes on a 2-core machine.
const defaultCalls = 60000

var guardBin string

func TestMain(m *testing.M) {
	guardtest.Main(m, "../../cmd/guard", &guardBin)
}

func soakCalls(t *testing.T) int {
	t.Helper()
	s := os.Getenv("GUARD_SOAK_CALLS")
	if s == "" {
		return defaultCalls
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		t.Fatalf("GUARD_SOAK_CALLS=%q: want a positive number", s)
	}
	return n
}

// setup writes a configuration with the given durability and returns the
// database and configuration paths.
func setup(t *testing.T, durability, extra string) (db, cfg string) {
	t.Helper()
	dir := t.TempDir()
	db, cfg = filepath.Join(dir, "data", "guard.db"), filepath.Join(dir, "guard.yaml")
	conf := "durability: " + durability + "\npolicy:\n  default: allow\n" + extra
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return db, cfg
}

// drive makes calls calls of echo, spread over the sessions, with callers
// goroutines per session, and fails on any error or refusal.
func drive(t *testing.T, sessions []*mcp.ClientSession, callers, calls int) time.Duration {
	t.Helper()
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for _, cs := range sessions {
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(calls) && failed.Load() == 0 {
					res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "soak"}})
					if err == nil && res.IsError {
						err = fmt.Errorf("%v", res.Content)
					}
					if err != nil {
						if failed.Add(1) == 1 {
							t.Errorf("call %d: %v", next.Load(), err)
						}
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.FailNow()
	}
	return time.Since(start)
}

// stderrLog keeps a process's stderr and finds guard's closing figures in it.
type stderrLog struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *stderrLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *stderrLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

var peakRE = regexp.MustCompile(`msg="audit log closed".*peak_backlog=(\d+)`)

// peak is the peak backlog guard logged when it closed its database.
func (l *stderrLog) peak(t *testing.T) string {
	t.Helper()
	m := peakRE.FindStringSubmatch(l.String())
	if m == nil {
		t.Fatalf("guard did not log its closing figures; stderr:\n%s", tail(l.String()))
	}
	return m[1]
}

func tail(s string) string {
	if len(s) > 4000 {
		return "..." + s[len(s)-4000:]
	}
	return s
}

// check counts what the database recorded for tools/call and runs guard
// audit verify.
func check(t *testing.T, db, cfg string, calls int) {
	t.Helper()
	r, err := sql.Open("sqlite", "file:"+db+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	counts := map[string]int{}
	rows, err := r.Query(`SELECT kind, count(*) FROM records WHERE method = 'tools/call' GROUP BY kind`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		counts[k] = n
	}
	rows.Close()
	if counts["request"] != calls || counts["outcome"] != calls {
		t.Errorf("recorded %d requests and %d outcomes of tools/call, want %d of each", counts["request"], counts["outcome"], calls)
	}
	out, err := exec.Command(guardBin, "audit", "verify", "--config", cfg, "--db", db).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "ok, unwitnessed: ") {
		t.Errorf("guard audit verify: %v\n%s", err, out)
	}
}

func report(t *testing.T, name string, calls int, took time.Duration, peak string) {
	t.Helper()
	t.Logf("%-32s calls answered=%d  calls/s=%.0f  peak backlog=%s records", name, calls, float64(calls)/took.Seconds(), peak)
}

// guard run, one session, 8 concurrent callers.
func TestSoakRun(t *testing.T) {
	calls := soakCalls(t)
	for _, durability := range []string{"normal", "full"} {
		t.Run(durability, func(t *testing.T) {
			db, cfg := setup(t, durability, "")
			cmd := exec.Command(guardBin, "run", "--config", cfg, "--db", db, "--name", "soak", "--no-ui", "--", guardBin, "example-server")
			var logs stderrLog
			cmd.Stderr = &logs
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "soak", Version: "1"}, nil).
				Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
			if err != nil {
				t.Fatal(err)
			}
			took := drive(t, []*mcp.ClientSession{cs}, 8, calls)
			// Closing the session ends guard run: it exits once its server
			// has, after closing the database.
			if err := cs.Close(); err != nil {
				t.Logf("close: %v", err)
			}
			if cmd.ProcessState == nil || !cmd.ProcessState.Exited() {
				t.Fatalf("guard run had not exited after the session closed; stderr:\n%s", tail(logs.String()))
			}
			report(t, "guard run durability="+durability, calls, took, logs.peak(t))
			check(t, db, cfg, calls)
		})
	}
}

// guard serve, 16 clients, each its own session.
func TestSoakServe(t *testing.T) {
	calls := soakCalls(t)
	for _, durability := range []string{"normal", "full"} {
		t.Run(durability, func(t *testing.T) {
			db, cfg := setup(t, durability, "servers:\n  notes:\n    command: ["+guardBin+", example-server]\n")
			addr := guardtest.FreePort(t)
			cmd := exec.Command(guardBin, "serve", "--config", cfg, "--db", db, "--listen", addr, "--no-ui")
			var logs stderrLog
			cmd.Stderr = &logs
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			stopped := false
			stop := func() error {
				if stopped {
					return nil
				}
				stopped = true
				_ = cmd.Process.Signal(os.Interrupt)
				return <-exited
			}
			t.Cleanup(func() { _ = stop() })
			url := "http://" + addr
			waitReady(t, url+"/healthz", exited, &logs)
			var sessions []*mcp.ClientSession
			for range 16 {
				cs, err := mcp.NewClient(&mcp.Implementation{Name: "soak", Version: "1"}, nil).
					Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url + "/mcp/notes", HTTPClient: &http.Client{Transport: &http.Transport{}}}, nil)
				if err != nil {
					t.Fatal(err)
				}
				sessions = append(sessions, cs)
			}
			took := drive(t, sessions, 1, calls)
			for _, cs := range sessions {
				_ = cs.Close()
			}
			if err := stop(); err != nil {
				t.Logf("guard serve: %v", err)
			}
			report(t, "guard serve durability="+durability, calls, took, logs.peak(t))
			check(t, db, cfg, calls)
		})
	}
}

// waitReady waits until guard serve answers, failing at once if it exits.
func waitReady(t *testing.T, url string, exited chan error, logs *stderrLog) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if resp, err := http.Get(url); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("guard serve exited before it answered: %v\n%s", err, tail(logs.String()))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("guard serve at %s never answered", url)
		}
	}
}
