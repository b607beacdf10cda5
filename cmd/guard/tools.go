package main

import (
	"context"

	"github.com/spf13/cobra"
)

func init() { register(toolsCommand) }

// toolsCommand is guard tools: the review of tool definitions.
func toolsCommand(a *app) *cobra.Command {
	return a.group("tools", "review tool definitions", "",
		toolsListCommand(a), toolsDiffCommand(a), toolsDecideCommand(a, true), toolsDecideCommand(a, false))
}

// toolsListCommand lists the catalog: every tool, its review state,
// annotations and flags.
func toolsListCommand(a *app) *cobra.Command {
	c := leaf("list", "list every tool, its review state, annotations and flags", exactly())
	fs := c.Flags()
	cf := addCommonFlags(fs)
	server := fs.String("server", "", "only this `server`'s tools")
	c.RunE = a.runs(func(ctx context.Context, _ []string) int {
		db, _, status, ok := a.openReadOnly(ctx, cf)
		if !ok {
			return status
		}
		defer db.Close()
		return a.wiring().ToolsList(ctx, db, *server)
	})
	return c
}

// toolsDiffCommand shows what changed in a tool's definition since the
// one last accepted.
func toolsDiffCommand(a *app) *cobra.Command {
	c := leaf("diff SERVER TOOL", "show what changed in a tool's definition since the one last accepted", exactly("SERVER", "TOOL"))
	cf := addCommonFlags(c.Flags())
	c.RunE = a.runs(func(ctx context.Context, args []string) int {
		server, tool := args[0], args[1]
		db, _, status, ok := a.openReadOnly(ctx, cf)
		if !ok {
			return status
		}
		defer db.Close()
		return a.wiring().ToolsDiff(ctx, db, server, tool)
	})
	return c
}

// toolsDecideCommand accepts or rejects a tool's current definition, and
// settles the calls held for its review, saying what became of them.
func toolsDecideCommand(a *app, accept bool) *cobra.Command {
	c := leaf("accept SERVER TOOL", "accept a tool's current definition; releases its held calls, unless it weakens a hint or was flagged",
		exactly("SERVER", "TOOL"))
	if !accept {
		c = leaf("reject SERVER TOOL", "reject a tool's current definition: its calls are denied until it changes or is accepted",
			exactly("SERVER", "TOOL"))
	}
	fs := c.Flags()
	cf := addCommonFlags(fs)
	by := fs.String("by", "", "the `NAME` the decision is recorded under (default: the user running this command)")
	reason := fs.String("reason", "", "why: `TEXT` recorded with the decision on the calls held for this tool")
	c.RunE = a.runs(func(ctx context.Context, args []string) int {
		server, tool := args[0], args[1]
		who := a.orCurrentUser(*by)
		db, st, status, ok := a.open(ctx, cf)
		if !ok {
			return status
		}
		defer db.Close()
		return a.wiring().ToolsDecide(ctx, db, st, server, tool, accept, who, *reason)
	})
	return c
}
