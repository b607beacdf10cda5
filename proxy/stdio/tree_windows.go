package stdio

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"unsafe"

	"golang.org/x/sys/windows"
)

// ownGroup does nothing on Windows: the server joins a job object of its
// own once started (newTree).
func ownGroup(*exec.Cmd) {}

// tree is a started server and the processes it starts, in a job object
// that ends them all when terminated or when guard closes it (or exits).
// The server joins it just after it starts: a process it starts before
// that moment is not in it.
type tree struct {
	p   *os.Process
	job windows.Handle // 0 when no job could be made: then the server alone
}

// terminatedStatus is the exit status of a server whose job was
// terminated.
const terminatedStatus = 1

// newTree puts cmd's process, started, in a job object of its own. When
// that fails, the tree is the process alone, and the error says why.
func newTree(cmd *exec.Cmd) (*tree, error) {
	t := &tree{p: cmd.Process}
	job, err := windows.CreateJobObject(nil, nil)
	if err != nil {
		return t, fmt.Errorf("creating a job object: %w", err)
	}
	info := windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION{
		BasicLimitInformation: windows.JOBOBJECT_BASIC_LIMIT_INFORMATION{LimitFlags: windows.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE},
	}
	if _, err := windows.SetInformationJobObject(job, windows.JobObjectExtendedLimitInformation,
		uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info))); err != nil {
		windows.CloseHandle(job)
		return t, fmt.Errorf("setting up a job object: %w", err)
	}
	h, err := windows.OpenProcess(windows.PROCESS_SET_QUOTA|windows.PROCESS_TERMINATE, false, uint32(cmd.Process.Pid))
	if err != nil {
		windows.CloseHandle(job)
		return t, fmt.Errorf("opening the server's process: %w", err)
	}
	defer windows.CloseHandle(h)
	if err := windows.AssignProcessToJobObject(job, h); err != nil {
		windows.CloseHandle(job)
		return t, fmt.Errorf("putting the server in a job object: %w", err)
	}
	t.job = job
	return t, nil
}

// signal forwards sig: Windows has no signals to send, so SIGTERM ends the
// tree, and anything else is left alone (a console's Ctrl-C reaches the
// server without guard).
func (t *tree) signal(sig os.Signal) error {
	if sig == syscall.SIGTERM {
		return t.terminate()
	}
	return nil
}

// terminate ends the tree: there is no asking a process to end.
func (t *tree) terminate() error {
	if t.job != 0 {
		return windows.TerminateJobObject(t.job, terminatedStatus)
	}
	return t.p.Kill()
}

// kill ends the server, should terminate not have.
func (t *tree) kill() error { return t.p.Kill() }

// close closes the job, which ends what remains of it.
func (t *tree) close() {
	if t.job != 0 {
		windows.CloseHandle(t.job)
	}
}
