package benchmark

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The memory measurement reads guard run idle without and with the UI,
// explains each figure, and measures the growth around a large result,
// each compared with its target.
func TestMemory(t *testing.T) {
	var out strings.Builder
	rep, err := RunMemory(context.Background(), Config{Guard: guardBin, Dir: t.TempDir(), Idle: time.Second, BigResult: 1 << 20}, &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	if rep.IdleRSS <= 0 || rep.IdleUIRSS <= 0 || rep.BigBase <= 0 || rep.BigRSS < rep.BigBase {
		t.Fatalf("report %+v", rep)
	}
	if len(rep.Targets) != 3 {
		t.Fatalf("targets %q", rep.Targets)
	}
	for i, re := range []string{
		`^idle RSS, --no-ui: ([0-9.]+) MiB \(target ≤ 30\.0 MiB\): (met|NOT MET)$`,
		`^idle RSS with the UI: ([0-9.]+) MiB$`,
		`^1\.0 MiB result: RSS rise [0-9.]+ MiB = ([0-9.]+)× \(target ≤ 3×\): (met|NOT MET)$`,
	} {
		m := regexp.MustCompile(re).FindStringSubmatch(rep.Targets[i])
		if m == nil || !strings.Contains(out.String(), rep.Targets[i]+"\n") {
			t.Fatalf("target line %q, want %s", rep.Targets[i], re)
		}
		if x, _ := strconv.ParseFloat(m[1], 64); x <= 0 {
			t.Errorf("%q", rep.Targets[i])
		}
	}
	// Each idle figure is explained: the kernel's split, and the Go
	// runtime's own account, which guard logs with a heap profile.
	if n := len(regexp.MustCompile(`(?m)^  .*: RSS [0-9.]+ MiB = anonymous [0-9.]+ MiB \+ file-backed [0-9.]+ MiB \(guard's binary [0-9.]+ MiB.*; Go runtime: heap objects [0-9.]+ MiB, .*goroutines; the first call after: `).FindAllString(out.String(), -1)); n != 2 {
		t.Errorf("%d breakdowns, want 2:\n%s", n, out.String())
	}
}
