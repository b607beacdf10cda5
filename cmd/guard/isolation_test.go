package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

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
			hide := st.SandboxHide(getenv, slog.New(slog.DiscardHandler), true)
			for _, p := range hide {
				if real, err := filepath.EvalSymlinks(p); !filepath.IsAbs(p) || err != nil || real != p {
					t.Errorf("hidden %q: not an absolute path without links (%q, %v)", p, real, err)
				}
			}
			covered := func(p string) bool { return slices.ContainsFunc(hide, func(h string) bool { return underDir(p, h) }) }
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

// underDir reports whether p is dir or below it.
func underDir(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
