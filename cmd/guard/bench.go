package main

import (
	"context"
	"fmt"
)

func init() {
	commands["bench"] = command{run: cmdBench, hidden: true}
}

// cmdBench says where the benchmark went: it is a program of its own, so
// that guard carries none of it.
func cmdBench(_ context.Context, a *app, _ []string) int {
	fmt.Fprintln(a.stderr, "guard: the benchmark is a program of its own: go build -o guard-bench ./cmd/guard-bench && ./guard-bench")
	return exitUsage
}
