package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/guard-mcp/guard/clients"
	"github.com/guard-mcp/guard/store/postgres"
	"github.com/spf13/cobra"
)

func init() {
	register(wrapCommand)
	register(unwrapCommand)
}

const projectWarning = "guard: project files are usually committed: a wrapped entry names this machine's guard by its absolute path, which breaks the project for everyone without guard there"

// wrapCommand is guard wrap: guard in front of every server of the MCP
// clients found, or of those named.
func wrapCommand(a *app) *cobra.Command {
	c := leaf("wrap [CLIENT...]", "put guard in front of every MCP server of your clients", clientNames)
	c.Long = "Put guard in front of every MCP server of your clients (" + strings.Join(clients.Names(), ", ") + "),\n" +
		"or of the clients named: a stdio entry runs guard run -- ITS COMMAND, a remote one guard run --upstream URL.\n" +
		"guard unwrap gives back exactly what it changed."
	c.ValidArgs = clients.Names()
	fs := c.Flags()
	cf := addCommonFlags(fs)
	project := fs.String("project", "", "also the files of the project in `DIR`, and its section of ~/.claude.json")
	dry := fs.Bool("dry-run", false, "print the changes as a unified diff, and change nothing")
	list := fs.Bool("list", false, "list the clients found, their files and servers, and change nothing")
	guardBin := fs.String("guard", "", "the guard `binary` wrapped entries run (default: this one)")
	c.RunE = a.runs(func(ctx context.Context, names []string) int {
		st, status, ok := a.settingsOrExit(cf)
		if !ok {
			return status
		}
		bin, err := guardPath(*guardBin)
		if err != nil {
			fmt.Fprintf(a.stderr, "guard wrap: %v\n", err)
			return exitUsage
		}
		w := &clients.Wrapper{Guard: bin, Flags: a.entryFlags(st)}
		files, status, ok := a.clientFiles(names, *project)
		if !ok {
			return status
		}
		if *list {
			code := exitOK
			for _, f := range files {
				servers, err := w.List(ctx, f)
				if err != nil {
					fmt.Fprintf(a.stderr, "guard: %v\n", err)
					code = exitFailure
					continue
				}
				clients.WriteList(a.stdout, f, servers)
			}
			return code
		}
		return a.changeFiles(files, *dry, func(f *clients.File) (*clients.Change, error) { return w.Wrap(ctx, f) })
	})
	return c
}

// unwrapCommand is guard unwrap: what guard wrap changed, given back.
func unwrapCommand(a *app) *cobra.Command {
	c := leaf("unwrap [CLIENT...]", "give back what guard wrap changed", clientNames)
	c.ValidArgs = clients.Names()
	fs := c.Flags()
	project := fs.String("project", "", "also the files of the project in `DIR`, and its section of ~/.claude.json")
	dry := fs.Bool("dry-run", false, "print the changes as a unified diff, and change nothing")
	c.RunE = a.runs(func(ctx context.Context, names []string) int {
		files, status, ok := a.clientFiles(names, *project)
		if !ok {
			return status
		}
		return a.changeFiles(files, *dry, clients.Unwrap)
	})
	return c
}

// clientNames takes the names of MCP clients as arguments.
func clientNames(_ *cobra.Command, names []string) error {
	for _, n := range names {
		if _, err := clients.Lookup(n); err != nil {
			return err
		}
	}
	return nil
}

// clientFiles finds the files of the clients named (all when none is).
func (a *app) clientFiles(names []string, project string) ([]*clients.File, int, bool) {
	home := a.getenv("HOME")
	if runtime.GOOS == "windows" || home == "" {
		if h, err := os.UserHomeDir(); err == nil {
			home = h
		}
	}
	if project != "" {
		// Resolved as a process's working directory is: Claude Code
		// names a project by it.
		abs, err := filepath.Abs(project)
		if err == nil {
			abs, err = filepath.EvalSymlinks(abs)
		}
		if err != nil {
			fmt.Fprintf(a.stderr, "guard: --project: %v\n", err)
			return nil, exitUsage, false
		}
		project = abs
		fmt.Fprintln(a.stderr, projectWarning)
	}
	files, err := clients.Find(clients.Env{GOOS: runtime.GOOS, Getenv: a.getenv, Home: home}, names, project)
	if err != nil {
		fmt.Fprintf(a.stderr, "guard: %v\n", err)
		return nil, exitFailure, false
	}
	for _, n := range names {
		if !slices.ContainsFunc(files, func(f *clients.File) bool { return f.Client.Name == n }) {
			fmt.Fprintf(a.stderr, "guard: no file of %s found\n", n)
			return nil, exitFailure, false
		}
	}
	if len(files) == 0 {
		fmt.Fprintf(a.stderr, "guard: no MCP client's file found (%s)\n", strings.Join(clients.Names(), ", "))
	}
	return files, exitOK, true
}

// changeFiles plans a change of each file, and applies it unless dry;
// a file that cannot be changed is named, and the others changed all
// the same.
func (a *app) changeFiles(files []*clients.File, dry bool, plan func(*clients.File) (*clients.Change, error)) int {
	code := exitOK
	var restart []string
	for _, f := range files {
		warned := false
		c, err := clients.Commit(func() (*clients.Change, error) {
			c, err := plan(f)
			if err == nil && !dry && c.Changed() && f.Client.Rewrites() && !warned {
				fmt.Fprintf(a.stderr, "guard: %s rewrites %s while it runs, and may put back what guard changes there: quit it first\n", f.Client.Title, f.Path)
				warned = true
			}
			return c, err
		}, dry)
		if err != nil {
			if errors.Is(err, clients.ErrChanged) {
				err = fmt.Errorf("%w (is %s running? quit it and try again)", err, f.Client.Title)
			}
			fmt.Fprintf(a.stderr, "guard: %v\n", err)
			code = exitFailure
			continue
		}
		c.WriteReport(a.stdout, dry)
		if c.Changed() && !dry && !slices.Contains(restart, f.Client.Title) {
			restart = append(restart, f.Client.Title)
		}
	}
	if len(restart) > 0 {
		fmt.Fprintf(a.stdout, "Restart %s to start their servers as the files now say.\n", strings.Join(restart, ", "))
	}
	return code
}

// guardPath is the guard binary that wrapped entries run: the one given,
// else this one as it was started (a link, such as a package manager's,
// stays a link, which its upgrades keep pointing at the new binary).
func guardPath(given string) (string, error) {
	p := given
	if p == "" {
		p = os.Args[0]
		if !strings.ContainsAny(p, `/\`) {
			found, err := exec.LookPath(p)
			if err != nil {
				if found, err = os.Executable(); err != nil {
					return "", fmt.Errorf("finding guard's own binary: %w", err)
				}
			}
			p = found
		}
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	if given == "" && strings.Contains(abs, string(filepath.Separator)+"go-build") {
		return "", errors.New("this guard is a temporary build (go run), which is gone once it ends: install guard (go install ./cmd/guard) and run that, or give --guard")
	}
	if st, err := os.Stat(abs); err != nil || st.IsDir() {
		return "", fmt.Errorf("%s is not a guard binary", abs)
	}
	return abs, nil
}

// entryFlags returns, for an entry whose env is env, the --config and --db
// with which its guard uses what this command resolved (flag,
// environment, default). A client starts its servers with little of
// the shell's environment (a desktop client with almost none): what the
// entry's guard would find by itself is what HOME (and Windows's profile
// folders) and the entry's own env say.
func (a *app) entryFlags(st *settings) func(env map[string]string) ([]string, error) {
	return func(env map[string]string) ([]string, error) {
		entry := newApp(nil, io.Discard, io.Discard, func(k string) string {
			if v, ok := env[k]; ok {
				return v
			}
			switch k {
			case "HOME", "USERPROFILE", "APPDATA", "LOCALAPPDATA":
				return a.getenv(k)
			}
			return ""
		})
		cf := &commonFlags{}
		var flags []string
		own, err := entry.settings(cf)
		if err != nil || own.ConfigPath != st.ConfigPath {
			if st.ConfigPath == "" {
				if err != nil {
					return nil, fmt.Errorf("its guard would not start: %w", err)
				}
				return nil, fmt.Errorf("its guard would read %s, which this guard does not: give --config", own.ConfigPath)
			}
			flags = append(flags, "--config", st.ConfigPath)
			cf.config = st.ConfigPath
			if own, err = entry.settings(cf); err != nil {
				return nil, err
			}
		}
		if own.DBPath != st.DBPath {
			if st.Postgres && postgres.URLHasPassword(st.DBPath) {
				return nil, errors.New("the database URL holds a password, which an entry's arguments would show: give it in PGPASSWORD, a .pgpass file, or the configuration's db")
			}
			flags = append(flags, "--db", st.DBPath)
		}
		return flags, nil
	}
}
