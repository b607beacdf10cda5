package benchmark

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/guard-mcp/guard/e2e/guardtest"
)

// guardBin is guard's command, built once for the package's tests.
var guardBin string

// TestMain builds guard; run as CopyRelayCommand, the test binary is the
// copy relay the benchmark measures (as guard-bench is).
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == CopyRelayCommand && os.Args[2] == "--" {
		code, err := CopyRelay(context.Background(), os.Args[3:], os.Stdin, os.Stdout, os.Stderr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(code)
	}
	guardtest.Main(m, "../cmd/guard", &guardBin)
}

// A small run measures the direct session, the copy relay and guard, and
// compares them with each other and with the targets.
func TestRun(t *testing.T) {
	var out strings.Builder
	rep, err := Run(context.Background(), Config{
		Guard: guardBin, CopyRelay: []string{os.Args[0], CopyRelayCommand}, Dir: t.TempDir(), Calls: 200, Rounds: 2,
		Concurrency: []int{1}, Durability: []string{"normal"},
	}, &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	const guardRow = "guard durability=normal"
	rows := map[string]Result{}
	for _, r := range rep.Results {
		rows[r.Name] = r
		if r.Callers != 1 || r.Calls != 200 || r.P50 <= 0 || r.PerSec <= 0 || r.CPU <= 0 || r.TreeCPU < r.CPU {
			t.Errorf("%s: %+v", r.Name, r)
		}
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(r.Name) + ` +callers=1 `).MatchString(out.String()) {
			t.Errorf("no row %q in\n%s", r.Name, out.String())
		}
	}
	if len(rows) != 3 {
		t.Fatalf("rows %v, want direct, copy relay and %s", rep.Results, guardRow)
	}
	relay, g := rows[rowCopyRelay], rows[guardRow]
	if relay.OfDirect <= 0 || relay.OfRelay != 0 || relay.AddedCPU == 0 {
		t.Errorf("copy relay: %+v", relay)
	}
	if g.OfDirect <= 0 || g.OfRelay <= 0 || g.AddedCPU <= 0 || g.AddedCPUOfRelay < 0 {
		t.Errorf("guard: %+v", g)
	}
	if !strings.Contains(out.String(), "added cpu/call=") {
		t.Errorf("no added cpu/call in\n%s", out.String())
	}

	// Of the targets, the lines of the rows measured: one caller, normal.
	if len(rep.Targets) != 1 {
		t.Fatalf("targets %q", rep.Targets)
	}
	m := regexp.MustCompile(`^stdio normal, 1 caller: calls/s ([0-9.]+) of copy relay \(target ≥ 0\.90\): (met|NOT MET); ` +
		`added cpu ([0-9.]+x|n/a) copy relay's \(target ≤ 2x\): (met|NOT MET)$`).
		FindStringSubmatch(rep.Targets[0])
	if m == nil || !strings.Contains(out.String(), rep.Targets[0]+"\n") {
		t.Fatalf("target line %q", rep.Targets[0])
	}
	x, _ := strconv.ParseFloat(m[1], 64)
	if x <= 0 {
		t.Errorf("calls/s %s of the copy relay", m[1])
	}
	if want := met(g.OfRelay >= targetNormalOfRelay); m[2] != want {
		t.Errorf("calls/s %v of the copy relay said %q, want %q", g.OfRelay, m[2], want)
	}
}

// Every round's figures are compared with the same round's, and the
// median of those taken: a round where the machine was slower for all
// rows alike does not move the ratios.
func TestCompareRoundByRound(t *testing.T) {
	round := func(calls int, per, tree time.Duration) sample {
		lat := make([]time.Duration, calls)
		for i := range lat {
			lat[i] = per
		}
		return sample{lat: lat, elapsed: per * time.Duration(calls), tree: tree * time.Duration(calls)}
	}
	// The second round runs at half speed and costs twice the CPU for
	// every row.
	direct := []sample{round(100, 100*time.Microsecond, 100*time.Microsecond), round(100, 200*time.Microsecond, 200*time.Microsecond)}
	relay := []sample{round(100, 125*time.Microsecond, 120*time.Microsecond), round(100, 250*time.Microsecond, 240*time.Microsecond)}
	guard := []sample{round(100, 250*time.Microsecond, 160*time.Microsecond), round(100, 500*time.Microsecond, 320*time.Microsecond)}
	var r Result
	compare(&r, guard, direct, relay, true)
	if r.OfDirect != 0.4 || r.OfRelay != 0.5 || r.AddedCPUOfRelay != 3 {
		t.Errorf("ratios: %+v", r)
	}
	// The added figures are medians of two rounds: their mean.
	if r.AddedP50 != 225*time.Microsecond || r.AddedCPU != 90*time.Microsecond {
		t.Errorf("added: %+v", r)
	}
}
