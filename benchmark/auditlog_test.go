package benchmark

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// RunAudit builds a log, then queries it and serves its Activity page:
// every query answers, with the rows the log holds for it, and a second
// run reuses the log.
func TestRunAudit(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	fig, err := RunAudit(context.Background(), AuditConfig{Dir: dir, Calls: 3000, Runs: 1}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log(out.String())
	if fig.Build <= 0 || len(fig.Queries) < 15 || len(fig.Pages) < 5 {
		t.Fatalf("figures: %+v", fig)
	}
	rows := map[string]int{}
	for _, q := range append(fig.Queries, fig.Pages...) {
		rows[q.Name] = q.Rows
	}
	for name, want := range map[string]int{"default (newest 100)": 100, "--server db": 100, "--text nosuchword": 0,
		"--decision held (none left)": 0, "/activity": 100, "older page": 100,
		"--user dana@example.com": 100, "--user u-91c2": 100} {
		if rows[name] != want {
			t.Errorf("%s: %d rows, want %d", name, rows[name], want)
		}
	}
	for name, n := range rows {
		if strings.HasPrefix(name, "--approval") && n < 1 {
			t.Errorf("%s: no call", name)
		}
	}
	out.Reset()
	fig, err = RunAudit(context.Background(), AuditConfig{Dir: dir, Calls: 3000, Runs: 1}, &out)
	if err != nil || fig.Build != 0 || !strings.Contains(out.String(), "already in") {
		t.Fatalf("second run: %v %+v\n%s", err, fig, out.String())
	}
}
