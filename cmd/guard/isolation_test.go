package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/guard-mcp/guard/policy"
	"github.com/guard-mcp/guard/sandbox"
	"github.com/guard-mcp/guard/store/pgtest"
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
	st := &settings{Config: policy.Default(), ConfigPath: filepath.Join(own, "guard.yaml"), DBPath: db, DataDir: shared, RulesDir: filepath.Join(own, "rules.d")}
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
	cfg := policy.Default()
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
