package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
)

// Exit statuses of every subcommand but a `guard run` whose server has run.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
	// exitUnverifiable is guard audit verify's and check's "cannot
	// verify here": no key of this log, a key of another log, no
	// database at that path. Everything they could check held; a
	// failure exits 1 whatever else.
	exitUnverifiable = 3
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
	logger  *slog.Logger
	// cpuProfile, when not "", is the file that `guard run` and `guard
	// serve` write a CPU profile of their whole run to (GUARD_CPUPROFILE,
	// set by guard-bench --profile).
	cpuProfile string
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

// command is one subcommand. run returns the process's exit status.
type command struct {
	summary string
	run     func(ctx context.Context, a *app, args []string) int
	// hidden leaves the command out of the usage: one that guard runs
	// itself, not a person.
	hidden bool
	// profiled makes the command write a CPU profile when the app has a
	// cpuProfile.
	profiled bool
}

// commands is filled by the init functions of the subcommand files.
var commands = map[string]command{}

func (a *app) main(ctx context.Context, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		a.usage()
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(a.stderr, "guard: unknown command %q\n", args[0])
		a.usage()
		return exitUsage
	}
	if cmd.profiled && a.cpuProfile != "" {
		defer a.profileCPU(a.cpuProfile)()
	}
	return cmd.run(ctx, a, args[1:])
}

func (a *app) usage() {
	names := make([]string, 0, len(commands))
	for n, c := range commands {
		if !c.hidden {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("usage: guard COMMAND [flags]\n\ncommands:\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  %-15s %s\n", n, commands[n].summary)
	}
	b.WriteString("\nEvery command takes --config FILE and --db PATH; `guard COMMAND -h` lists its flags.\n")
	io.WriteString(a.stderr, b.String())
}

// flagSet returns a flag set that reports errors to stderr and does not exit.
func (a *app) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("guard "+name, flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	return fs
}

// parseFlags parses args and turns a parse error into the usage status.
// It returns ok=false with the status to exit with.
func (a *app) parseFlags(fs *flag.FlagSet, args []string) (status int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, false
		}
		return exitUsage, false
	}
	return 0, true
}

// subcommandUsage handles a command of subcommands called without one, or
// asked for help (-h, --help, help): the usage goes to stderr with exit 2
// in the first case and to stdout with exit 0 in the second. ok is true
// when args name a subcommand for the caller to run.
func (a *app) subcommandUsage(args []string, usage string) (status int, ok bool) {
	switch {
	case len(args) == 0:
		fmt.Fprintln(a.stderr, usage)
		return exitUsage, false
	case args[0] == "-h" || args[0] == "--help" || args[0] == "help":
		fmt.Fprintln(a.stdout, usage)
		return exitOK, false
	}
	return 0, true
}
