package proxy

import (
	"os"
	"path/filepath"
	"testing"
)

func TestServerName(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"npx", "-y", "@modelcontextprotocol/server-filesystem", "/home/me"}, "server-filesystem"},
		{[]string{"npx", "-y", "@modelcontextprotocol/server-filesystem@2025.1.14", "/srv"}, "server-filesystem"},
		{[]string{"/usr/local/bin/my-server", "--port", "1"}, "my-server"},
		{[]string{"uvx", "mcp-server-fetch@0.6"}, "mcp-server-fetch"},
		{[]string{"python3", "-u", "-m", "mcp_server_git", "--repo", "."}, "mcp_server_git"},
		{[]string{"node", "/opt/srv/dist/index.js"}, "index.js"},
		{[]string{"docker", "run", "-i", "--rm", "-e", "TOKEN=x", "mcp/github:latest"}, "github"},
		{[]string{"npx"}, "npx"},
		{[]string{"node", "node_modules/@modelcontextprotocol/server-everything/dist/index.js", "stdio"}, "index.js"},
		{[]string{"/usr/local/bin/guard", "example-server"}, "example-server"},
		// Windows' commands: backslashes, drives, programs' extensions.
		{[]string{`C:\Program Files\nodejs\node.exe`, `C:\mcp\notes\dist\index.js`}, "index.js"},
		{[]string{"npx.cmd", "-y", "@modelcontextprotocol/server-filesystem", `C:\Users\me`}, "server-filesystem"},
		{[]string{`C:\tools\Notes-Server.EXE`, "--port", "1"}, "Notes-Server"},
		{[]string{"python.exe", "-m", "mcp_server_git"}, "mcp_server_git"},
		{[]string{`C:\bin\guard.exe`, "example-server"}, "example-server"},
	} {
		if got := ServerName(tc.argv); got != tc.want {
			t.Errorf("ServerName(%q) = %q, want %q", tc.argv, got, tc.want)
		}
	}
}

// A script run by node or bun is named for its package (the nearest
// package.json at or above it), without its scope and made safe as a
// server name; a script outside a package keeps its file's name.
func TestServerNameOfAScriptIsItsPackages(t *testing.T) {
	dir := t.TempDir()
	write := func(path, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(dir, "notes", "package.json"), `{"name":"@acme/notes server","version":"1.0.0"}`)
	write(filepath.Join(dir, "notes", "dist", "index.js"), "")
	write(filepath.Join(dir, "notes", "dist", "package.json"), `{"type":"module"}`)
	write(filepath.Join(dir, "plain", "package.json"), `{"name":"mcp-plain"}`)
	write(filepath.Join(dir, "plain", "server.js"), "")
	write(filepath.Join(dir, "nameless", "package.json"), `{"private":true}`)
	write(filepath.Join(dir, "nameless", "lib", "main.js"), "")
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"node", filepath.Join(dir, "notes", "dist", "index.js"), "stdio"}, "notes-server"},
		{[]string{"/usr/bin/node", "--enable-source-maps", filepath.Join(dir, "plain", "server.js")}, "mcp-plain"},
		{[]string{"bun", filepath.Join(dir, "plain", "server.js")}, "mcp-plain"},
		{[]string{"node", filepath.Join(dir, "nameless", "lib", "main.js")}, "main.js"},
		{[]string{"node", filepath.Join(dir, "absent", "index.js")}, "index.js"},
		{[]string{"npx", "-y", "@modelcontextprotocol/server-filesystem", dir}, "server-filesystem"},
	} {
		if got := ServerName(tc.argv); got != tc.want {
			t.Errorf("ServerName(%q) = %q, want %q", tc.argv, got, tc.want)
		}
		if got := CommandName(tc.argv); tc.want == "notes-server" && got != "index.js" {
			t.Errorf("CommandName(%q) = %q, want the file's name", tc.argv, got)
		}
	}
	// The npm reference servers, as installed.
	if modules := os.Getenv("GUARD_TEST_NODE_MODULES"); modules != "" {
		script := filepath.Join(modules, "@modelcontextprotocol", "server-everything", "dist", "index.js")
		if got := ServerName([]string{"node", script, "stdio"}); got != "server-everything" {
			t.Errorf("ServerName(node %s) = %q, want server-everything", script, got)
		}
	}
}
