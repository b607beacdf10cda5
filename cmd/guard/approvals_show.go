package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
)

// approvalsShowCommand prints one approval: the held call, who made it, its
// rules, each review, and what it still needs.
func approvalsShowCommand(a *app) *cobra.Command {
	c := leaf("show ID", "show one held call: its arguments, approval rules and reviews", exactly("ID"))
	fs := c.Flags()
	cf := addCommonFlags(fs)
	format := fs.String("format", "text", "text or jsonl")
	oneOf(c, "format", "text", "jsonl")
	c.RunE = a.runs(func(ctx context.Context, args []string) int {
		id := args[0]
		if *format != "text" && *format != "jsonl" {
			fmt.Fprintf(a.stderr, "guard approvals show: --format %q: want text or jsonl\n", *format)
			return exitUsage
		}
		db, _, status, ok := a.openReadOnly(ctx, cf)
		if !ok {
			return status
		}
		defer db.Close()
		return a.wiring().ApprovalsShow(ctx, db, id, *format)
	})
	return c
}
