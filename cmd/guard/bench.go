package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/guard-mcp/guard/benchmark"
)

func init() {
	commands["bench"] = command{summary: "measure guard's overhead against a direct session", run: cmdBench}
}

func cmdBench(ctx context.Context, a *app, args []string) int {
	fs := a.flagSet("bench")
	calls := fs.Int("calls", 3000, "calls per measurement")
	dir := fs.String("dir", "", "`directory` for the benchmark databases (default: a temporary one)")
	big := fs.Int("big", 10<<20, "size in bytes of the large result used to measure memory (0 skips)")
	rounds := fs.Int("rounds", 5, "interleaved rounds per measurement")
	durability := fs.String("durability", "normal,full", "comma-separated audit `modes` to measure through guard")
	callers := fs.String("callers", "1,8", "comma-separated `counts` of concurrent callers")
	if status, ok := a.parseFlags(fs, args); !ok {
		return status
	}
	modes := strings.Split(*durability, ",")
	for _, m := range modes {
		if m != "normal" && m != "full" {
			fmt.Fprintf(a.stderr, "guard bench: --durability: %q is neither normal nor full\n", m)
			return exitUsage
		}
	}
	var counts []int
	for _, c := range strings.Split(*callers, ",") {
		n, err := strconv.Atoi(c)
		if err != nil || n < 1 {
			fmt.Fprintf(a.stderr, "guard bench: --callers: %q is not a positive number\n", c)
			return exitUsage
		}
		counts = append(counts, n)
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(a.stderr, "guard bench: %v\n", err)
		return exitFailure
	}
	d := *dir
	if d == "" {
		d, err = os.MkdirTemp("", "guard-bench-")
		if err != nil {
			fmt.Fprintf(a.stderr, "guard bench: %v\n", err)
			return exitFailure
		}
		defer os.RemoveAll(d)
	}
	_, err = benchmark.Run(ctx, benchmark.Config{
		Guard:       self,
		Dir:         d,
		Calls:       *calls,
		Concurrency: counts,
		Durability:  modes,
		BigResult:   *big,
		Rounds:      *rounds,
	}, a.stdout)
	if err != nil {
		fmt.Fprintf(a.stderr, "guard bench: %v\n", err)
		return exitFailure
	}
	return exitOK
}
