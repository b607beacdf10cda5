package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	guardapp "github.com/guard-mcp/guard/cmd/guard/app"
	"github.com/spf13/cobra"
)

// Exit statuses of every subcommand but a `guard run` whose server has run
// (app.ExitOK...).
const (
	exitOK           = guardapp.ExitOK
	exitFailure      = guardapp.ExitFailure
	exitUsage        = guardapp.ExitUsage
	exitUnverifiable = guardapp.ExitUnverifiable
)

// app carries what a subcommand may touch of the outside world, so that
// tests can run subcommands in-process.
type app struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	// environ is the environment the servers guard starts inherit, less
	// guard's own secrets (default os.Environ).
	environ func() []string
	// logger writes to stderr; the command line sets its format and
	// level (--log-format, --log-level) before a command runs.
	logger *slog.Logger
	// cpuProfile, when not "", is the file that `guard run` and `guard
	// serve` write a CPU profile of their whole run to (GUARD_CPUPROFILE,
	// set by guard-bench --profile).
	cpuProfile string
	// heapProfile, when not "", is the file that `guard run` and `guard
	// serve` write a heap profile to when sent SIGUSR1
	// (GUARD_HEAPPROFILE).
	heapProfile string
	// fromEnv maps the flags whose value came from their environment
	// variable (flagsFromEnvironment) to it.
	fromEnv map[string]string
}

func newApp(stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) *app {
	return &app{
		stdin:   stdin,
		stdout:  stdout,
		stderr:  stderr,
		getenv:  getenv,
		environ: os.Environ,
		logger:  slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
}

// wiring is the app's view of a: what its subcommands' bodies may touch,
// with the logger the command line set.
func (a *app) wiring() *guardapp.Main {
	return &guardapp.Main{Stdin: a.stdin, Stdout: a.stdout, Stderr: a.stderr, Getenv: a.getenv, Environ: a.environ,
		Logger: a.logger, Version: buildVersion(), Revision: thisBuild().Revision}
}

// main runs the command line args (without the program's name) and
// returns the process's exit status: a command's own, or exitUsage for a
// command line that does not parse, after saying why on stderr.
func (a *app) main(ctx context.Context, args []string) int {
	root := a.commandLine()
	// Never nil: cobra reads os.Args when it is.
	root.SetArgs(append([]string{}, oneDashLongFlags(root, args)...))
	c, err := root.ExecuteContextC(ctx)
	var code exitCode
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &code):
		return int(code)
	}
	// Anything else is cobra's, or a check of the arguments: the command
	// line is wrong.
	if c == nil {
		c = root
	}
	fmt.Fprintf(a.stderr, "%s: %v\nusage: %s\n(%s -h lists its flags)\n", c.CommandPath(), err, c.UseLine(), c.CommandPath())
	return exitUsage
}

// exitCode is the status a command ended with, having said why itself:
// as an error, it ends the command line with that status.
type exitCode int

func (c exitCode) Error() string { return fmt.Sprintf("exit status %d", int(c)) }

// runs makes a cobra run function of a command's body, which returns the
// process's exit status.
func (a *app) runs(body func(ctx context.Context, args []string) int) func(*cobra.Command, []string) error {
	return func(c *cobra.Command, args []string) error {
		if code := body(c.Context(), args); code != exitOK {
			return exitCode(code)
		}
		return nil
	}
}

// profiled makes body write a CPU profile of its whole run when the app
// has a cpuProfile, and heap profiles when asked with a heapProfile.
func (a *app) profiled(body func(ctx context.Context, args []string) int) func(ctx context.Context, args []string) int {
	return func(ctx context.Context, args []string) int {
		if a.cpuProfile != "" {
			defer a.profileCPU(a.cpuProfile)()
		}
		if a.heapProfile != "" {
			defer a.profileHeapOnSignal(a.heapProfile)()
		}
		return body(ctx, args)
	}
}
