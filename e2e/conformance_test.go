package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

// conformanceSuites are the official suite and its pre-release, installed
// by scripts/test under testdata/node (their paths within node_modules).
var conformanceSuites = map[string]string{
	"0.1.16":         "@modelcontextprotocol/conformance/dist/index.js",
	"0.2.0-alpha.12": "conformance-next/dist/index.js",
}

var scenarioLine = regexp.MustCompile(`(?m)^([✓✗]) (\S+): (\d+) passed, (\d+) failed`)

// conformance runs a suite in server mode against url and returns each
// scenario's line ("✓ 2 passed, 0 failed").
func conformance(t *testing.T, suite, url string, args ...string) map[string]string {
	t.Helper()
	script := peer(t, "", filepath.Join(nodeModules(t), conformanceSuites[suite]))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeBin(t), append([]string{script, "server", "--url", url}, args...)...)
	cmd.Dir = t.TempDir()
	out, _ := cmd.CombinedOutput() // it exits non-zero when a check fails
	got := map[string]string{}
	for _, m := range scenarioLine.FindAllStringSubmatch(string(out), -1) {
		got[m[2]] = m[1] + " " + m[3] + " passed, " + m[4] + " failed"
	}
	if len(got) == 0 {
		t.Fatalf("the conformance suite %s reported nothing:\n%s", suite, out)
	}
	return got
}

// fixture starts go-sdk's conformance server over HTTP and returns its URL.
func fixture(t *testing.T, stateless bool) string {
	t.Helper()
	addr := freePort(t)
	cmd := exec.Command(everythingServer(t), "-http", addr, "-stateless="+map[bool]string{true: "true", false: "false"}[stateless])
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitHTTP(t, "http://"+addr+"/mcp")
	return "http://" + addr + "/mcp"
}

// serveThroughGuard runs guard serve with the conformance server as a stdio
// child and returns its endpoint.
func serveThroughGuard(t *testing.T, e *env) string {
	t.Helper()
	return e.serve() + "/mcp/conformance"
}

// serve runs guard serve on e's configuration, without the UI, and
// returns its base URL once it answers.
func (e *env) serve(flags ...string) string {
	e.t.Helper()
	addr := freePort(e.t)
	cmd := exec.Command(guardBin, append([]string{"serve", "--config", e.cfg, "--db", e.db, "--listen", addr, "--no-ui"}, flags...)...)
	cmd.Stderr = os.Stderr
	if e.environ != nil {
		cmd.Env = append(os.Environ(), e.environ...)
	}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	e.t.Cleanup(func() { cmd.Process.Signal(os.Interrupt); <-exited })
	deadline := time.Now().Add(10 * time.Second)
	for {
		if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
			return "http://" + addr
		}
		select {
		case err := <-exited: // a port taken meanwhile, a bad configuration
			exited <- err
			e.t.Fatalf("guard serve exited before it answered: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("guard serve at %s never answered", addr)
		}
	}
}

// sameScenarios fails unless at least 30 scenarios pass directly and every
// other run has exactly the scenarios of direct, with the same results.
func sameScenarios(t *testing.T, direct map[string]string, others map[string]map[string]string) {
	t.Helper()
	passed := 0
	for _, line := range direct {
		if strings.HasPrefix(line, "✓") {
			passed++
		}
	}
	if passed < 30 {
		t.Fatalf("directly, only %d scenarios pass: %v", passed, direct)
	}
	for how, got := range others {
		for k, v := range direct {
			if got[k] != v {
				t.Errorf("%s: directly %q, %s %q", k, v, how, got[k])
			}
		}
		for k, v := range got {
			if _, ok := direct[k]; !ok {
				t.Errorf("%s: only %s: %q", k, how, v)
			}
		}
	}
}

func waitHTTP(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never answered: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The official conformance suite passes against the go-sdk fixture reached
// through guard serve — the fixture a stdio child, or an HTTP upstream —
// exactly as it does directly over HTTP, under an allow-all policy; so does
// the pre-release's frozen 2025-11-25 requirement set.
func TestConformanceThroughGuardServe(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the conformance suite")
	}
	e := newEnv(t, "policy: {default: allow}\nservers:\n  conformance:\n    command: ["+everythingServer(t)+"]\n    new_tools: allow\n")
	through := serveThroughGuard(t, e)
	// The fixture as an HTTP upstream of guard serve.
	e2 := newEnv(t, "policy: {default: allow}\nservers:\n  conformance:\n    url: "+fixture(t, false)+"\n    new_tools: allow\n")
	throughHTTP := serveThroughGuard(t, e2)
	for _, run := range []struct {
		suite string
		args  []string
	}{
		{"0.1.16", nil},
		{"0.2.0-alpha.12", []string{"--requirements", "2025-11-25"}},
	} {
		t.Run(run.suite+strings.Join(run.args, " "), func(t *testing.T) {
			direct := conformance(t, run.suite, fixture(t, false), run.args...)
			guarded := conformance(t, run.suite, through, run.args...)
			viaHTTP := conformance(t, run.suite, throughHTTP, run.args...)
			// Not scored for 2025-11-25 (pending): the fixture's
			// test_reconnection tool closes its own HTTP stream mid-call
			// (SEP-1699 polling) to make the client reconnect; behind
			// guard that stream is guard's, which does not close it, so
			// the scenario finds nothing to check there.
			if strings.HasPrefix(guarded["server-sse-polling"], "✓ 0 passed, 0 failed") &&
				strings.HasPrefix(viaHTTP["server-sse-polling"], "✓ 0 passed, 0 failed") {
				delete(direct, "server-sse-polling")
				delete(guarded, "server-sse-polling")
				delete(viaHTTP, "server-sse-polling")
			}
			sameScenarios(t, direct, map[string]map[string]string{"through guard": guarded, "through guard to an HTTP upstream": viaHTTP})
			t.Logf("%d scenarios, the same directly and through guard serve", len(direct))
		})
	}
}

// guard run --upstream presents a server reached over HTTP to a stdio
// client, through the same checks: go-sdk clients of each revision see the
// fixture through it as they see it on stdio.
func TestRunUpstreamBridgesHTTPToStdio(t *testing.T) {
	url := fixture(t, false)
	for _, v := range []string{"2025-03-26", "2025-06-18", "2025-11-25"} {
		t.Run(v, func(t *testing.T) {
			sc := goScenario(v)
			direct := sc(t, []string{everythingServer(t)})
			e := newEnv(t, "policy: {default: allow}\nservers:\n  conformance: {new_tools: allow, headers: {X-Upstream-Key: from-config}}\n")
			through := sc(t, []string{guardBin, "run", "--config", e.cfg, "--db", e.db, "--name", "conformance", "--no-ui", "--upstream", url})
			if !reflect.DeepEqual(direct, through) {
				t.Fatalf("through guard run --upstream differs:\ndirect:  %v\nthrough: %v", direct, through)
			}
			out, _ := e.guard("audit", "query", "--format", "jsonl", "--tool", "test_simple_text")
			if !strings.Contains(out, `"server":"conformance"`) {
				t.Fatalf("the calls through the upstream bridge are not in the audit:\n%s", out)
			}
		})
	}
}

// When the upstream session is lost (the remote server restarted), a call
// is answered with an error that says so, never as a success.
func TestRunUpstreamLostSession(t *testing.T) {
	addr := freePort(t)
	start := func() *exec.Cmd {
		cmd := exec.Command(everythingServer(t), "-http", addr, "-stateless=false")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitHTTP(t, "http://"+addr+"/mcp")
		return cmd
	}
	srv := start()
	e := newEnv(t, "policy: {default: allow}\nservers:\n  conformance: {new_tools: allow}\n")
	lc := startLines(t, []string{guardBin, "run", "--config", e.cfg, "--db", e.db, "--name", "conformance", "--no-ui", "--upstream", "http://" + addr + "/mcp"})
	lc.init()
	lc.send(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"test_simple_text","arguments":{}}}`)
	if m := lc.next(20 * time.Second); m["result"] == nil {
		t.Fatalf("before the restart: %v", m)
	}
	srv.Process.Kill()
	srv.Wait()
	srv = start()
	defer func() { srv.Process.Kill(); srv.Wait() }()
	lc.send(`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"test_simple_text","arguments":{}}}`)
	m := lc.next(20 * time.Second)
	errObj, _ := m["error"].(map[string]any)
	if m["result"] != nil || errObj == nil || !strings.Contains(errObj["message"].(string), "session expired (HTTP 404)") {
		t.Fatalf("after the upstream lost the session: %v", m)
	}
	out, _ := e.guard("audit", "query", "--format", "jsonl", "--tool", "test_simple_text")
	if !strings.Contains(out, `"outcome":"protocol_error"`) {
		t.Fatalf("the audit must not record the lost call as ok:\n%s", out)
	}
}

// The pre-release's frozen 2026-07-28 requirements (no initialize, no
// sessions, headers that must agree with the body, input-required rounds):
// against the fixture run session-less, the same checks pass through guard
// serve — the fixture a stdio child, or an HTTP upstream — as directly, the
// fixture's own failures (the tasks extension) included.
func TestConformance20260728ThroughGuardServe(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the conformance suite")
	}
	e := newEnv(t, "policy: {default: allow}\nservers:\n  conformance:\n    command: ["+everythingServer(t)+"]\n    new_tools: allow\n")
	through := serveThroughGuard(t, e)
	args := []string{"--requirements", "2026-07-28"}
	direct := conformance(t, "0.2.0-alpha.12", fixture(t, true), args...)
	guarded := conformance(t, "0.2.0-alpha.12", through, args...)
	// And with the fixture as an HTTP upstream.
	e2 := newEnv(t, "policy: {default: allow}\nservers:\n  conformance:\n    url: "+fixture(t, true)+"\n    new_tools: allow\n")
	viaHTTP := conformance(t, "0.2.0-alpha.12", serveThroughGuard(t, e2), args...)
	sameScenarios(t, direct, map[string]map[string]string{"through guard": guarded, "through guard to an HTTP upstream": viaHTTP})
	t.Logf("%d scenarios, the same directly and through guard serve", len(direct))
}
