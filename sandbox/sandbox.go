// Package sandbox starts a program so that some paths do not exist for it:
// guard runs each stdio server this way, so that the server cannot read or
// rewrite guard's own files (the audit database, keys, the UI token, the
// configuration) whatever path it uses to name them.
//
// A path check cannot know how a server resolves a path (relative to its
// own root, through a symlink, through /proc/self/root), so the hiding is
// done by the kernel: the program runs in a private mount namespace, in a
// new user namespace (no privilege needed) and a new PID namespace, where
// an empty read-only directory or file is mounted over each hidden path.
// The mounts are made by an init process, guard's own binary re-executed
// as InitCommand, which then drops the privilege to undo them, mounts a
// /proc that shows only the sandbox's processes, starts the program as its
// child, forwards signals to it and exits with its status.
//
// Start runs a command this way; Init is the re-executed side. Where the
// kernel does not allow it (user namespaces disabled or restricted, /proc
// not mountable), Start returns an error wrapping ErrUnavailable before
// the program has run, and the caller decides whether to run it without.
package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// InitCommand is the first argument that makes a program run Init: the
// program named by Spec.Self must call Init(os.Args[2:]) when os.Args[1]
// is InitCommand, before doing anything else.
const InitCommand = "sandbox-exec"

// ErrUnavailable wraps why a sandbox could not be set up. Nothing of the
// program has run: the caller may start it without a sandbox.
var ErrUnavailable = errors.New("the sandbox is not available")

// Spec is what a sandboxed program must not see.
type Spec struct {
	// Hide are absolute paths of existing directories and files that do not
	// exist for the program: a directory is replaced by an empty read-only
	// one, a file by an empty read-only file. The same directory reached
	// through another mount of its file system (a bind mount) is hidden
	// there too, and each ancestor of a hidden path that the program could
	// rename is made a mount point, so that the rename fails (EBUSY) instead
	// of moving the hidden path away from where guard expects it.
	Hide []string
	// Self is the program that runs Init as InitCommand: guard's own binary
	// (os.Executable).
	Self string
	// SetupTimeout bounds how long the init may take to report that the
	// sandbox is ready (default 10s).
	SetupTimeout time.Duration
}

// args are the init's command line for running path with argv, or, with
// no path, for a probe that runs nothing.
func (s Spec) args(path string, argv []string) []string {
	a := []string{s.Self, InitCommand}
	for _, h := range s.Hide {
		a = append(a, "--hide", h)
	}
	if path == "" {
		return append(a, "--probe")
	}
	return append(append(a, "--", path), argv...)
}

// Start starts cmd, a command as exec.Command made it (Path, Args, Env,
// Dir and the standard streams are used; SysProcAttr and ExtraFiles are
// not), inside a sandbox, and returns the started command that runs it:
// the sandbox's init, whose exit status is the program's (128+N when
// signal N ended it), and which forwards SIGINT, SIGTERM, SIGHUP, SIGQUIT,
// SIGUSR1 and SIGUSR2 to it. It returns once the program has started.
//
// An error wrapping ErrUnavailable means the sandbox could not be set up
// and nothing ran; any other error means the program itself could not be
// started (not found, not executable).
func Start(cmd *exec.Cmd, spec Spec) (*exec.Cmd, error) {
	if cmd.Err != nil {
		return nil, cmd.Err
	}
	return start(cmd, cmd.Path, spec)
}

// start starts the init for running path with cmd's arguments, or with no
// path a probe.
func start(cmd *exec.Cmd, path string, spec Spec) (*exec.Cmd, error) {
	if spec.Self == "" {
		return nil, fmt.Errorf("%w: no program to run the init", ErrUnavailable)
	}
	if spec.SetupTimeout <= 0 {
		spec.SetupTimeout = 10 * time.Second
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	defer r.Close()
	args := spec.args(path, cmd.Args)
	init := &exec.Cmd{Path: spec.Self, Args: args, Env: cmd.Env, Dir: cmd.Dir,
		Stdin: cmd.Stdin, Stdout: cmd.Stdout, Stderr: cmd.Stderr,
		ExtraFiles: []*os.File{w}, SysProcAttr: sysProcAttr()}
	err = init.Start()
	w.Close()
	if err != nil {
		return nil, fmt.Errorf("%w: creating the namespaces: %w", ErrUnavailable, err)
	}
	report, err := readReport(r, spec.SetupTimeout)
	if err == nil && report == reportOK {
		return init, nil
	}
	if err != nil {
		_ = init.Process.Kill()
	}
	werr := init.Wait()
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	case strings.HasPrefix(report, reportExec):
		return nil, fmt.Errorf("%s: %s", path, strings.TrimPrefix(report, reportExec))
	case strings.HasPrefix(report, reportSetup):
		return nil, fmt.Errorf("%w: %s", ErrUnavailable, strings.TrimPrefix(report, reportSetup))
	}
	return nil, fmt.Errorf("%w: the init ended before reporting (%v)", ErrUnavailable, werr)
}

// Probe sets up a sandbox for spec and runs nothing in it: it says whether
// Start would isolate a program, and how long the setup took.
func Probe(spec Spec) (time.Duration, error) {
	t0 := time.Now()
	init, err := start(&exec.Cmd{}, "", spec)
	if err != nil {
		return 0, err
	}
	if err := init.Wait(); err != nil {
		return 0, fmt.Errorf("%w: the probe ended with %v", ErrUnavailable, err)
	}
	return time.Since(t0), nil
}

// The init's report on its status pipe, one line: ready and the program
// started, the sandbox could not be set up, or the program could not be
// started.
const (
	reportOK    = "ok"
	reportSetup = "setup: "
	reportExec  = "exec: "
)

// readReport reads the init's report until the init closes the pipe.
func readReport(r *os.File, timeout time.Duration) (string, error) {
	if err := r.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return "", err
	}
	b, err := io.ReadAll(io.LimitReader(r, 4096))
	if err != nil {
		return "", fmt.Errorf("waiting for the init: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}
