// Package app is guard's wiring and background jobs: a relaying process's
// policy engine, holds, approval UI, verifier, retention, notifier,
// streamer and replica heartbeat; how its servers are isolated from
// guard's files; and the bodies of the subcommands, which the command line
// (package main) calls with their flags and resolved settings.
package app

import (
	"io"
	"log/slog"
)

// Exit statuses of every subcommand but a `guard run` whose server has run.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
	// ExitUnverifiable is guard audit verify's and check's "cannot
	// verify here": no key of this log, a key of another log, no
	// database at that path. Everything they could check held; a
	// failure exits 1 whatever else.
	ExitUnverifiable = 3
)

// Main is what a subcommand may touch of the outside world, so that tests
// can run subcommands in-process.
type Main struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string
	// Environ is the environment the servers guard starts inherit, less
	// guard's own secrets.
	Environ func() []string
	// Logger writes to Stderr, in the format and at the level the
	// command line asked for.
	Logger *slog.Logger
	// Version is the version guard records of itself (lifecycle records,
	// replicas, the serverInfo of its HTTP front).
	Version string
	// Revision is the commit guard was built from, "" when unknown
	// (guard_build_info).
	Revision string
}
