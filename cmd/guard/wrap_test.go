package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeUnder writes content at dir/rel, making its directory.
func writeUnder(t *testing.T, dir, rel, content string) string {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func fileString(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// guard wrap lists, shows, wraps and unwraps the files of the clients
// found under the home; the entries name guard's database, which a
// client's environment would not lead guard to.
func TestWrapAndUnwrap(t *testing.T) {
	dir := t.TempDir()
	bin := writeUnder(t, dir, "bin/guard", "#!/bin/sh\n")
	cursorJSON := "{\n  \"mcpServers\": {\n    \"notes\": {\n      \"command\": \"notes-server\",\n      \"env\": {\"GUARD_DB\": \"/elsewhere.db\"}\n    }\n  }\n}\n"
	cursor := writeUnder(t, dir, ".cursor/mcp.json", cursorJSON)
	codexTOML := "# mine\n[mcp_servers.files]\ncommand = \"npx\"\nargs = [\"-y\", \"@modelcontextprotocol/server-filesystem\", \"/srv\"]\n"
	codex := writeUnder(t, dir, ".codex/config.toml", codexTOML)
	desktop := writeUnder(t, dir, "config/Claude/claude_desktop_config.json", "{\"mcpServers\": {}}\n")
	db := filepath.Join(dir, "data", "guard", "guard.db")

	out, stderr, code := run(t, dir, "wrap", "--list", "--guard", bin)
	if code != 0 || !strings.Contains(out, "Cursor (cursor): "+cursor+"\n  notes: not wrapped: runs notes-server\n") ||
		!strings.Contains(out, "Codex (codex): "+codex+"\n  files: not wrapped: runs npx\n") {
		t.Fatalf("--list (%d): %s%s", code, out, stderr)
	}
	// Claude Desktop's extensions are not in its file: --list says so
	// beside the file, and only there.
	if i := strings.Index(out, "Claude Desktop (claude-desktop): "+desktop+"\n"); i < 0 ||
		!strings.Contains(out[i:], "Desktop Extensions are not in this file") ||
		strings.Count(out, "Desktop Extensions") != 1 {
		t.Fatalf("--list does not say where Claude Desktop's extensions are: %s", out)
	}
	out, _, code = run(t, dir, "wrap", "cursor", "--dry-run", "--guard", bin)
	if code != 0 || !strings.Contains(out, "--- "+cursor+"\n+++ "+cursor+" (guard)\n") || strings.Contains(out, "Codex") || fileString(t, cursor) != cursorJSON {
		t.Fatalf("--dry-run (%d): %s", code, out)
	}
	out, stderr, code = run(t, dir, "wrap", "--guard", bin)
	if code != 0 || !strings.Contains(out, "  notes: wrapped\n") || !strings.Contains(out, "  files: wrapped\n") ||
		!strings.Contains(out, "the original is kept as "+cursor+".guard-backup") || !strings.Contains(out, "Restart Cursor, Codex") {
		t.Fatalf("wrap (%d): %s%s", code, out, stderr)
	}
	// guard's database is not the default under HOME alone, and the
	// entry's GUARD_DB would name another: --db says which.
	if got := fileString(t, cursor); !strings.Contains(got, `"command": "`+bin+`",`) ||
		!strings.Contains(got, `"args": ["run", "--name", "notes", "--db", "`+db+`", "--", "notes-server"]`) {
		t.Fatalf("the wrapped entry:\n%s", got)
	}
	if got := fileString(t, codex); got != "# mine\n[mcp_servers.files]\ncommand = \""+bin+"\"\nargs = [\"run\", \"--name\", \"files\", \"--db\", \""+db+"\", \"--\", \"npx\", \"-y\", \"@modelcontextprotocol/server-filesystem\", \"/srv\"]\n" {
		t.Fatalf("the wrapped entry:\n%s", got)
	}
	wrapped := fileString(t, cursor)
	out, _, code = run(t, dir, "wrap", "--guard", bin)
	if code != 0 || !strings.Contains(out, "notes: already wrapped: by "+bin) || strings.Contains(out, "Restart") || fileString(t, cursor) != wrapped {
		t.Fatalf("a second wrap (%d): %s", code, out)
	}
	out, _, _ = run(t, dir, "wrap", "--list", "--guard", bin)
	if !strings.Contains(out, "notes: wrapped by "+bin) {
		t.Fatalf("--list after wrap: %s", out)
	}
	out, stderr, code = run(t, dir, "unwrap")
	if code != 0 || !strings.Contains(out, "notes: restored") || fileString(t, cursor) != cursorJSON || fileString(t, codex) != codexTOML {
		t.Fatalf("unwrap (%d): %s%s", code, out, stderr)
	}
	for _, p := range []string{cursor, codex} {
		for _, leftover := range []string{".guard-backup", ".guard-wrap"} {
			if _, err := os.Stat(p + leftover); err == nil {
				t.Errorf("%s%s is left", p, leftover)
			}
		}
	}
	out, _, code = run(t, dir, "unwrap")
	if code != 0 || !strings.Contains(out, "no record of a wrap by guard") {
		t.Fatalf("a second unwrap (%d): %s", code, out)
	}
}

// --config given to wrap reaches every entry; a project's files are
// wrapped only with --project, after a warning; Claude Code is told to
// quit.
func TestWrapConfigAndProject(t *testing.T) {
	dir := t.TempDir()
	bin := writeUnder(t, dir, "bin/guard", "#!/bin/sh\n")
	cfg := writeUnder(t, dir, "etc/guard.yaml", "policy: {default: allow}\n")
	project := filepath.Join(dir, "app")
	user := writeUnder(t, dir, ".claude.json", `{"mcpServers": {}, "projects": {"`+project+`": {"mcpServers": {"db": {"command": "db-server"}}}}}`)
	mcp := writeUnder(t, project, ".mcp.json", `{"mcpServers": {"web": {"type": "stdio", "command": "web-server", "args": []}}}`)
	out, stderr, code := run(t, dir, "wrap", "--guard", bin, "--config", cfg)
	if code != 0 || strings.Contains(fileString(t, user), bin) || strings.Contains(fileString(t, mcp), bin) {
		t.Fatalf("without --project (%d): %s%s", code, out, stderr)
	}
	out, stderr, code = run(t, dir, "wrap", "claude-code", "--guard", bin, "--config", cfg, "--project", project)
	if code != 0 || !strings.Contains(stderr, "project files are usually committed") || !strings.Contains(stderr, "Claude Code rewrites "+user+" while it runs") {
		t.Fatalf("with --project (%d): %s%s", code, out, stderr)
	}
	if !strings.Contains(out, "db (project "+project+"): wrapped") {
		t.Fatalf("the project's section of ~/.claude.json: %s", out)
	}
	for _, p := range []string{user, mcp} {
		if got := fileString(t, p); !strings.Contains(got, `"--config", "`+cfg+`"`) {
			t.Fatalf("%s has no --config:\n%s", p, got)
		}
	}
}

// Bad usage exits 2; a file that cannot be read exits 1, names its line,
// and does not stop the others.
func TestWrapErrors(t *testing.T) {
	dir := t.TempDir()
	bin := writeUnder(t, dir, "bin/guard", "#!/bin/sh\n")
	bad := writeUnder(t, dir, ".cursor/mcp.json", "{\n  \"mcpServers\": {,}\n}\n")
	good := writeUnder(t, dir, ".gemini/settings.json", `{"mcpServers": {"s": {"command": "x"}}}`)
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"wrap", "zed"}, 2, `unknown client "zed" (want one of claude-desktop, claude-code, cursor, vscode, windsurf, gemini-cli, codex)`},
		{[]string{"unwrap", "--frobnicate"}, 2, "unknown flag: --frobnicate"},
		{[]string{"wrap", "--guard", filepath.Join(dir, "nope")}, 2, "is not a guard binary"},
		{[]string{"wrap", "codex", "--guard", bin}, 1, "no file of codex found"},
		{[]string{"wrap", "--guard", bin}, 1, bad + ":2: invalid character ','"},
	} {
		_, stderr, code := run(t, dir, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.stderr) {
			t.Errorf("guard %s: exit %d, %q; want %d with %q", strings.Join(tc.args, " "), code, stderr, tc.code, tc.stderr)
		}
	}
	if !strings.Contains(fileString(t, good), bin) {
		t.Fatal("a bad file kept the others from being wrapped")
	}
}
