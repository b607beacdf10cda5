//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// statusFD is the init's end of the status pipe (Start's ExtraFiles[0]).
const statusFD = 3

// Exit statuses of an init that ran no program.
const (
	exitSetup = 111 // the sandbox could not be set up
	exitExec  = 127 // the program could not be started
)

// forwarded are the signals the init passes on to the program. As PID 1
// of its namespace the program would ignore those it has no handler for.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// sysProcAttr creates the init in new user, mount and PID namespaces. A
// non-root user is itself inside (uid and gid mapped to themselves) and
// keeps the capabilities to mount (CAP_SYS_ADMIN) and to drop capabilities
// (CAP_SETPCAP) across the exec of the init; root maps every id, so that
// it keeps its access to every user's files.
func sysProcAttr() *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID}
	uid, gid := os.Getuid(), os.Getgid()
	if uid == 0 {
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 4294967295}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 4294967295}}
		a.GidMappingsEnableSetgroups = true
		return a
	}
	a.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
	a.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
	a.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_SETPCAP}
	return a
}

// OSSupported is true: Linux has the sandbox, where its configuration
// allows it (Supported says).
const OSSupported = true

// supported leaves it to a probe to say: Linux has the sandbox where its
// configuration allows it.
func supported() error { return nil }

// Init is the sandbox's init, run as InitCommand with the rest of the
// command line: it hides the paths, mounts a /proc of the new PID
// namespace, drops the privilege to undo that, starts the program as its
// child, forwards signals to it, reaps orphans, and returns the program's
// exit status (128+N when signal N ended it) for the caller to exit with.
// It reports on the status pipe whether the program started.
func Init(args []string) int {
	// Capabilities are per thread, and the program is forked from this
	// one: it must stay the thread that drops them.
	runtime.LockOSThread()
	status := os.NewFile(statusFD, "status")
	syscall.CloseOnExec(statusFD)
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)

	hide, path, argv, probe, err := initArgs(args)
	if err == nil {
		err = hidePaths(hide)
	}
	if err == nil {
		err = dropPrivileges(os.Getuid() == 0)
	}
	if err != nil {
		fmt.Fprintf(status, "%s%v\n", reportSetup, err)
		return exitSetup
	}
	if probe {
		fmt.Fprintln(status, reportOK)
		return 0
	}
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{0, 1, 2}})
	if err != nil {
		fmt.Fprintf(status, "%s%v\n", reportExec, err)
		return exitExec
	}
	fmt.Fprintln(status, reportOK)
	status.Close()
	go func() {
		for s := range sigs {
			_ = syscall.Kill(pid, s.(syscall.Signal))
		}
	}()
	return reap(pid)
}

// initArgs reads [--hide PATH]... (--probe | -- PATH ARGV0 ARGS...).
func initArgs(args []string) (hide []string, path string, argv []string, probe bool, err error) {
	for len(args) > 0 {
		switch {
		case args[0] == "--hide" && len(args) > 1:
			hide, args = append(hide, args[1]), args[2:]
		case args[0] == "--probe":
			return hide, "", nil, true, nil
		case args[0] == "--" && len(args) > 2:
			return hide, args[1], args[2:], false, nil
		default:
			return nil, "", nil, false, fmt.Errorf("usage: %s [--hide PATH]... (--probe | -- PATH ARGV...)", InitCommand)
		}
	}
	return nil, "", nil, false, fmt.Errorf("usage: %s: no program", InitCommand)
}

// reap waits for every child (orphans are re-parented to the init) until
// the program exits, and returns its status.
func reap(pid int) int {
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "guard sandbox: waiting for the server: %v\n", err)
			return 1
		}
		if got != pid {
			continue
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ws.ExitStatus()
	}
}

// hidePaths mounts an empty read-only directory or file over each path
// and its aliases, after making their renamable ancestors mount points,
// then mounts the PID namespace's own /proc: the old one shows other
// processes' roots and open files (/proc/PID/root, /proc/PID/fd), where
// guard's files are still in place.
func hidePaths(hide []string) error {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making / private: %w", err)
	}
	wd, _ := os.Getwd()
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("reading the mounts: %w", err)
	}
	ms, err := parseMountinfo(mi)
	mi.Close()
	if err != nil {
		return err
	}
	targets, err := hideTargets(ms, hide)
	if err != nil {
		return err
	}
	points := map[string]bool{}
	for _, m := range ms {
		points[m.point] = true
	}
	// A rename of a directory above a hidden path would move it on disk,
	// leaving guard's paths pointing at nothing the sandbox hides; a mount
	// point cannot be renamed (EBUSY). Bound recursively, outermost first,
	// so that each keeps the mounts already below it.
	for _, d := range ancestors(targets) {
		if points[d] || unix.Access(filepath.Dir(d), unix.W_OK) != nil {
			continue
		}
		if err := syscall.Mount(d, d, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			return fmt.Errorf("binding %s onto itself: %w", d, err)
		}
	}
	const hidden = syscall.MS_RDONLY | syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC
	empty := ""
	for _, t := range targets {
		var st syscall.Stat_t
		if err := syscall.Lstat(t, &st); err != nil {
			return fmt.Errorf("hiding %s: %w", t, err)
		}
		if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			if err := syscall.Mount("tmpfs", t, "tmpfs", hidden, "size=4k,nr_inodes=1,mode=0555"); err != nil {
				return fmt.Errorf("hiding %s: %w", t, err)
			}
			continue
		}
		if empty == "" {
			if empty, err = stageEmptyFile(); err != nil {
				return err
			}
		}
		if err := syscall.Mount(empty, t, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("hiding %s: %w", t, err)
		}
		if err := syscall.Mount("", t, "", syscall.MS_BIND|syscall.MS_REMOUNT|hidden, ""); err != nil {
			return fmt.Errorf("hiding %s: %w", t, err)
		}
	}
	if empty != "" {
		if err := syscall.Unmount("/proc", syscall.MNT_DETACH); err != nil {
			return fmt.Errorf("unmounting the staging file system: %w", err)
		}
	}
	if err := syscall.Mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting /proc: %w", err)
	}
	// The working directory was reached before the mounts: reach it
	// again, so that it is what the program would find by its path (a
	// directory under a hidden one is hidden too).
	for d := wd; d != ""; d = filepath.Dir(d) {
		if syscall.Chdir(d) == nil || d == "/" {
			break
		}
	}
	return nil
}

// hideTargets resolves the paths to hide and adds the other paths at which
// the same directory or file is mounted, each once, outermost first.
func hideTargets(ms []mount, hide []string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, h := range hide {
		if !filepath.IsAbs(h) {
			return nil, fmt.Errorf("hiding %s: not an absolute path", h)
		}
		real, err := filepath.EvalSymlinks(h)
		if err != nil {
			return nil, fmt.Errorf("hiding %s: %w", h, err)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(real, &st); err != nil {
			return nil, fmt.Errorf("hiding %s: %w", h, err)
		}
		add(real)
		for _, a := range aliases(ms, real) {
			var ast syscall.Stat_t
			if syscall.Stat(a, &ast) == nil && ast.Dev == st.Dev && ast.Ino == st.Ino {
				add(a)
			}
		}
	}
	return outermost(out), nil
}

// stageEmptyFile makes an empty file to mount over hidden files, in a
// tmpfs mounted for the moment over /proc (which is replaced afterwards).
func stageEmptyFile() (string, error) {
	if err := syscall.Mount("tmpfs", "/proc", "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "size=4k,mode=0755"); err != nil {
		return "", fmt.Errorf("mounting a staging file system: %w", err)
	}
	const f = "/proc/empty"
	if err := os.WriteFile(f, nil, 0o444); err != nil {
		return "", fmt.Errorf("making an empty file: %w", err)
	}
	return f, nil
}

// rootDrops are the capabilities a root program loses: those that undo or
// see past the sandbox (mounts, tracing, raw devices, kernel modules) and
// a few it has no business with. Root keeps its access to every file.
var rootDrops = []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_SYS_PTRACE, unix.CAP_SYS_MODULE, unix.CAP_SYS_RAWIO,
	unix.CAP_SYS_BOOT, unix.CAP_MKNOD, unix.CAP_SYS_TIME, unix.CAP_MAC_ADMIN, unix.CAP_MAC_OVERRIDE,
	unix.CAP_BPF, unix.CAP_PERFMON, unix.CAP_CHECKPOINT_RESTORE, unix.CAP_AUDIT_CONTROL, unix.CAP_SYSLOG}

// dropPrivileges removes capabilities from the bounding set (all of them
// for a user, rootDrops for root), clears the ambient ones and sets
// no_new_privs, so that the program cannot unmount what hides guard's
// files, nor regain the capability through a set-user-ID program. This
// thread is done first (the program is forked from it), then every other
// thread where the runtime allows it (not in a cgo build).
func dropPrivileges(root bool) error {
	drops := rootDrops
	if !root {
		last := uintptr(unix.CAP_CHECKPOINT_RESTORE)
		if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
			if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				last = uintptr(n)
			}
		}
		drops = nil
		for c := uintptr(0); c <= last; c++ {
			drops = append(drops, c)
		}
	}
	type call struct{ a1, a2 uintptr }
	var calls []call
	for _, c := range drops {
		calls = append(calls, call{unix.PR_CAPBSET_DROP, c})
	}
	calls = append(calls, call{unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL}, call{unix.PR_SET_NO_NEW_PRIVS, 1})
	for _, c := range calls {
		if _, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, c.a1, c.a2, 0, 0, 0, 0); e != 0 && !(c.a1 == unix.PR_CAPBSET_DROP && e == syscall.EINVAL) {
			return fmt.Errorf("dropping privileges (prctl %d %d): %w", c.a1, c.a2, e)
		}
	}
	for _, c := range calls {
		if _, _, e := syscall.AllThreadsSyscall6(syscall.SYS_PRCTL, c.a1, c.a2, 0, 0, 0, 0); e == syscall.ENOTSUP {
			break
		}
	}
	return nil
}
