package main

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/guard-mcp/guard/benchmark"
)

// The copy relay passes bytes through unchanged, whatever they are, and
// exits with its child's status. (Each buffer has one writer, and is read
// once the relay has waited for it.)
func TestCopyRelay(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("the child here is a shell script, and there is no sh:", err)
	}
	in := "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\nno newline at the end, \x00 and \xff"
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{benchmark.CopyRelayCommand, "--", "sh", "-c", "cat; echo to-stderr >&2; exit 3"}, strings.NewReader(in), &out, &errb)
	if code != 3 || out.String() != in || errb.String() != "to-stderr\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit 3 with the input and the child's stderr", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	code = run(context.Background(), []string{benchmark.CopyRelayCommand, "--", "sh", "-c", "kill -TERM $$"}, strings.NewReader(""), &out, &errb)
	if code != 128+15 {
		t.Fatalf("exit %d, want 143 for a child ended by SIGTERM", code)
	}
}

// Usage errors exit 2 and say what is wrong, before anything is built or
// measured.
func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--durability", "fast"}, "neither normal nor full"},
		{[]string{"--callers", "0"}, "not a positive number"},
		{[]string{"--calls", "3", "--rounds", "5"}, "want at least one round and one call per round"},
		{[]string{"--rounds", "0"}, "want at least one round"},
		{[]string{"--no-such-flag"}, "flag provided but not defined"},
		{[]string{"now"}, "unexpected arguments"},
		{[]string{benchmark.CopyRelayCommand}, "usage: guard-bench " + benchmark.CopyRelayCommand},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), tc.args, strings.NewReader(""), &out, &errb); code != exitUsage || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("guard-bench %s: exit %d, stderr %q; want exit 2 with %q", strings.Join(tc.args, " "), code, errb.String(), tc.want)
		}
	}
}
