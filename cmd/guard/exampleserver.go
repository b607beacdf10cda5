package main

import (
	"context"
	"fmt"
	"os"

	"github.com/guard-mcp/guard/exampleserver"
	"github.com/spf13/cobra"
)

func init() { register(exampleServerCommand) }

// exampleServerCommand runs the bundled example MCP server on stdio.
func exampleServerCommand(a *app) *cobra.Command {
	c := leaf("example-server", "a small stdio MCP server, for demos and tests", exactly())
	c.RunE = a.runs(func(ctx context.Context, _ []string) int {
		if err := exampleserver.Run(ctx, os.Stdin, os.Stdout); err != nil && ctx.Err() == nil {
			fmt.Fprintf(a.stderr, "guard example-server: %v\n", err)
			return exitFailure
		}
		return exitOK
	})
	return c
}
