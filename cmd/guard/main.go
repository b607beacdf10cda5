// Command guard is a security proxy for the Model Context Protocol: it wraps
// MCP servers, decides every tool call by policy, holds sensitive calls for a
// person, and records every invocation in a verifiable audit log.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/google/uuid"
	"github.com/guard-mcp/guard/sandbox"
)

func main() {
	// The init of a server's sandbox: before anything else, and nothing
	// else (package sandbox).
	if len(os.Args) > 1 && os.Args[1] == sandbox.InitCommand {
		os.Exit(sandbox.Init(os.Args[2:]))
	}
	// Random bits for ids (UUIDv7: every call and record gets one) are
	// read in batches rather than one system call per id.
	uuid.EnableRandPool()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	a := newApp(os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	a.cpuProfile = os.Getenv(cpuProfileEnv)
	a.heapProfile = os.Getenv(heapProfileEnv)
	code := a.main(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
