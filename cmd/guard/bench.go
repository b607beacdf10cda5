package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
)

func init() {
	register(benchCommand)
}

// benchCommand says where the benchmark went: it is a program of its own,
// so that guard carries none of it. It takes any flags the benchmark took
// and exits 2.
func benchCommand(a *app) *cobra.Command {
	c := leaf("bench", "", cobra.ArbitraryArgs)
	c.Hidden = true
	c.DisableFlagParsing = true
	c.RunE = a.runs(func(_ context.Context, _ []string) int {
		fmt.Fprintln(a.stderr, "guard: the benchmark is a program of its own: go build -o guard-bench ./cmd/guard-bench && ./guard-bench")
		return exitUsage
	})
	return c
}
