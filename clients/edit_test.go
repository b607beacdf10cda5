package clients

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testFile writes content as the file of client c in a directory of its
// own.
func testFile(t *testing.T, client, content string) *File {
	t.Helper()
	c, err := Lookup(client)
	if err != nil {
		t.Fatal(err)
	}
	f := &File{Client: c, Path: filepath.Join(t.TempDir(), "config"), sections: [][]string{{c.servers}}}
	if err := os.WriteFile(f.Path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func readString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func wrapFile(t *testing.T, f *File) *Change {
	t.Helper()
	c, err := Commit(func() (*Change, error) { return testWrapper().Wrap(context.Background(), f) }, false)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func unwrapFile(t *testing.T, f *File) *Change {
	t.Helper()
	c, err := Commit(func() (*Change, error) { return Unwrap(f) }, false)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A file that does not parse is left untouched, and the error names the
// file and the line.
func TestUnreadableFilesAreLeft(t *testing.T) {
	for _, tc := range []struct{ client, content, want string }{
		{"cursor", "{\n  \"mcpServers\": {\n    \"a\": {\"command\": \"x\"}\n    \"b\": {}\n  }\n}\n", ":4: invalid character"},
		{"codex", "[mcp_servers.a]\ncommand = \"x\"\nargs = [\"a\"\n", ":3:"},
		{"codex", "[mcp_servers.a]\ncommand = \"x\"\ncommand = \"y\"\n", ":3:"},
		{"vscode", "[1, 2]\n", ":1: the file is not a JSON object"},
		{"claude-code", "{\"mcpServers\": [1]}", `"mcpServers" is not an object`},
	} {
		f := testFile(t, tc.client, tc.content)
		_, err := testWrapper().Wrap(context.Background(), f)
		if err == nil || !strings.Contains(err.Error(), f.Path) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %q: %v, want the file's name and %q", tc.client, tc.content, err, tc.want)
		}
		if readString(t, f.Path) != tc.content {
			t.Errorf("%s: the file changed", tc.client)
		}
		if _, err := os.Stat(f.Path + BackupSuffix); err == nil {
			t.Errorf("%s: a backup was made", tc.client)
		}
	}
}

// Files with Windows line breaks get them in what guard writes too.
func TestWindowsLineBreaks(t *testing.T) {
	for client, content := range map[string]string{
		"vscode": "{\r\n  \"servers\": {\r\n    \"r\": {\r\n      \"type\": \"http\",\r\n      \"url\": \"https://oauth.x/mcp\"\r\n    },\r\n" +
			"    \"h\": {\r\n      \"type\": \"http\",\r\n      \"url\": \"https://h.example/mcp\",\r\n      \"headers\": {\"A\": \"b\"}\r\n    },\r\n" +
			"    \"s\": {\r\n      \"command\": \"x\",\r\n      \"args\": [\r\n        \"a\"\r\n      ]\r\n    }\r\n  }\r\n}\r\n",
		"codex": "[mcp_servers.h]\r\nurl = \"https://h.example/mcp\"\r\nhttp_headers = { A = \"b\" }\r\n\r\n[mcp_servers.s]\r\ncommand = \"x\"\r\nargs = [\r\n  \"a\",\r\n]\r\n",
	} {
		f := testFile(t, client, content)
		wrapFile(t, f)
		got := readString(t, f.Path)
		if strings.Count(got, "\n") != strings.Count(got, "\r\n") || !strings.Contains(got, "/opt/guard/bin/guard") {
			t.Errorf("%s: a line break without its carriage return:\n%q", client, got)
		}
		unwrapFile(t, f)
		if readString(t, f.Path) != content {
			t.Errorf("%s: not given back", client)
		}
	}
}

// A file that is a link stays one: its target is what changes; the
// backup and the record are beside the link, where the person looks.
func TestLinkedFile(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "dotfiles", "mcp.json")
	os.MkdirAll(filepath.Dir(target), 0o755)
	content := `{"mcpServers": {"s": {"command": "x"}}}`
	os.WriteFile(target, []byte(content), 0o600)
	c, _ := Lookup("cursor")
	f := &File{Client: c, Path: filepath.Join(dir, "mcp.json"), sections: [][]string{{"mcpServers"}}}
	if os.Getenv("GUARD_TEST_WINE") != "" {
		t.Skip("wine makes a link that its own open does not follow")
	}
	if err := os.Symlink(target, f.Path); err != nil {
		t.Skip(err)
	}
	wrapFile(t, f)
	if st, err := os.Lstat(f.Path); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was replaced: %v", err)
	}
	if !strings.Contains(readString(t, target), "/opt/guard/bin/guard") {
		t.Fatal("the target did not change")
	}
	if readString(t, f.Path+BackupSuffix) != content {
		t.Fatal("no backup beside the link")
	}
	unwrapFile(t, f)
	if readString(t, target) != content {
		t.Fatal("not given back")
	}
}

// A file that changes between planning and writing is not written; the
// change is planned again on what is there then.
func TestChangedMeanwhile(t *testing.T) {
	f := testFile(t, "claude-code", `{"mcpServers": {"a": {"command": "x"}}}`)
	c, err := testWrapper().Wrap(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	// Claude Code writes the file while it runs.
	rewritten := `{"mcpServers": {"a": {"command": "x"}}, "numStartups": 2}`
	os.WriteFile(f.Path, []byte(rewritten), 0o600)
	if err := c.Apply(); !errors.Is(err, ErrChanged) {
		t.Fatalf("Apply on a changed file: %v", err)
	}
	if readString(t, f.Path) != rewritten {
		t.Fatal("a changed file was written")
	}
	tries := 0
	c, err = Commit(func() (*Change, error) {
		c, err := testWrapper().Wrap(context.Background(), f)
		if tries++; tries == 1 {
			os.WriteFile(f.Path, []byte(rewritten+"\n"), 0o600)
		}
		return c, err
	}, false)
	if err != nil || tries != 2 || !strings.Contains(readString(t, f.Path), `"numStartups": 2}`+"\n") || !strings.Contains(readString(t, f.Path), "guard") {
		t.Fatalf("planned %d times: %v\n%s", tries, err, readString(t, f.Path))
	}
}

// A dry run writes nothing and shows the change as a unified diff.
func TestDryRun(t *testing.T) {
	content := "{\n  \"mcpServers\": {\n    \"a\": {\n      \"command\": \"x\"\n    }\n  }\n}\n"
	f := testFile(t, "cursor", content)
	c, err := Commit(func() (*Change, error) { return testWrapper().Wrap(context.Background(), f) }, true)
	if err != nil {
		t.Fatal(err)
	}
	want := "--- " + f.Path + "\n+++ " + f.Path + " (guard)\n@@ -1,7 +1,8 @@\n {\n   \"mcpServers\": {\n     \"a\": {\n-      \"command\": \"x\"\n" +
		"+      \"command\": \"/opt/guard/bin/guard\",\n+      \"args\": [\"run\", \"--name\", \"a\", \"--db\", \"/srv/guard/guard.db\", \"--\", \"x\"]\n     }\n   }\n }\n"
	if c.Diff() != want {
		t.Fatalf("diff:\n%s\nwant:\n%s", c.Diff(), want)
	}
	if readString(t, f.Path) != content {
		t.Fatal("a dry run wrote the file")
	}
	if entries, _ := os.ReadDir(filepath.Dir(f.Path)); len(entries) != 1 {
		t.Fatalf("a dry run left files: %v", entries)
	}
}

// Wrap, an entry added by hand, wrap again, unwrap: the file comes back as
// it was before the first wrap, with the entry added by hand as it was
// added.
func TestWrapTwiceThenUnwrap(t *testing.T) {
	first := "{\n  \"mcpServers\": {\n    \"a\": {\"command\": \"x\"}\n  }\n}\n"
	f := testFile(t, "windsurf", first)
	wrapFile(t, f)
	wrapped := readString(t, f.Path)
	added := strings.Replace(wrapped, "  }\n}", "  ,\"b\": {\"command\": \"y\", \"args\": [\"1\"]}\n  }\n}", 1)
	os.WriteFile(f.Path, []byte(added), 0o600)
	if c := wrapFile(t, f); !c.Changed() || c.Servers[0].Action != AlreadyWrapped || c.Servers[1].Action != Wrapped {
		t.Fatalf("the second wrap: %v", c.Servers)
	}
	unwrapFile(t, f)
	want := strings.Replace(first, "  }\n}", "  ,\"b\": {\"command\": \"y\", \"args\": [\"1\"]}\n  }\n}", 1)
	if got := readString(t, f.Path); got != want {
		t.Fatalf("after unwrap:\n%s\nwant:\n%s", got, want)
	}
	if readString(t, f.Path+BackupSuffix) != first {
		t.Fatal("the backup is not the file before the first wrap")
	}
}

// A backup that an unwrap left (the file had changed) is kept aside when
// a later wrap keeps the file as it is then.
func TestEarlierBackupKept(t *testing.T) {
	first := `{"mcpServers": {"a": {"command": "x"}}}`
	f := testFile(t, "cursor", first)
	wrapFile(t, f)
	edited := strings.Replace(readString(t, f.Path), `"command"`, `"cwd": "/srv", "command"`, 1)
	os.WriteFile(f.Path, []byte(edited), 0o600)
	unwrapFile(t, f)
	second := readString(t, f.Path)
	if second != `{"mcpServers": {"a": {"cwd": "/srv", "command": "x"}}}` || readString(t, f.Path+BackupSuffix) != first {
		t.Fatalf("after unwrap: %s, backup %s", second, readString(t, f.Path+BackupSuffix))
	}
	wrapFile(t, f)
	if readString(t, f.Path+BackupSuffix) != second || readString(t, f.Path+BackupSuffix+".1") != first {
		t.Fatal("the earlier backup was not kept aside")
	}
}

// An HTTP entry that is the only member, in compact JSON, comes out as
// strict JSON; its header's variable does not clash with the env's.
func TestCompactRemoteEntry(t *testing.T) {
	f := testFile(t, "cursor", `{"mcpServers":{"r":{"url":"https://h.example/mcp","headers":{"Authorization":"Bearer t"},"env":{"GUARD_HEADER_AUTHORIZATION":"other"}}}}`)
	wrapFile(t, f)
	var v struct {
		MCPServers map[string]struct {
			Command string
			Args    []string
			Env     map[string]string
			URL     string
		}
	}
	got := readString(t, f.Path)
	if err := json.Unmarshal([]byte(got), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, got)
	}
	r := v.MCPServers["r"]
	if r.URL != "" || r.Command != "/opt/guard/bin/guard" || r.Env["GUARD_HEADER_AUTHORIZATION_2"] != "Bearer t" || r.Env["GUARD_HEADER_AUTHORIZATION"] != "other" ||
		!strings.Contains(strings.Join(r.Args, " "), "--upstream https://h.example/mcp --header-env Authorization=GUARD_HEADER_AUTHORIZATION_2") {
		t.Fatalf("%s", got)
	}
}

// Empty files, files without servers, and unwrap without a record change
// nothing.
func TestNothingToDo(t *testing.T) {
	for client, content := range map[string]string{"claude-desktop": "", "cursor": "{}\n", "codex": "model = \"o3\"\n", "vscode": "// nothing yet\n{}"} {
		f := testFile(t, client, content)
		if c := wrapFile(t, f); c.Changed() || len(c.Servers) != 0 {
			t.Errorf("%s: %v", client, c.Servers)
		}
		if c := unwrapFile(t, f); c.Changed() || c.Note == "" {
			t.Errorf("%s: unwrap without a record: %+v", client, c)
		}
		if readString(t, f.Path) != content {
			t.Errorf("%s changed", client)
		}
	}
}

func TestIsGuard(t *testing.T) {
	for cmd, want := range map[string]bool{
		"/usr/local/bin/guard": true, `C:\Tools\guard.exe`: true, `C:\Tools\GUARD.EXE`: true, "guard": true,
		"/usr/bin/guardian": false, "npx": false, "/opt/guard/bin/node": false,
	} {
		if isGuard(cmd) != want {
			t.Errorf("isGuard(%q) = %v", cmd, !want)
		}
	}
}
