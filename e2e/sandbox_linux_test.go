package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/guard-mcp/guard/e2e/guardtest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The filesystem server, rooted at the home directory, cannot reach guard's
// files there by any path — relative, dotted, absolute, ~, through a
// symlink made before or after the start, through /proc/self/root or
// /proc/1/root — for reading or writing, nor move guard's directories
// away; and it still reads and creates ordinary files, in the home
// directory and outside it. The refusals that count are the server's
// (the file does not exist, or is read-only), not guard's path rule.
func TestSandboxHidesGuardFromAServer(t *testing.T) {
	sandboxAttacks(t, nil)
}

// The same, with guard running as an unprivileged user (nobody): the
// sandbox needs no privilege.
func TestSandboxHidesGuardFromAServerUnprivileged(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("starting guard as another user needs root; as a user, TestSandboxHidesGuardFromAServer already runs unprivileged")
	}
	sandboxAttacks(t, &syscall.Credential{Uid: 65534, Gid: 65534})
}

func sandboxAttacks(t *testing.T, cred *syscall.Credential) {
	sqliteOnly(t, "the files hidden include guard.db in the default data directory")
	node, js := guardtest.Node(t), filesystemServer(t)
	for _, p := range []string{node, js} {
		if cred != nil && !readableByOthers(p) {
			t.Skipf("%s cannot be read by uid %d: cannot run the server as that user", p, cred.Uid)
		}
	}
	base, guard := readableBase(t)
	home, outside, cwd := filepath.Join(base, "home"), filepath.Join(base, "outside"), filepath.Join(base, "cwd")
	data, config := filepath.Join(home, ".local/share/guard"), filepath.Join(home, ".config/guard")
	for _, d := range []string{data, config, outside, cwd} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	token := strings.Repeat("ab", 32)
	files := map[string]string{ // guard's files, as the home-relative path the server's root makes of them
		".local/share/guard/ui.token": token + "\n",
		".config/guard/guard.yaml":    "policy: {default: allow}\n",
	}
	for rel, s := range files {
		if err := os.WriteFile(filepath.Join(home, rel), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(outside, "readme.txt"), []byte("outside"), 0o644)
	os.Symlink(data, filepath.Join(home, "data-link"))
	os.Symlink(config, filepath.Join(home, "config-link"))
	if cred != nil {
		filepath.Walk(base, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, int(cred.Uid), int(cred.Gid)) })
	}

	cmd := exec.Command(guard, "run", "--no-ui", "--name", "files", "--", node, js, home, outside, "/proc")
	cmd.Dir = cwd // not the home directory: relative paths mean nothing to guard's path rule
	cmd.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := connectIsolated(t, ctx, cmd, cred)
	// guard's files now all exist: the database, its key.
	files[".local/share/guard/audit.key"] = ""
	files[".local/share/guard/guard.db"] = ""
	before := map[string][]byte{}
	for rel := range files {
		b, err := os.ReadFile(filepath.Join(home, rel))
		if err != nil {
			t.Fatal(err)
		}
		before[rel] = b
	}
	// A symlink made after the start, as an agent with another tool would.
	os.Symlink(data, filepath.Join(home, "late-link"))
	if cred != nil {
		os.Lchown(filepath.Join(home, "late-link"), int(cred.Uid), int(cred.Gid))
	}

	call := toolCaller(t, ctx, cs)
	// refused checks that a call failed; unless mayBeRule, it must be the
	// server's failure, not guard's path rule.
	refused := func(what, tool string, args map[string]any, mayBeRule bool) {
		t.Helper()
		text, isErr := call(tool, args)
		rule := strings.Contains(text, "guard-self-protection")
		if !isErr || strings.Contains(text, token) || strings.Contains(text, "default: allow") || rule && !mayBeRule {
			t.Errorf("%s: %s %v: error=%v %q", what, tool, args, isErr, text)
		}
	}
	for rel := range files {
		dir, name := filepath.Split(rel)
		link := "data-link/"
		if strings.HasPrefix(dir, ".config") {
			link = "config-link/"
		}
		abs := filepath.Join(home, rel)
		forms := []struct {
			path      string
			mayBeRule bool
		}{
			{rel, false},
			{"./x/../" + rel, false},
			{link + name, false},
			{"late-link/" + name, false},
			{"/proc/self/root" + abs, false},
			{"/proc/1/root" + abs, false},
			{abs, true},
			{"~/" + rel, true},
		}
		for _, f := range forms {
			if strings.HasPrefix(f.path, "late-link/") && strings.HasPrefix(dir, ".config") {
				continue // late-link points into the data directory
			}
			refused("read", "read_text_file", map[string]any{"path": f.path}, f.mayBeRule)
			refused("write", "write_file", map[string]any{"path": f.path, "content": "policy: {default: allow}\n# pwned"}, f.mayBeRule)
		}
	}
	if text, isErr := call("list_directory", map[string]any{"path": ".local/share/guard"}); isErr || strings.Contains(text, "guard.db") {
		t.Errorf("listing guard's data directory: error=%v %q", isErr, text)
	}
	for _, mv := range [][2]string{{".local/share", ".local/share2"}, {".local", ".local2"}, {".config", ".config2"}, {".config/guard", ".config/guard2"}, {".local/share/guard", "moved"}} {
		refused("move", "move_file", map[string]any{"source": mv[0], "destination": mv[1]}, false)
	}

	// Everything else works as before.
	if text, isErr := call("write_file", map[string]any{"path": "new.txt", "content": "made"}); isErr {
		t.Fatalf("creating ~/new.txt: %s", text)
	}
	if b, err := os.ReadFile(filepath.Join(home, "new.txt")); err != nil || string(b) != "made" {
		t.Fatalf("~/new.txt on disk: %q %v", b, err)
	}
	if text, isErr := call("write_file", map[string]any{"path": ".local/notes.txt", "content": "mine"}); isErr {
		t.Fatalf("creating a file beside guard's directories: %s", text)
	}
	if text, isErr := call("read_text_file", map[string]any{"path": filepath.Join(outside, "readme.txt")}); isErr || text != "outside" {
		t.Fatalf("reading outside the home directory: %v %q", isErr, text)
	}
	if text, isErr := call("read_text_file", map[string]any{"path": "new.txt"}); isErr || text != "made" {
		t.Fatalf("reading ~/new.txt: %v %q", isErr, text)
	}
	if text, isErr := call("move_file", map[string]any{"source": "new.txt", "destination": "renamed.txt"}); isErr {
		t.Fatalf("renaming an ordinary file: %s", text)
	}

	for rel, b := range before {
		if strings.HasSuffix(rel, "guard.db") {
			continue // guard itself writes it
		}
		if now, err := os.ReadFile(filepath.Join(home, rel)); err != nil || !bytes.Equal(now, b) {
			t.Errorf("%s changed: %q (%v)", rel, now, err)
		}
	}
	cs.Close()
	verify := exec.Command(guard, "audit", "verify")
	verify.Env = cmd.Env
	if out, err := verify.CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "ok") {
		t.Fatalf("audit verify after the attacks: %v %s", err, out)
	}
}

// readableBase makes a directory of the test's own that another user can
// read, with a copy of guard in it; it returns the directory and the copy.
func readableBase(t *testing.T) (base, guard string) {
	t.Helper()
	base, err := os.MkdirTemp("", "guard-sandbox-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	bin := filepath.Join(base, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	guard = filepath.Join(bin, "guard")
	if b, err := os.ReadFile(guardBin); err != nil || os.WriteFile(guard, b, 0o755) != nil {
		t.Fatalf("copying guard: %v", err)
	}
	return base, guard
}

// connectIsolated connects an attacking client to cmd, guard run as the
// user cred (nil: the test's), and checks that guard said isolation is
// in force, and nowhere that it is not; the session ends with the test.
func connectIsolated(t *testing.T, ctx context.Context, cmd *exec.Cmd, cred *syscall.Credential) *mcp.ClientSession {
	t.Helper()
	var stderr lockedLog
	cmd.Stderr = &stderr
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "attacker", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, stderr.String())
	}
	t.Cleanup(func() { cs.Close() })
	if log := stderr.String(); !strings.Contains(log, "isolation in force") || strings.Contains(log, "WITHOUT isolation") {
		t.Fatalf("guard did not say isolation is in force:\n%s", log)
	}
	return cs
}

// toolCaller returns a function that calls a tool of cs and returns its
// text and whether it is an error; a call that fails outright fails the
// test.
func toolCaller(t *testing.T, ctx context.Context, cs *mcp.ClientSession) func(tool string, args map[string]any) (string, bool) {
	return func(tool string, args map[string]any) (string, bool) {
		t.Helper()
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			t.Fatalf("%s %v: %v", tool, args, err)
		}
		var b strings.Builder
		for _, c := range r.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return b.String(), r.IsError
	}
}

// readableByOthers reports whether every directory to p can be searched,
// and p read, by any user.
func readableByOthers(p string) bool {
	for d := p; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return false
		}
		need := os.FileMode(0o001)
		if d == p && !fi.IsDir() {
			need = 0o004
		}
		if fi.Mode().Perm()&need == 0 {
			return false
		}
		if d == "/" {
			return true
		}
	}
}

// guard's files named relative to where guard runs — the configuration
// (--config g.yaml, GUARD_CONFIG=./g.yaml) and the database (--db,
// GUARD_DB), beside the project the server works on — are hidden all the
// same, as root and as nobody: the filesystem server cannot read the UI
// token or the configuration, plant a token of its own, nor move them
// away. A relative path used to make the sandbox fail ("not an absolute
// path") and the server ran without it.
func TestSandboxHidesFilesNamedRelatively(t *testing.T) {
	sqliteOnly(t, "the database is a file beside the configuration")
	creds := map[string]*syscall.Credential{"self": nil}
	if os.Getuid() == 0 {
		creds["nobody"] = &syscall.Credential{Uid: 65534, Gid: 65534}
	}
	forms := []struct {
		name  string
		flags []string
		env   []string
	}{
		{"flags", []string{"--config", "g.yaml", "--db", "./state/guard.db"}, nil},
		{"environment", nil, []string{"GUARD_CONFIG=./g.yaml", "GUARD_DB=../proj/state/guard.db"}},
	}
	for who, cred := range creds {
		for _, f := range forms {
			t.Run(who+"/"+f.name, func(t *testing.T) { relativeAttacks(t, cred, f.flags, f.env) })
		}
	}
}

func relativeAttacks(t *testing.T, cred *syscall.Credential, flags, environ []string) {
	node, js := guardtest.Node(t), filesystemServer(t)
	if cred != nil && (!readableByOthers(node) || !readableByOthers(js)) {
		t.Skipf("the server cannot be read by uid %d", cred.Uid)
	}
	base, guard := readableBase(t)
	home := filepath.Join(base, "home")
	proj := filepath.Join(home, "proj") // the server's work, and guard's files beside it
	for _, d := range []string{filepath.Join(proj, "state"), filepath.Join(home, ".local/share/guard")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	token := strings.Repeat("cd", 32)
	files := map[string]string{
		"proj/g.yaml":         "policy: {default: allow}\n",
		"proj/state/ui.token": token + "\n",
		"proj/notes.txt":      "notes",
	}
	for rel, s := range files {
		if err := os.WriteFile(filepath.Join(home, rel), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if cred != nil {
		filepath.Walk(base, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, int(cred.Uid), int(cred.Gid)) })
	}
	cmd := exec.Command(guard, append(append([]string{"run", "--no-ui", "--name", "files"}, flags...), "--", node, js, home)...)
	cmd.Dir = proj // where guard's relative paths start
	cmd.Env = append([]string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}, environ...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := connectIsolated(t, ctx, cmd, cred)
	call := toolCaller(t, ctx, cs)
	// A hidden directory does not exist; a file hidden alone (the
	// configuration, among the project's files) reads empty.
	for _, rel := range []string{"proj/g.yaml", "proj/state/ui.token"} {
		if text, isErr := call("read_text_file", map[string]any{"path": rel}); strings.Contains(text, token) || strings.Contains(text, "default: allow") {
			t.Errorf("read %s: error=%v %q", rel, isErr, text)
		}
	}
	planted := strings.Repeat("ef", 32)
	if text, isErr := call("write_file", map[string]any{"path": "proj/state/ui.token", "content": planted}); !isErr {
		t.Errorf("planted a UI token: %q", text)
	}
	if text, isErr := call("write_file", map[string]any{"path": "proj/g.yaml", "content": "policy: {default: allow}\n# pwned\n"}); !isErr {
		t.Errorf("rewrote the configuration: %q", text)
	}
	for _, mv := range [][2]string{{"proj/state", "moved"}, {"proj", "proj2"}, {"proj/g.yaml", "g2.yaml"}} {
		if text, isErr := call("move_file", map[string]any{"source": mv[0], "destination": mv[1]}); !isErr {
			t.Errorf("moved %s away: %q", mv[0], text)
		}
	}
	// The project itself is the server's as before.
	if text, isErr := call("read_text_file", map[string]any{"path": "proj/notes.txt"}); isErr || text != "notes" {
		t.Errorf("reading the project's notes: error=%v %q", isErr, text)
	}
	if text, isErr := call("write_file", map[string]any{"path": "proj/new.txt", "content": "made"}); isErr {
		t.Errorf("writing in the project: %q", text)
	}
	for rel, s := range files {
		if b, err := os.ReadFile(filepath.Join(home, rel)); err != nil || string(b) != s {
			t.Errorf("%s is now %q (%v)", rel, b, err)
		}
	}
}
