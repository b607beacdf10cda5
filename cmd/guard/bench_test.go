package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/guard-mcp/guard/benchmark"
)

// The copy relay passes bytes through unchanged, whatever they are, and
// exits with its child's status; it is not in the usage.
func TestCopyRelay(t *testing.T) {
	in := "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\nno newline at the end, \x00 and \xff"
	var out, errb lockedBuffer
	a := newApp(strings.NewReader(in), &out, &errb, func(string) string { return "" })
	code := a.main(context.Background(), []string{benchmark.CopyRelayCommand, "--", "sh", "-c", "cat; echo to-stderr >&2; exit 3"})
	if code != 3 || out.String() != in || errb.String() != "to-stderr\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit 3 with the input and the child's stderr", code, out.String(), errb.String())
	}
	_, stderr, code := run(t, t.TempDir(), benchmark.CopyRelayCommand, "--", "sh", "-c", "kill -TERM $$")
	if code != 128+15 {
		t.Fatalf("exit %d (%s), want 143 for a child ended by SIGTERM", code, stderr)
	}
	_, stderr, _ = run(t, t.TempDir(), "help")
	if strings.Contains(stderr, benchmark.CopyRelayCommand) {
		t.Fatalf("the usage lists the copy relay:\n%s", stderr)
	}
}

// With a profile file, guard run writes a CPU profile there by the time
// it returns.
func TestRunWritesACPUProfile(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "run.pprof")
	env := map[string]string{"HOME": dir, "XDG_CONFIG_HOME": filepath.Join(dir, "config"), "XDG_DATA_HOME": filepath.Join(dir, "data")}
	var out, errb lockedBuffer
	a := newApp(strings.NewReader(""), &out, &errb, func(k string) string { return env[k] })
	a.cpuProfile = prof
	if code := a.main(context.Background(), []string{"run", "--no-ui", "--", "sh", "-c", "exit 0"}); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	b, err := os.ReadFile(prof)
	if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b { // a gzipped profile
		t.Fatalf("profile: %d bytes, %v", len(b), err)
	}
	// Commands other than run and serve write none.
	a.cpuProfile = filepath.Join(dir, "policy.pprof")
	a.main(context.Background(), []string{"policy", "check"})
	if _, err := os.Stat(a.cpuProfile); !os.IsNotExist(err) {
		t.Fatalf("policy check wrote a profile: %v", err)
	}
}
