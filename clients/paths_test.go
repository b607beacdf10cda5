package clients

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"
)

// layouts are where each client keeps its user files on each system,
// relative to a home directory (written out here, not derived from the
// code under test). Windows's %APPDATA% and %LOCALAPPDATA% are set to
// their usual places under the home.
var layouts = map[string]map[string][]string{
	"linux": {
		"claude-desktop": {".config/Claude/claude_desktop_config.json"},
		"claude-code":    {".claude.json"},
		"cursor":         {".cursor/mcp.json"},
		"vscode": {".config/Code/User/mcp.json", ".config/Code/User/profiles/-5a3b1c/mcp.json",
			".config/Code - Insiders/User/mcp.json"},
		"windsurf":   {".codeium/windsurf/mcp_config.json"},
		"gemini-cli": {".gemini/settings.json"},
		"codex":      {".codex/config.toml"},
	},
	"darwin": {
		"claude-desktop": {"Library/Application Support/Claude/claude_desktop_config.json"},
		"claude-code":    {".claude.json"},
		"cursor":         {".cursor/mcp.json"},
		"vscode": {"Library/Application Support/Code/User/mcp.json", "Library/Application Support/Code/User/profiles/7f2e/mcp.json",
			"Library/Application Support/Code - Insiders/User/mcp.json"},
		"windsurf":   {".codeium/windsurf/mcp_config.json"},
		"gemini-cli": {".gemini/settings.json"},
		"codex":      {".codex/config.toml"},
	},
	"windows": {
		"claude-desktop": {"AppData/Roaming/Claude/claude_desktop_config.json",
			"AppData/Local/Packages/Claude_pzs8sxrjxfjjc/LocalCache/Roaming/Claude/claude_desktop_config.json"},
		"claude-code": {".claude.json"},
		"cursor":      {".cursor/mcp.json"},
		"vscode": {"AppData/Roaming/Code/User/mcp.json", "AppData/Roaming/Code/User/profiles/1a2b/mcp.json",
			"AppData/Roaming/Code - Insiders/User/mcp.json"},
		"windsurf":   {".codeium/windsurf/mcp_config.json"},
		"gemini-cli": {".gemini/settings.json"},
		"codex":      {".codex/config.toml"},
	},
}

// goldenBefore is the file of a client's golden test before wrap.
func goldenBefore(t testing.TB, client string) []byte {
	t.Helper()
	ar, err := txtar.ParseFile(filepath.Join("testdata", "golden", client+".txtar"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range ar.Files {
		if f.Name == "before" {
			return f.Data
		}
	}
	t.Fatalf("%s.txtar has no before", client)
	return nil
}

// Every client's files are found where each system keeps them, under a
// home of the test's own, and wrapped and given back there.
func TestFindOnEachSystem(t *testing.T) {
	for goos, layout := range layouts {
		t.Run(goos, func(t *testing.T) {
			home := t.TempDir()
			env := map[string]string{}
			if goos == "windows" {
				env["APPDATA"] = filepath.Join(home, "AppData", "Roaming")
				env["LOCALAPPDATA"] = filepath.Join(home, "AppData", "Local")
			}
			var want []string
			for client, rels := range layout {
				for _, rel := range rels {
					p := filepath.Join(home, filepath.FromSlash(rel))
					if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(p, goldenBefore(t, client), 0o600); err != nil {
						t.Fatal(err)
					}
					want = append(want, client+" "+p)
				}
			}
			// What no client reads is not found.
			os.MkdirAll(filepath.Join(home, ".config", "Code", "User", "profiles", "empty"), 0o755)
			os.WriteFile(filepath.Join(home, "mcp.json"), []byte("{}"), 0o600)
			e := Env{GOOS: goos, Getenv: func(k string) string { return env[k] }, Home: home}
			files, err := Find(e, nil, "")
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range files {
				got = append(got, f.Client.Name+" "+f.Path)
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("found\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			w := testWrapper()
			for _, f := range files {
				before, _ := os.ReadFile(f.Path)
				if _, err := Commit(func() (*Change, error) { return w.Wrap(context.Background(), f) }, false); err != nil {
					t.Fatalf("%s: %v", f.Path, err)
				}
				if after, _ := os.ReadFile(f.Path); string(after) == string(before) {
					t.Errorf("%s: wrap changed nothing", f.Path)
				}
				if _, err := Commit(func() (*Change, error) { return Unwrap(f) }, false); err != nil {
					t.Fatalf("%s: %v", f.Path, err)
				}
				if after, _ := os.ReadFile(f.Path); string(after) != string(before) {
					t.Errorf("%s: unwrap did not give it back", f.Path)
				}
			}
		})
	}
}

// The places the environment moves: XDG_CONFIG_HOME (Linux; a relative
// value is ignored, as the specification says), CODEX_HOME,
// CLAUDE_CONFIG_DIR, and %APPDATA% wherever it is.
func TestUserFilesFollowTheEnvironment(t *testing.T) {
	for _, tc := range []struct {
		goos, client string
		env          map[string]string
		want         string
	}{
		{"linux", "claude-desktop", map[string]string{"XDG_CONFIG_HOME": "/xdg"}, "/xdg/Claude/claude_desktop_config.json"},
		{"linux", "claude-desktop", map[string]string{"XDG_CONFIG_HOME": "rel"}, "/home/me/.config/Claude/claude_desktop_config.json"},
		{"linux", "vscode", map[string]string{"XDG_CONFIG_HOME": "/xdg"}, "/xdg/Code/User/mcp.json"},
		{"darwin", "vscode", map[string]string{"XDG_CONFIG_HOME": "/xdg"}, "/home/me/Library/Application Support/Code/User/mcp.json"},
		{"windows", "claude-desktop", map[string]string{"APPDATA": "/roaming"}, "/roaming/Claude/claude_desktop_config.json"},
		{"windows", "claude-desktop", nil, "/home/me/AppData/Roaming/Claude/claude_desktop_config.json"},
		{"windows", "vscode", map[string]string{"APPDATA": "/roaming"}, "/roaming/Code/User/mcp.json"},
		{"linux", "codex", map[string]string{"CODEX_HOME": "/codex"}, "/codex/config.toml"},
		{"windows", "claude-code", map[string]string{"CLAUDE_CONFIG_DIR": "/claude"}, "/claude/.claude.json"},
	} {
		if runtime.GOOS == "windows" && tc.goos != "windows" {
			continue // a Unix path such as /xdg is not absolute to Windows's path package
		}
		c, err := Lookup(tc.client)
		if err != nil {
			t.Fatal(err)
		}
		got := c.UserFiles(Env{GOOS: tc.goos, Getenv: func(k string) string { return tc.env[k] }, Home: "/home/me"})
		if got[0] != filepath.FromSlash(tc.want) {
			t.Errorf("%s on %s with %v: %v, want %s first", tc.client, tc.goos, tc.env, got, tc.want)
		}
	}
}

// A project's files are found only when asked for, and Claude Code's user
// file then gets the project's section too.
func TestFindProjectFiles(t *testing.T) {
	home, project := t.TempDir(), t.TempDir()
	for _, rel := range []string{".mcp.json", ".cursor/mcp.json", ".vscode/mcp.json", ".gemini/settings.json"} {
		p := filepath.Join(project, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(`{"mcpServers": {}}`), 0o600)
	}
	os.WriteFile(filepath.Join(home, ".claude.json"), []byte(`{}`), 0o600)
	e := Env{GOOS: "linux", Getenv: func(string) string { return "" }, Home: home}
	files, err := Find(e, nil, "")
	if err != nil || len(files) != 1 || len(files[0].Sections()) != 1 {
		t.Fatalf("without a project: %v %v", files, err)
	}
	files, err = Find(e, nil, project)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range files {
		rel, _ := filepath.Rel(project, f.Path)
		if !f.Project {
			rel = "~/" + filepath.Base(f.Path)
			if n := len(f.Sections()); n != 2 || f.Sections()[1][1] != project {
				t.Errorf("Claude Code's user file has sections %v", f.Sections())
			}
		}
		got = append(got, f.Client.Name+" "+filepath.ToSlash(rel))
	}
	want := []string{"claude-code ~/.claude.json", "claude-code .mcp.json", "cursor .cursor/mcp.json", "vscode .vscode/mcp.json", "gemini-cli .gemini/settings.json"}
	if !slices.Equal(got, want) {
		t.Fatalf("found %v, want %v", got, want)
	}
	if files, err := Find(e, []string{"cursor"}, project); err != nil || len(files) != 1 || files[0].Client.Name != "cursor" {
		t.Fatalf("cursor alone: %v %v", files, err)
	}
	if _, err := Find(e, []string{"zed"}, ""); err == nil || !strings.Contains(err.Error(), "claude-desktop, claude-code") {
		t.Fatalf("an unknown client: %v", err)
	}
}
