package app

import (
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/guard-mcp/guard/config"
	"github.com/guard-mcp/guard/internal/pgtest"
	"github.com/guard-mcp/guard/sandbox"
)

func TestMain(m *testing.M) {
	// Servers that in-process subcommands start are isolated by this
	// binary, re-executed as the sandbox's init.
	if len(os.Args) > 1 && os.Args[1] == sandbox.InitCommand {
		os.Exit(sandbox.Init(os.Args[2:]))
	}
	if p := os.Getenv(touchEnv); p != "" { // a server that creates the file p
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	pgtest.Main(m) // runs the tests, then stops the PostgreSQL cluster they shared
}

// touchEnv names the file this test binary, started as a server, creates
// and exits.
const touchEnv = "GUARD_TEST_TOUCH"

// homeOnly is an environment that holds only HOME.
func homeOnly(home string) func(string) string {
	return func(k string) string {
		if k == "HOME" {
			return home
		}
		return ""
	}
}

// What servers must not see: guard's default directories, and of guard's
// files elsewhere, their directory when it holds only them, else each
// file, or the directory when one does not exist yet.
func TestSandboxHide(t *testing.T) {
	home := t.TempDir()
	getenv := homeOnly(home)
	shared := filepath.Join(home, "projects")
	own := filepath.Join(home, "etc-guard")
	for _, d := range []string{shared, own} {
		os.MkdirAll(d, 0o700)
	}
	os.WriteFile(filepath.Join(shared, "notes.txt"), nil, 0o600)
	os.WriteFile(filepath.Join(own, "guard.yaml"), nil, 0o600)
	db := filepath.Join(shared, "guard.db")
	for _, f := range []string{db, db + "-wal", db + "-shm", db + ".checkpoint", db + ".lock", filepath.Join(shared, "audit.key"), filepath.Join(shared, "ui.token")} {
		os.WriteFile(f, nil, 0o600)
	}
	os.MkdirAll(db+".journals", 0o700)
	os.MkdirAll(filepath.Join(own, "rules.d"), 0o700)
	st := &Settings{Config: config.Default(), ConfigPath: filepath.Join(own, "guard.yaml"), DBPath: db, DataDir: shared, RulesDir: filepath.Join(own, "rules.d")}
	got := st.SandboxHide(getenv, slog.New(slog.DiscardHandler), true)
	cfgDir, dataDir := config.Dirs(getenv) // each OS's own
	want := []string{
		cfgDir, dataDir, own,
		db, db + "-shm", db + "-wal", db + ".checkpoint", db + ".journal", db + ".journals", db + ".lock",
		db + ".checkpoint.lock", db + ".decisions.lock", db + ".verify.lock", db + ".retention.lock",
		filepath.Join(shared, "audit.key"), filepath.Join(shared, "ui.token"), filepath.Join(shared, exposedMarker),
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("hidden:\n%q\nwant:\n%q", got, want)
	}
	if fi, err := os.Stat(cfgDir); err != nil || !fi.IsDir() {
		t.Fatalf("the default config directory was not created: %v", err)
	}
	// One of guard's files missing: the shared directory is hidden whole.
	os.Remove(db + ".checkpoint")
	got = st.SandboxHide(getenv, slog.New(slog.DiscardHandler), true)
	if !slices.Contains(got, shared) {
		t.Fatalf("hidden %q: want %s whole", got, shared)
	}
}

// The marker of servers without isolation tells only while it is the file
// found at start: a process holding it, or a marker removed or replaced
// (as a server without isolation could), counts as exposure.
func TestOthersExposed(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, exposedMarker)
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	id, err := identifyFile(marker)
	if err != nil {
		t.Fatal(err)
	}
	iso := &isolation{logger: slog.New(slog.DiscardHandler), marker: marker, markerID: id}
	if iso.othersExposed() {
		t.Fatal("exposed with no process holding the marker")
	}
	other := &isolation{logger: slog.New(slog.DiscardHandler), marker: marker, markerID: id}
	other.expose()
	if !iso.othersExposed() {
		t.Fatal("not exposed while another holds the marker")
	}
	other.marked.Close()
	if iso.othersExposed() {
		t.Fatal("still exposed once the other let go")
	}
	os.Remove(marker)
	if !iso.othersExposed() {
		t.Fatal("not exposed with the marker removed")
	}
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if !iso.othersExposed() {
		t.Fatal("not exposed with the marker replaced")
	}
}

// On PostgreSQL, what the store keeps beside a checkpoint key outside the
// data directory (the checkpoint, its lock, the audit archives) is
// guard's own: the path rule refuses arguments that name it, and the
// sandbox hides it; an ordinary file beside them stays reachable.
func TestPostgresFilesBesideTheKey(t *testing.T) {
	home := t.TempDir()
	getenv := homeOnly(home)
	keys := filepath.Join(home, "keys")
	os.MkdirAll(keys, 0o700)
	for _, f := range []string{"audit.key", "audit.checkpoint", "notes.txt"} {
		os.WriteFile(filepath.Join(keys, f), nil, 0o600)
	}
	cfg := config.Default()
	cfg.Audit.KeyFile = filepath.Join(keys, "audit.key")
	st := &Settings{Config: cfg, DBPath: "postgres://guard@db.internal/guard", Postgres: true,
		DataDir: filepath.Join(home, ".local/share/guard"), RulesDir: filepath.Join(home, ".local/share/guard/rules.d")}
	names := func(p string) bool {
		args, err := json.Marshal(map[string]string{"path": p}) // a Windows path's backslashes escaped
		if err != nil {
			t.Fatal(err)
		}
		return st.protected().Check(args) != ""
	}
	for _, f := range []string{"audit.key", "audit.checkpoint", "audit.checkpoint.lock", "archive/2026-03-01.jsonl.gz"} {
		if !names(filepath.Join(keys, f)) {
			t.Errorf("the path rule lets a call name %s", f)
		}
	}
	if names(filepath.Join(keys, "notes.txt")) {
		t.Error("the path rule refuses a file beside the key that is not guard's")
	}
	hidden := st.SandboxHide(getenv, slog.New(slog.DiscardHandler), true)
	for _, f := range []string{"audit.key", "audit.checkpoint", "audit.checkpoint.lock"} {
		if !slices.Contains(hidden, filepath.Join(keys, f)) {
			t.Errorf("%s is not hidden from servers: %q", f, hidden)
		}
	}
}

// Once the probe at start found that isolation works here, a server that
// cannot be isolated is not started: the error says so, nothing runs, and
// no server counts as exposed. (It used to run without isolation, so
// that whatever made the sandbox fail let the server at guard's files.)
func TestIsolationFailsClosedOnceProbed(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := sandbox.Supported(self); err != nil {
		t.Skipf("no sandbox here: %v", err)
	}
	dir := t.TempDir()
	hidden := filepath.Join(dir, "guard")
	if err := os.Mkdir(hidden, 0o700); err != nil {
		t.Fatal(err)
	}
	log := newFileLog(t)
	iso := &isolation{spec: sandbox.Spec{Self: self, Hide: []string{hidden}}, logger: slog.New(slog.NewTextHandler(log, nil))}
	iso.probeAtStart()
	iso.settle([]string{"files"}, nil)
	if !strings.Contains(log.String(), "isolation in force") {
		t.Fatalf("the probe did not pass:\n%s", log.String())
	}
	// What guard hides is gone from where it was (moved away, say): the
	// sandbox cannot be set up for the next start.
	if err := os.Remove(hidden); err != nil {
		t.Fatal(err)
	}
	ran := filepath.Join(dir, "ran")
	cmd := exec.Command("/bin/sh", "-c", `: > "$0"`, ran)
	started, err := iso.start("files", nil)(cmd)
	if !errors.Is(err, errNotIsolated) || started != nil || cmd.Process != nil {
		t.Fatalf("start: %v (started %v)", err, started)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("the server ran")
	}
	if !iso.everyServerIsolated() {
		t.Fatal("a server counts as exposed")
	}
	if !strings.Contains(log.String(), `level=ERROR msg="server not started: it could not be isolated from guard's files" server=files`) {
		t.Fatalf("the log does not say it:\n%s", log.String())
	}
}

// Where the probe at start found no isolation on this system, a server
// runs on the path rules alone, said at error level (a warning on an OS
// that has none: macOS, Windows) and counted as exposed, unless its
// settings say sandbox: on: then it is refused.
func TestNoIsolationHereFallsBackUnlessRequired(t *testing.T) {
	cfg, err := config.Parse([]byte("servers:\n  strict: {command: [x], sandbox: on}\n  plain: {command: [x]}\n"), "g.yaml")
	if err != nil {
		t.Fatal(err)
	}
	log := newFileLog(t)
	iso := &isolation{logger: slog.New(slog.NewTextHandler(log, nil)),
		found: probeResult{none: errors.New("creating the namespaces: no space left on device")}}
	iso.probeOnce.Do(func() { // as if the probe at start had found no sandbox
		iso.probed = make(chan struct{})
		close(iso.probed)
	})
	iso.settle([]string{"plain", "strict"}, cfg.Servers)
	dir := t.TempDir()
	for _, name := range []string{"plain", "strict"} {
		ran := filepath.Join(dir, name)
		// The server is this test binary, told to create ran (TestMain):
		// a program every OS can run.
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), touchEnv+"="+ran)
		started, err := iso.start(name, cfg.Servers[name])(cmd)
		if err == nil {
			started.Wait()
		}
		_, statErr := os.Stat(ran)
		switch name {
		case "plain":
			if err != nil || statErr != nil {
				t.Fatalf("plain: %v, %v: want it run without isolation", err, statErr)
			}
		case "strict":
			if !errors.Is(err, errNotIsolated) || !strings.Contains(err.Error(), "sandbox: on") || statErr == nil {
				t.Fatalf("strict: %v, ran %v: want it refused", err, statErr == nil)
			}
		}
	}
	if iso.everyServerIsolated() {
		t.Fatal("the server without isolation does not count as exposed")
	}
	fallback := `level=ERROR msg="the server will run WITHOUT isolation`
	if !sandbox.OSSupported {
		fallback = `level=WARN msg="isolation is not available on this OS (`
	}
	for _, want := range []string{fallback, `level=ERROR msg="the server will not be started: its settings say sandbox: on`} {
		if !strings.Contains(log.String(), want) {
			t.Fatalf("the log does not say %q:\n%s", want, log.String())
		}
	}
}

// With retention on, the archives' directory is hidden from servers, as
// guard's other files are.
func TestSandboxHidesArchives(t *testing.T) {
	home := t.TempDir()
	env := map[string]string{"HOME": home}
	getenv := func(k string) string { return env[k] }
	// The database shares a directory with other files.
	shared := filepath.Join(home, "work")
	if err := os.Mkdir(shared, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(shared, "README"), "")
	db := filepath.Join(shared, "guard.db")
	for _, f := range []string{db, db + "-wal", db + "-shm", db + ".checkpoint", db + ".lock", filepath.Join(shared, "audit.key"), filepath.Join(shared, "ui.token")} {
		writeFile(t, f, "")
	}
	cfg := config.Default()
	cfg.Audit.Retention = 400 * 24 * time.Hour
	st := &Settings{Config: cfg, DBPath: db, DataDir: shared}
	got := st.SandboxHide(getenv, slog.New(slog.DiscardHandler), true)
	if !slices.Contains(got, filepath.Join(shared, "archive")) || slices.Contains(got, shared) {
		t.Fatalf("hidden %q: want the archive directory", got)
	}
	cfg.Audit.ArchiveDir = filepath.Join(home, "archives")
	got = st.SandboxHide(getenv, slog.New(slog.DiscardHandler), true)
	if !slices.Contains(got, cfg.Audit.ArchiveDir) {
		t.Fatalf("hidden %q: want %s", got, cfg.Audit.ArchiveDir)
	}
}

func writeFile(t *testing.T, path, text string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// fileLog is a log several goroutines may write (an isolation probes in
// the background): a file, read whole.
type fileLog struct{ *os.File }

func newFileLog(t *testing.T) fileLog {
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return fileLog{f}
}

func (l fileLog) String() string {
	b, _ := os.ReadFile(l.Name())
	return string(b)
}
