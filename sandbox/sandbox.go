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
// Start runs a command this way; Init is the re-executed side. When the
// sandbox cannot be set up, Start returns an error wrapping ErrUnavailable
// before the program has run. Supported tells the two reasons apart: this
// system has no sandbox at all (user namespaces disabled or restricted,
// /proc not mountable, not Linux), or it has one that failed this once
// (a path that cannot be hidden, no descriptors left). Only the first may
// be a reason to run a program without: the second can be brought about
// by whoever wants the program to run unisolated.
package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// InitCommand is the first argument that makes a program run Init: the
// program named by Spec.Self must call Init(os.Args[2:]) when os.Args[1]
// is InitCommand, before doing anything else.
const InitCommand = "sandbox-exec"

// ErrUnavailable wraps why a sandbox could not be set up. Nothing of the
// program has run.
var ErrUnavailable = errors.New("the sandbox is not available")

// ErrUnsupported wraps why this system cannot make a sandbox at all (see
// Supported).
var ErrUnsupported = errors.New("this system cannot isolate programs")

// Spec is what a sandboxed program must not see.
type Spec struct {
	// Hide are paths of existing directories and files that do not exist
	// for the program (a relative path is taken from guard's working
	// directory, a symbolic link is followed to what it names): a directory is replaced by an empty read-only
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
// no path, for a probe that runs nothing. The paths to hide are made
// absolute here, from this process's working directory: the init may run
// in another (the program's), and would hide nothing of guard's there.
func (s Spec) args(path string, argv []string) ([]string, error) {
	a := []string{s.Self, InitCommand}
	for _, h := range s.Hide {
		abs, err := filepath.Abs(h)
		if err != nil {
			return nil, fmt.Errorf("hiding %s: %w", h, err)
		}
		a = append(a, "--hide", abs)
	}
	if path == "" {
		return append(a, "--probe"), nil
	}
	return append(append(a, "--", path), argv...), nil
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
	if err := supported(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err) // nothing to start on this OS
	}
	if spec.Self == "" {
		return nil, fmt.Errorf("%w: no program to run the init", ErrUnavailable)
	}
	if spec.SetupTimeout <= 0 {
		spec.SetupTimeout = 10 * time.Second
	}
	args, err := spec.args(path, cmd.Args)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	defer r.Close()
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

// Supported says whether this system can make a sandbox, by setting up
// one that hides nothing (self runs the init, as Spec.Self): nil when it
// can; an error wrapping ErrUnsupported when it cannot (no user
// namespaces, a restriction on them, /proc not mountable, another OS).
// Any other error means it cannot be told now, the process being short
// of descriptors, memory or processes: a caller that falls back to no
// sandbox only where there is none counts that as supported.
func Supported(self string) error {
	if err := supported(); err != nil {
		return err
	}
	if self == "" {
		return fmt.Errorf("%w: no program to run the init", ErrUnsupported)
	}
	_, err := Probe(Spec{Self: self})
	if err == nil || scarce(err) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnsupported, err)
}

// scarce reports whether err is a shortage of the process's or the
// system's resources: something that passes, or that another process may
// have brought about, not a property of the system.
func scarce(err error) bool {
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOMEM, syscall.EAGAIN} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
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
