package e2e

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/guard-mcp/guard/auth/oidctest"
	"github.com/guard-mcp/guard/e2e/guardtest"
)

// The user the provider vouched for is in the records of the calls made
// with its token: the TypeScript SDK client logs in as alice, then as
// bob, through guard serve's front; guard audit query finds each one's
// calls by subject or by email and shows user, user_email and
// user_groups; the log verifies.
func TestOAuthCallsRecordTheirUser(t *testing.T) {
	p := startProvider(t, oidctest.Options{})
	e := newEnv(t, fmt.Sprintf("auth:\n  issuer: %s\n  audience: %s\n  scopes: [mcp]\n", p.Issuer, guardAudience)+
		"policy:\n  default: allow\nservers:\n  notes:\n    command: ["+guardBin+", example-server]\n")
	serve := guardtest.StartServe(t, "", guardBin, e.environ, os.Stderr, "serve", "--config", e.cfg, "--db", e.db, "--no-ui")
	url := "http://" + serve.Addr + "/mcp/notes"
	if tr := tsOAuth(t, url, tsPublic, "alice", "echo", `{"text":"from alice"}`); tr.Call == nil || tr.Call.IsError {
		t.Fatalf("alice's call: %+v", tr.Call)
	}
	if tr := tsOAuth(t, url, tsConfidential, "bob", "echo", `{"text":"from bob"}`); tr.Call == nil || tr.Call.IsError {
		t.Fatalf("bob's call: %+v", tr.Call)
	}
	for _, tc := range []struct {
		filter string
		who    oidctest.User
	}{{oidcAlice.Email, oidcAlice}, {oidcAlice.Subject, oidcAlice}, {oidcBob.Email, oidcBob}} {
		out, code := e.guard("audit", "query", "--format", "jsonl", "--tool", "echo", "--user", tc.filter)
		if code != 0 {
			t.Fatal(out)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 1 {
			t.Fatalf("--user %s: %d echo calls:\n%s", tc.filter, len(lines), out)
		}
		var c struct {
			User       string   `json:"user"`
			UserEmail  string   `json:"user_email"`
			UserGroups []string `json:"user_groups"`
			Args       string   `json:"arguments"`
		}
		if err := json.Unmarshal([]byte(lines[0]), &c); err != nil {
			t.Fatal(err)
		}
		if c.User != tc.who.Subject || c.UserEmail != tc.who.Email || !slices.Equal(c.UserGroups, tc.who.Groups) ||
			!strings.Contains(c.Args, "from "+tc.who.Subject) {
			t.Errorf("--user %s: %s", tc.filter, lines[0])
		}
	}
	// Every record of their sessions names them: the initialize and
	// tools/list of each, too.
	out, code := e.guard("audit", "query", "--format", "csv")
	if code != 0 {
		t.Fatal(out)
	}
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(rows) < 5 {
		t.Fatalf("csv: %v\n%s", err, out)
	}
	col := func(name string) int { return slices.Index(rows[0], name) }
	for _, r := range rows[1:] {
		if r[col("server")] == "notes" && r[col("user")] == "" {
			t.Errorf("a call of the notes server without a user: %q", r)
		}
	}
	// Stopped, guard serve has signed a checkpoint of every record.
	if err := serve.Stop(); err != nil {
		t.Fatal(err)
	}
	if out, code := e.guard("audit", "verify"); code != 0 {
		t.Fatalf("verify: %s", out)
	}
}
