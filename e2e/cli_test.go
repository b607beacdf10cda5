package e2e

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// run runs guard with exactly args (guardtest.Args places --config and
// --db; here the test places them) and returns what it wrote where.
func (e *env) run(args ...string) (stdout, stderr string, code int) {
	e.t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(guardBin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// The command line as people and scripts write it, on the built binary:
// flags before, between and after the arguments, with two dashes or one,
// decide the same held calls; a one-shot command prints its answer alone;
// -h, --version and completion answer with exit 0; bad usage is exit 2.
func TestCommandLineArgumentOrders(t *testing.T) {
	e := newEnv(t, "approval: {wait: 300ms}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs := e.connectExample(ctx)
	defer cs.Close()
	const prefix = "Waiting for approval (id "
	var ids []string
	for _, task := range []string{"a", "b", "c", "d"} {
		text, isErr := callText(t, cs, "run_task", map[string]any{"task": task})
		if !isErr || !strings.HasPrefix(text, prefix) {
			t.Fatalf("call %s: %q", task, text)
		}
		ids = append(ids, text[len(prefix):len(prefix)+36])
	}
	for i, args := range [][]string{
		{"approvals", "deny", "--config", e.cfg, "--db", e.db, ids[0], "--reason", "no"},
		{"approvals", "deny", ids[1], "--config", e.cfg, "--reason", "no", "--db", e.db},
		{"approvals", "deny", "-config", e.cfg, "-db", e.db, "-reason=no", ids[2]},
		{"--log-level", "warn", "approvals", "approve", "--by", "carol", ids[3], "--config", e.cfg, "--db", e.db},
	} {
		stdout, stderr, code := e.run(args...)
		if code != 0 || stderr != "" || !strings.HasPrefix(stdout, ids[i]+": ") || strings.Count(stdout, "\n") != 1 {
			t.Errorf("guard %s: exit %d, stdout %q, stderr %q; want the answer alone", strings.Join(args, " "), code, stdout, stderr)
		}
	}
	// A decided call: the first decision stands, whatever the order.
	if _, stderr, code := e.run("approvals", "approve", ids[0], "--db", e.db, "--config", e.cfg, "--by", "dave"); code != 1 || !strings.Contains(stderr, "denied") {
		t.Errorf("approving a denied call: exit %d, %q", code, stderr)
	}

	var diffs []string
	for _, args := range [][]string{
		{"tools", "diff", "--config", e.cfg, "--db", e.db, "notes", "run_task"},
		{"tools", "diff", "notes", "--config", e.cfg, "run_task", "--db", e.db},
		{"tools", "diff", "notes", "run_task", "-db", e.db, "-config", e.cfg},
	} {
		stdout, stderr, code := e.run(args...)
		if code != 0 || stderr != "" {
			t.Errorf("guard %s: exit %d, %q", strings.Join(args, " "), code, stderr)
		}
		diffs = append(diffs, stdout)
	}
	if diffs[0] == "" || diffs[0] != diffs[1] || diffs[1] != diffs[2] {
		t.Errorf("tools diff in three orders: %q", diffs)
	}

	for _, tc := range []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"ui", "-h"}, 0, "guard ui COMMAND", ""},
		{[]string{"approvals", "deny", "-h"}, 0, "--reason TEXT   why: the TEXT the client reads (required)", ""},
		{[]string{"--version"}, 0, "guard ", ""},
		{[]string{"version"}, 0, "\nrevision ", ""},
		{[]string{"completion", "zsh"}, 0, "#compdef guard", ""},
		{[]string{"approvals", "deny", ids[0], "--config", e.cfg, "--db", e.db}, 2, "", `required flag(s) "reason" not set`},
		{[]string{"approvals", "deny", ids[0], "--reson", "typo"}, 2, "", "unknown flag: --reson"},
		{[]string{"tools", "diff", "notes"}, 2, "", "missing TOOL"},
		{[]string{"audit", "verify", "--config", e.cfg, "--db", e.db}, 0, "ok", ""},
	} {
		stdout, stderr, code := e.run(tc.args...)
		if code != tc.code || !strings.Contains(stdout, tc.stdout) || !strings.Contains(stderr, tc.stderr) {
			t.Errorf("guard %s: exit %d, stdout %q, stderr %q; want %d with %q / %q",
				strings.Join(tc.args, " "), code, stdout, stderr, tc.code, tc.stdout, tc.stderr)
		}
	}
}
