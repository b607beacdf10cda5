package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
)

// run runs guard in-process with a clean environment rooted in dir.
func run(t *testing.T, dir string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runEnv(t, dir, nil, args...)
}

// runEnv is run with more variables in guard's environment.
func runEnv(t *testing.T, dir string, more map[string]string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	env := map[string]string{"HOME": dir, "XDG_CONFIG_HOME": filepath.Join(dir, "config"), "XDG_DATA_HOME": filepath.Join(dir, "data")}
	maps.Copy(env, more)
	var out, errb lockedBuffer
	code = newApp(strings.NewReader(""), &out, &errb, func(k string) string { return env[k] }).main(context.Background(), args)
	return out.String(), errb.String(), code
}

// lockedBuffer is a buffer several goroutines may write: guard's stderr is
// written by its logger and, when it is not a file, by the goroutine that
// copies a server's stderr to it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestCommandLine(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("policy:\n  default: sometimes\n"), 0o600)
	public := filepath.Join(dir, "public.yaml")
	os.WriteFile(public, []byte("public_url: https://Guard.Example.com/\n"), 0o600)
	passkey := filepath.Join(dir, "passkey.yaml")
	os.WriteFile(passkey, []byte("ui: {passkey: required}\n"), 0o600)
	passkeyCLI := filepath.Join(dir, "passkey-cli.yaml")
	os.WriteFile(passkeyCLI, []byte("ui: {passkey: required}\napproval: {cli: true}\n"), 0o600)
	badPublic := filepath.Join(dir, "bad-public.yaml")
	os.WriteFile(badPublic, []byte("ui: {listen: 127.0.0.1:8931}\npublic_url: https://guard.example.com/guard\n"), 0o600)
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{[]string{"policy", "check", "--config", bad}, 2, "", bad + `:2: "sometimes" is not one of annotations, allow, deny, approve`},
		{[]string{"policy", "check", "--config", filepath.Join(dir, "missing.yaml")}, 2, "", "missing.yaml"},
		{[]string{"policy", "check"}, 0, "built-in defaults", ""},
		{[]string{"audit", "verify"}, 3, "CANNOT VERIFY: there is no database at", ""},
		{[]string{"audit", "query", "--format", "xml"}, 2, "", "want table, jsonl or csv"},
		{[]string{"audit", "query", "--since", "yesterday"}, 2, "", "neither an RFC 3339 time nor a duration"},
		{[]string{"audit", "query", "--since", "7d"}, 0, "TIME", ""},
		{[]string{"audit", "query", "--decision", "approve"}, 2, "", `--decision "approve": want one of allowed, denied, held, approved, expired, withdrawn`},
		{[]string{"audit", "query", "--outcome", "fine"}, 2, "", "want one of ok, tool_error,"},
		{[]string{"audit", "-h"}, 0, "guard audit COMMAND", ""},
		{[]string{"tools", "help"}, 0, "guard tools COMMAND", ""},
		{[]string{"audit"}, 2, "", "guard audit COMMAND"},
		{[]string{"approvals", "deny", "0192"}, 2, "", `required flag(s) "reason" not set`},
		{[]string{"approvals", "deny", "0192", "--reason", ""}, 2, "", "--reason is required"},
		{[]string{"approvals", "approve", "no-such-id", "--by", "x"}, 1, "", "no held call with id no-such-id"},
		{[]string{"approvals", "list"}, 0, "ID", ""},
		{[]string{"approvals", "list", "--format", "yaml"}, 2, "", "want table, jsonl or csv"},
		{[]string{"approvals", "revoke", "x"}, 2, "", `unknown subcommand "revoke"`},
		{[]string{"approvals"}, 2, "", "guard approvals COMMAND"},
		{[]string{"audit", "delete"}, 2, "", `unknown subcommand "delete"`},
		{[]string{"policy", "apply"}, 2, "", `unknown subcommand "apply" (check, reload, replay, test)`},
		{[]string{"run", "--no-ui", "--upstream", "http://127.0.0.1:1/mcp", "--", "server"}, 2, "", "--upstream URL and a command are exclusive"},
		{[]string{"run"}, 2, "", "usage: guard run"},
		{[]string{"run", "--ui", "0.0.0.0:8931", "--", "true"}, 2, "", "reachable from other machines"},
		{[]string{"tools"}, 2, "", "guard tools COMMAND"},
		{[]string{"tools", "forget", "a", "b"}, 2, "", `unknown subcommand "forget"`},
		{[]string{"tools", "diff", "files"}, 2, "", "usage: guard tools diff SERVER TOOL"},
		{[]string{"tools", "accept", "files", "ghost", "--by", "x"}, 1, "", `no tool "ghost" on server "files"`},
		{[]string{"tools", "list"}, 0, "SERVER", ""},
		{[]string{"policy", "test", "--call", `{"server":"s","tol":"x"}`}, 2, "", "--call: want a JSON object"},
		{[]string{"policy", "test", "--call", `{"server":"s","tool":"x"}`}, 0, "decision: approve", ""},
		{[]string{"policy", "replay", "--since", "soon"}, 2, "", "want a duration"},
		{[]string{"policy", "replay", "--since", "1h"}, 0, "replayed 0 calls", ""},
		{[]string{"ui"}, 2, "", "guard ui COMMAND"},
		{[]string{"ui", "url"}, 1, "", "no guard serves the approval UI for this database"},
		{[]string{"ui", "url", "--config", public}, 0, "https://guard.example.com/login?token=", ""},
		{[]string{"ui", "url", "--config", passkey}, 1, "", "no guard serves the approval UI for this database"},
		{[]string{"ui", "enroll"}, 1, "", "ui.passkey is off"},
		{[]string{"ui", "enroll", "--config", passkey, "--name", "alice"}, 0, "a passkey for alice (it works once):\nhttp://localhost:8931/passkey/enroll?code=", ""},
		{[]string{"ui", "enroll", "--config", passkey, "--valid", "2h"}, 2, "", "between 1s and 1h"},
		{[]string{"approvals", "approve", "no-such-id", "--by", "x", "--config", passkey}, 1, "", "refused: ui.passkey is required"},
		{[]string{"tools", "reject", "files", "ghost", "--by", "x", "--config", passkey}, 1, "", "guard tools reject: refused"},
		{[]string{"approvals", "approve", "no-such-id", "--by", "x", "--config", passkeyCLI}, 1, "", "no held call with id no-such-id"},
		{[]string{"serve", "--config", badPublic}, 2, "", badPublic + `:2: public_url "https://guard.example.com/guard" has a path (/guard)`},
		{[]string{"token"}, 2, "", "usage: guard token NAME"},
		{[]string{"token", "ci"}, 0, "token_sha256:", ""},
		{[]string{"serve", "--listen", "0.0.0.0:8930"}, 2, "", "reachable from other machines"},
		{[]string{"serve", "--ui", "0.0.0.0:8931"}, 2, "", "guard serve: --ui 0.0.0.0:8931 is reachable"},
		{[]string{"serve", "--no-ui", "--listen", "127.0.0.1:0"}, 2, "", "no server to serve"},
		{[]string{"bench", "--callers", "0"}, 2, "", "go build -o guard-bench ./cmd/guard-bench"},
		{[]string{"run", "--config", bad, "--", "true"}, 2, "", bad + ":2:"},
		{[]string{"run", "--no-ui", "--upstream", "files"}, 2, "", `--upstream "files": want the http:// or https:// URL`},
		{[]string{"run", "--no-ui", "--upstream", "ftp://h/mcp"}, 2, "", "want the http:// or https:// URL"},
		{[]string{"policy", "replay", "--examples", "-1"}, 2, "", "--examples -1: want 0 or more"},
	} {
		stdout, stderr, code := run(t, dir, tc.args...)
		if code != tc.code || !strings.Contains(stdout, tc.stdout) || !strings.Contains(stderr, tc.stderr) {
			t.Errorf("guard %s: exit %d, stdout %q, stderr %q; want exit %d with %q / %q",
				strings.Join(tc.args, " "), code, stdout, stderr, tc.code, tc.stdout, tc.stderr)
		}
	}
}

func TestRunExitsWithTheServersStatus(t *testing.T) {
	dir := t.TempDir()
	_, _, code := run(t, dir, "run", "--no-ui", "--", "sh", "-c", "exit 7")
	if code != 7 {
		t.Fatalf("exit %d, want the server's 7", code)
	}
	_, _, code = run(t, dir, "run", "--no-ui", "--", "sh", "-c", "kill -TERM $$")
	if code != 128+15 {
		t.Fatalf("exit %d, want 143 for a server ended by SIGTERM", code)
	}
	_, stderr, code := run(t, dir, "run", "--no-ui", "--", filepath.Join(dir, "no-such-server"))
	if code != 1 || !strings.Contains(stderr, "could not be started") {
		t.Fatalf("exit %d, %q", code, stderr)
	}
}

func TestPolicyTestNamesLimits(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "limits.yaml")
	os.WriteFile(cfg, []byte("limits:\n  - {server: files, tool: \"write_*\", rate: 30/min, burst: 5}\n  - {server: \"*\", rate: 600/min}\n"), 0o600)
	stdout, stderr, code := run(t, dir, "policy", "test", "--config", cfg, "--call", `{"server":"files","tool":"write_file"}`)
	if code != 0 || strings.Count(stdout, "also applies") != 2 || !strings.Contains(stdout, "limits.yaml:2") || !strings.Contains(stdout, "limits.yaml:3") {
		t.Fatalf("write_file (%d): %s %s", code, stdout, stderr)
	}
	stdout, _, _ = run(t, dir, "policy", "test", "--config", cfg, "--call", `{"server":"files","tool":"read_file"}`)
	if strings.Count(stdout, "also applies") != 1 || !strings.Contains(stdout, "limits.yaml:3") {
		t.Fatalf("read_file: %s", stdout)
	}
	stdout, _, _ = run(t, dir, "policy", "test", "--config", cfg, "--call", `{"server":"files","method":"prompts/get","tool":"write_x"}`)
	if strings.Contains(stdout, "also applies") {
		t.Fatalf("a prompt counted against tool-call limits: %s", stdout)
	}
}

// policy test gives a call to a tool whose definition changed the reason
// the relay gives: what changed since the accepted definition.
func TestPolicyTestGivesTheReviewReason(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "g.db")
	db, err := store.Open(context.Background(), store.Options{Path: path, Durability: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	def := func(desc string) guard.Tool {
		d := `{"name":"wipe","description":"` + desc + `","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}`
		sum := sha256.Sum256([]byte(d))
		return guard.Tool{Server: "files", Name: "wipe", Def: []byte(d), Pin: "sha256:" + hex.EncodeToString(sum[:])}
	}
	now := time.Now()
	if err := db.Catalog().RecordTools(context.Background(), "files", []guard.Tool{def("Reads.")}, now, false); err != nil {
		t.Fatal(err)
	}
	if err := db.Catalog().RecordTools(context.Background(), "files", []guard.Tool{def("Deletes everything.")}, now.Add(time.Second), false); err != nil {
		t.Fatal(err)
	}
	db.Close()
	stdout, stderr, code := run(t, dir, "policy", "test", "--db", path, "--call", `{"server":"files","tool":"wipe"}`)
	if code != 0 || !strings.Contains(stdout, "decision: approve") || !strings.Contains(stdout, "reason:   the tool's definition changed since it was accepted: description") {
		t.Fatalf("policy test (%d): %s %s", code, stdout, stderr)
	}
}
