package main

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

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
	pgtest.Main(m) // runs the tests, then stops the PostgreSQL cluster they shared
}

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
	st := &settings{Config: config.Default(), ConfigPath: filepath.Join(own, "guard.yaml"), DBPath: db, DataDir: shared, RulesDir: filepath.Join(own, "rules.d")}
	got := st.sandboxHide(getenv, slog.New(slog.DiscardHandler), true)
	want := []string{
		filepath.Join(home, ".config/guard"), filepath.Join(home, ".local/share/guard"), own,
		db, db + "-shm", db + "-wal", db + ".checkpoint", db + ".journal", db + ".journals", db + ".lock",
		db + ".checkpoint.lock", db + ".decisions.lock", db + ".verify.lock", db + ".retention.lock",
		filepath.Join(shared, "audit.key"), filepath.Join(shared, "ui.token"), filepath.Join(shared, exposedMarker),
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("hidden:\n%q\nwant:\n%q", got, want)
	}
	if fi, err := os.Stat(filepath.Join(home, ".config/guard")); err != nil || !fi.IsDir() {
		t.Fatalf("the default config directory was not created: %v", err)
	}
	// One of guard's files missing: the shared directory is hidden whole.
	os.Remove(db + ".checkpoint")
	got = st.sandboxHide(getenv, slog.New(slog.DiscardHandler), true)
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
	st := &settings{Config: cfg, DBPath: "postgres://guard@db.internal/guard", Postgres: true,
		DataDir: filepath.Join(home, ".local/share/guard"), RulesDir: filepath.Join(home, ".local/share/guard/rules.d")}
	names := func(p string) bool { return st.protected().Check([]byte(`{"path":"`+p+`"}`)) != "" }
	for _, f := range []string{"audit.key", "audit.checkpoint", "audit.checkpoint.lock", "archive/2026-03-01.jsonl.gz"} {
		if !names(filepath.Join(keys, f)) {
			t.Errorf("the path rule lets a call name %s", f)
		}
	}
	if names(filepath.Join(keys, "notes.txt")) {
		t.Error("the path rule refuses a file beside the key that is not guard's")
	}
	hidden := st.sandboxHide(getenv, slog.New(slog.DiscardHandler), true)
	for _, f := range []string{"audit.key", "audit.checkpoint", "audit.checkpoint.lock"} {
		if !slices.Contains(hidden, filepath.Join(keys, f)) {
			t.Errorf("%s is not hidden from servers: %q", f, hidden)
		}
	}
}

// Every path guard hides is absolute, its links resolved, however the
// configuration, the database and included rule files were named —
// relative, ./, ../, through GUARD_CONFIG and GUARD_DB, through a linked
// directory or a linked file — and the sandbox can hide them all. (A
// relative path made the sandbox fail, and the server ran without it.)
func TestHiddenPathsAreAbsolute(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	home, proj, shared, other, elsewhere := filepath.Join(base, "home"), filepath.Join(base, "proj"), filepath.Join(base, "shared"),
		filepath.Join(base, "other"), filepath.Join(base, "elsewhere")
	for _, d := range []string{home, filepath.Join(proj, "rules"), filepath.Join(proj, "sub"), shared, other, elsewhere} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(proj, "g.yaml")
	files := map[string]string{
		cfg:                                     "include: [rules/*.yaml, ../shared/*.yaml]\n",
		filepath.Join(proj, "rules", "a.yaml"):  "rules: []\n",
		filepath.Join(shared, "b.yaml"):         "rules: []\n",
		filepath.Join(elsewhere, "c.yaml"):      "rules: []\n",
		filepath.Join(elsewhere, "notes.txt"):   "mine",
		filepath.Join(other, "notes.txt"):       "mine",
		filepath.Join(proj, "sub", "notes.txt"): "mine",
	}
	for f, s := range files {
		if err := os.WriteFile(f, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// An included file that links out of its directory, a linked
	// directory, and a linked configuration file among other files.
	for link, to := range map[string]string{
		filepath.Join(proj, "rules", "c.yaml"): filepath.Join(elsewhere, "c.yaml"),
		filepath.Join(base, "proj-link"):       proj,
		filepath.Join(other, "g.yaml"):         cfg,
	} {
		if err := os.Symlink(to, link); err != nil {
			t.Fatal(err)
		}
	}
	included := []string{filepath.Join(proj, "rules"), filepath.Join(elsewhere, "c.yaml")}
	for _, tc := range []struct {
		name  string
		cwd   string
		flags commonFlags
		env   map[string]string
		want  []string // hidden, or below a hidden directory
	}{
		{"relative", proj, commonFlags{config: "g.yaml", db: "state/guard.db"}, nil, included},
		{"dotted", proj, commonFlags{config: "./g.yaml", db: "./state/guard.db"}, nil, included},
		{"parent", filepath.Join(proj, "sub"), commonFlags{config: "../g.yaml", db: "../state/guard.db"}, nil, included},
		{"environment", proj, commonFlags{}, map[string]string{"GUARD_CONFIG": "g.yaml", "GUARD_DB": "state/guard.db"}, included},
		{"linked directory", base, commonFlags{config: "proj-link/g.yaml", db: "proj-link/state/guard.db"}, nil, included},
		// Read through the link, the configuration includes from beside
		// the link; the link, which a server could point elsewhere, is
		// hidden with its directory.
		{"linked file", other, commonFlags{config: "g.yaml", db: "../proj/state/guard.db"}, nil, []string{other}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Chdir(tc.cwd)
			env := map[string]string{"HOME": home}
			for k, v := range tc.env {
				env[k] = v
			}
			getenv := func(k string) string { return env[k] }
			st, err := newApp(strings.NewReader(""), io.Discard, io.Discard, getenv).settings(&tc.flags)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{st.ConfigPath, st.DBPath, st.DataDir, st.RulesDir} {
				if !filepath.IsAbs(p) {
					t.Errorf("%q is not an absolute path: guard reads it from wherever it runs", p)
				}
			}
			hide := st.sandboxHide(getenv, slog.New(slog.DiscardHandler), true)
			for _, p := range hide {
				if real, err := filepath.EvalSymlinks(p); !filepath.IsAbs(p) || err != nil || real != p {
					t.Errorf("hidden %q: not an absolute path without links (%q, %v)", p, real, err)
				}
			}
			covered := func(p string) bool { return slices.ContainsFunc(hide, func(h string) bool { return under(p, h) }) }
			want := append([]string{cfg, filepath.Join(shared, "b.yaml"), filepath.Join(proj, "state", "guard.db"),
				filepath.Join(proj, "state", "ui.token")}, tc.want...)
			for _, p := range want {
				if !covered(p) {
					t.Errorf("%s is not hidden: %q", p, hide)
				}
			}
			for _, p := range []string{filepath.Join(elsewhere, "notes.txt"), filepath.Join(proj, "sub", "notes.txt")} {
				if covered(p) {
					t.Errorf("%s, no file of guard's, is hidden: %q", p, hide)
				}
			}
			if err := sandbox.Supported(self); err != nil {
				t.Skipf("no sandbox here: %v", err)
			}
			if _, err := sandbox.Probe(sandbox.Spec{Self: self, Hide: hide}); err != nil {
				t.Fatalf("the sandbox cannot hide them: %v", err)
			}
		})
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
	var log lockedBuffer
	iso := &isolation{spec: sandbox.Spec{Self: self, Hide: []string{hidden}}, logger: slog.New(slog.NewTextHandler(&log, nil))}
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
	var log lockedBuffer
	iso := &isolation{logger: slog.New(slog.NewTextHandler(&log, nil)),
		found: probeResult{none: errors.New("creating the namespaces: no space left on device")}}
	iso.probeOnce.Do(func() { // as if the probe at start had found no sandbox
		iso.probed = make(chan struct{})
		close(iso.probed)
	})
	iso.settle([]string{"plain", "strict"}, cfg.Servers)
	dir := t.TempDir()
	for _, name := range []string{"plain", "strict"} {
		ran := filepath.Join(dir, name)
		started, err := iso.start(name, cfg.Servers[name])(exec.Command("/bin/sh", "-c", `: > "$0"`, ran))
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

// guard policy check says, on an OS without isolation, that the path
// rules alone protect guard's files, whether or not the configuration
// names stdio servers; on Linux it says nothing of the OS.
func TestPolicyCheckSaysWhereThereIsNoIsolation(t *testing.T) {
	stdout, stderr, code := run(t, t.TempDir(), "policy", "check")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	said := strings.Contains(stdout, "NOT AVAILABLE: isolation is not available on this OS") &&
		strings.Contains(stderr, "WARNING: isolation is not available on this OS") &&
		strings.Contains(stderr, "only the path rules (guard-self-protection) protect them")
	if said == sandbox.OSSupported {
		t.Fatalf("isolation on this OS: %v; guard policy check said:\n%s\n%s", sandbox.OSSupported, stdout, stderr)
	}
}
