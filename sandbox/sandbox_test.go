package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	// The test binary is also the sandbox's init.
	if len(os.Args) > 1 && os.Args[1] == InitCommand {
		os.Exit(Init(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// testSpec hides paths, with this test binary as the init.
func testSpec(t testing.TB, hide ...string) Spec {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Spec{Self: self, Hide: hide}
}

// available skips the test where the kernel cannot make the sandbox.
func available(t testing.TB) {
	t.Helper()
	if _, err := Probe(testSpec(t)); err != nil {
		t.Skipf("no sandbox on this system: %v", err)
	}
}

// sh runs a shell script in the sandbox and returns its output and status.
func sh(t *testing.T, spec Spec, dir, script string) (string, int) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	started, err := Start(cmd, spec)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	err = started.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return out.String(), started.ProcessState.ExitCode()
}

// A hidden directory is empty and read-only by every path that names it; a
// hidden file is empty and read-only; everything else is as before.
func TestHide(t *testing.T) {
	available(t)
	home := t.TempDir()
	data := filepath.Join(home, ".local", "share", "guard")
	other := filepath.Join(home, "projects")
	for _, d := range []string{data, other} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(data, "ui.token")
	key := filepath.Join(other, "audit.key") // a file of guard's among others
	mine := filepath.Join(other, "notes.txt")
	for f, s := range map[string]string{secret: "token", key: "key", mine: "notes"} {
		if err := os.WriteFile(f, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(data, filepath.Join(home, "link")); err != nil {
		t.Fatal(err)
	}
	spec := testSpec(t, data, key)
	script := `
for p in .local/share/guard/ui.token ./x/../.local/share/guard/ui.token "$PWD/.local/share/guard/ui.token" link/ui.token \
  /proc/self/root$PWD/.local/share/guard/ui.token /proc/1/root$PWD/.local/share/guard/ui.token; do
  cat "$p" 2>/dev/null && echo "READ $p"
done
[ -s projects/audit.key ] && echo "READ key"
echo x > .local/share/guard/new 2>/dev/null && echo "WROTE new"
echo x > projects/audit.key 2>/dev/null && echo "WROTE key"
mv .local .local2 2>/dev/null && echo "MOVED .local"
mv .local/share .local/share2 2>/dev/null && echo "MOVED share"
mv .local/share/guard .local/share/guard2 2>/dev/null && echo "MOVED guard"
[ -e /proc/$GUARD_TEST_PID ] && echo "SEEN the test's process"
cat projects/notes.txt; echo
echo made > new.txt && cat new.txt
echo made > projects/more.txt && cat projects/more.txt
cat /etc/hostname >/dev/null && echo "read outside"
`
	t.Setenv("GUARD_TEST_PID", strconv.Itoa(os.Getpid()))
	out, code := sh(t, spec, home, script)
	if code != 0 {
		t.Fatalf("status %d: %s", code, out)
	}
	if strings.Contains(out, "READ") || strings.Contains(out, "WROTE") || strings.Contains(out, "MOVED") || strings.Contains(out, "SEEN") {
		t.Fatalf("reached a hidden path:\n%s", out)
	}
	for _, want := range []string{"notes\n", "made\nmade\n", "read outside"} {
		if !strings.Contains(out, want) {
			t.Fatalf("want %q in:\n%s", want, out)
		}
	}
	if b, _ := os.ReadFile(secret); string(b) != "token" {
		t.Fatalf("ui.token is now %q", b)
	}
	if b, _ := os.ReadFile(key); string(b) != "key" {
		t.Fatalf("audit.key is now %q", b)
	}
	if _, err := os.Stat(filepath.Join(home, "new.txt")); err != nil {
		t.Fatalf("a file made in the sandbox is not on disk: %v", err)
	}
}

// A directory reached through another mount of its file system (here a
// bind mount made before the sandbox) is hidden there too.
func TestHideAlias(t *testing.T) {
	available(t)
	if os.Getuid() != 0 {
		t.Skip("making the bind mount needs root")
	}
	base := t.TempDir()
	data := filepath.Join(base, "home", "guard")
	alias := filepath.Join(base, "alias")
	for _, d := range []string{data, alias} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(data, "ui.token"), []byte("token"), 0o600); err != nil {
		t.Fatal(err)
	}
	// In a mount namespace of the test's own, so the host is untouched.
	cmd := exec.Command("unshare", "-m", "sh", "-c",
		`mount --bind "$1/home" "$2" && cat "$2/guard/ui.token" && echo " VISIBLE outside" && exec "$3" `+InitCommand+` --hide "$4" -- /bin/sh sh -c 'cat "$0/guard/ui.token" && echo READ; true' "$2"`,
		"sh", base, alias, testSpec(t).Self, data)
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	cmd.ExtraFiles = []*os.File{null} // the init's status
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Skipf("unshare: %v: %s", err, out)
	}
	if strings.Contains(string(out), "READ") || !strings.Contains(string(out), "VISIBLE") {
		t.Fatalf("read through the alias: %s", out)
	}
}

// The program's exit status is the init's: a status, or 128+N for a
// signal; signals sent to the init reach the program.
func TestStatusAndSignals(t *testing.T) {
	available(t)
	spec := testSpec(t)
	if _, code := sh(t, spec, "", "exit 7"); code != 7 {
		t.Fatalf("status %d, want 7", code)
	}
	// The program says once its trap is set: the signal is sent then.
	cmd := exec.Command("/bin/sh", "-c", "trap 'exit 42' TERM; echo trap set; while :; do sleep 0.01; done")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd.Stdout = w
	started, err := Start(cmd, spec)
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(r).ReadString('\n'); line != "trap set\n" {
		t.Fatalf("the program did not say its trap is set: %q %v", line, err)
	}
	started.Process.Signal(syscall.SIGTERM)
	started.Wait()
	if c := started.ProcessState.ExitCode(); c != 42 {
		t.Fatalf("status %d after SIGTERM, want 42 (the program's trap)", c)
	}
	cmd = exec.Command("/bin/sleep", "10")
	if started, err = Start(cmd, spec); err != nil {
		t.Fatal(err)
	}
	started.Process.Signal(syscall.SIGINT)
	started.Wait()
	if c := started.ProcessState.ExitCode(); c != 128+int(syscall.SIGINT) {
		t.Fatalf("status %d after SIGINT, want %d", c, 128+int(syscall.SIGINT))
	}
}

// A program that cannot start is the program's error, not the sandbox's;
// a path that cannot be hidden is the sandbox's.
func TestStartErrors(t *testing.T) {
	available(t)
	_, err := Start(&exec.Cmd{Path: "/nonexistent/program", Args: []string{"x"}}, testSpec(t))
	if err == nil || errors.Is(err, ErrUnavailable) {
		t.Fatalf("missing program: %v", err)
	}
	_, err = Start(exec.Command("/bin/true"), testSpec(t, "/nonexistent/dir"))
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("missing hidden path: %v", err)
	}
}

// Paths to hide given relative to guard's working directory (plain, ./,
// ../) or through a symbolic link are hidden where guard finds them, even
// when the program runs in another directory: a relative path given as it
// is would name nothing there, or something else.
func TestHideRelativeAndLinked(t *testing.T) {
	available(t)
	base := t.TempDir()
	work, other := filepath.Join(base, "work"), filepath.Join(base, "other")
	files := map[string]string{ // under work, as guard names them → what the program reads
		"g.yaml":           "config",
		"sub/rules.yaml":   "rules",
		"data/ui.token":    "token",
		"../outside/x.key": "key",
	}
	for rel, s := range files {
		p := filepath.Join(work, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(other, 0o700)
	if err := os.Symlink(filepath.Join(work, "data"), filepath.Join(work, "data-link")); err != nil {
		t.Fatal(err)
	}
	t.Chdir(work)
	spec := testSpec(t, "g.yaml", "./sub/rules.yaml", "data-link", "../outside/x.key")
	cmd := exec.Command("/bin/sh", "-c", `cat "$0/g.yaml" "$0/sub/rules.yaml" "$0/data/ui.token" "$0/../outside/x.key" 2>/dev/null; echo; echo x > "$0/data/new" 2>/dev/null && echo WROTE; true`, work)
	cmd.Dir = other
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	started, err := Start(cmd, spec)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	started.Wait()
	out := b.String()
	for _, s := range files {
		if strings.Contains(out, s) {
			t.Fatalf("read %q through a path given relative or linked:\n%s", s, out)
		}
	}
	if strings.Contains(out, "WROTE") {
		t.Fatalf("wrote into a directory hidden through a link:\n%s", out)
	}
}

// BenchmarkStart measures what the sandbox adds to starting a program:
// the median of starting /bin/true and waiting for it, without and with.
// The init is this test binary, or GUARD_TEST_SANDBOX_INIT (a guard
// binary: its own start, package initialisation included, counts too).
func BenchmarkStart(b *testing.B) {
	available(b)
	home := b.TempDir()
	hide := []string{filepath.Join(home, "data"), filepath.Join(home, "config")}
	for _, d := range hide {
		os.MkdirAll(d, 0o700)
	}
	spec := testSpec(b, hide...)
	if init := os.Getenv("GUARD_TEST_SANDBOX_INIT"); init != "" {
		spec.Self = init
	}
	median := func(run func() error) time.Duration {
		var ds []time.Duration
		for range 50 {
			t0 := time.Now()
			if err := run(); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(t0))
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)/2]
	}
	for b.Loop() {
		plain := median(func() error { return exec.Command("/bin/true").Run() })
		boxed := median(func() error {
			c, err := Start(exec.Command("/bin/true"), spec)
			if err != nil {
				return err
			}
			return c.Wait()
		})
		b.ReportMetric(float64(plain.Microseconds()), "µs-plain")
		b.ReportMetric(float64(boxed.Microseconds()), "µs-sandboxed")
		b.Logf("start and wait for /bin/true, median of 50: plain %v, sandboxed %v (+%v)", plain, boxed, boxed-plain)
	}
}
