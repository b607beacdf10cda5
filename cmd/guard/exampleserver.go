package main

import (
	"context"
	"fmt"
	"os"

	"github.com/guard-mcp/guard/exampleserver"
)

func init() {
	commands["example-server"] = command{summary: "a small stdio MCP server, for demos and tests", run: cmdExampleServer}
}

func cmdExampleServer(ctx context.Context, a *app, args []string) int {
	fs := a.flagSet("example-server")
	if status, ok := a.parseFlags(fs, args); !ok {
		return status
	}
	if err := exampleserver.Run(ctx, os.Stdin, os.Stdout); err != nil && ctx.Err() == nil {
		fmt.Fprintf(a.stderr, "guard example-server: %v\n", err)
		return exitFailure
	}
	return exitOK
}
