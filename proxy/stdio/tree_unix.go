//go:build unix

package stdio

import (
	"os"
	"os/exec"
	"syscall"
)

// ownGroup has cmd start in a process group of its own, so that the
// signals that end the server reach the processes it started too (npx's
// node, a shell's children). A Start hook that starts another command in
// its place (the sandbox's init, whose PID namespace ends everything in
// it with the init) leaves this aside.
func ownGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}

// tree is a started server and the processes it starts: its process
// group, when it leads one, else the process alone.
type tree struct {
	p     *os.Process
	group bool
}

// newTree returns the tree of cmd, started.
func newTree(cmd *exec.Cmd) (*tree, error) {
	return &tree{p: cmd.Process, group: cmd.SysProcAttr != nil && cmd.SysProcAttr.Setpgid}, nil
}

// signal sends sig to the tree.
func (t *tree) signal(sig os.Signal) error {
	if s, ok := sig.(syscall.Signal); ok && t.group {
		if err := syscall.Kill(-t.p.Pid, s); err == nil {
			return nil
		}
	}
	return t.p.Signal(sig)
}

// terminate asks the tree to end: SIGTERM.
func (t *tree) terminate() error { return t.signal(syscall.SIGTERM) }

// kill ends the tree: SIGKILL.
func (t *tree) kill() error { return t.signal(syscall.SIGKILL) }

// close lets go of the tree; on Unix, processes the server started that
// outlive it are left to run.
func (t *tree) close() {}
