package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
)

// guard policy replay evaluates rules on users against the user each
// call's records name: a rule that denies a group changes the calls of
// that group's members only.
func TestPolicyReplaySeesTheRecordedUser(t *testing.T) {
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "data", "guard", "guard.db")
	db, err := store.Open(context.Background(), store.Options{Path: dbPath, Durability: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-time.Minute)
	for i, who := range []guard.Identity{
		{Subject: "carol", Email: "carol@example.com", Groups: []string{"contractors"}},
		{Subject: "alice", Email: "alice@example.com", Groups: []string{"sre"}},
		{},
	} {
		r := &guard.Record{CallID: "c" + who.Subject + string(rune('0'+i)), Kind: guard.KindRequest, Time: at, Server: "db",
			Method: "tools/call", Tool: "query", Arguments: `{"sql":"SELECT 1"}`, Decision: guard.DecisionAllowed, DecidedBy: "default",
			User: who.Subject, UserEmail: who.Email, UserGroups: who.Groups}
		if err := db.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	cfg := filepath.Join(dir, "new.yaml")
	conf := "db: " + dbPath + "\npolicy:\n  default: allow\n  rules:\n" +
		"    - {name: no-contractors, tool: query, when: \"'contractors' in user.groups\", action: deny, reason: contractors}\n"
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := run(t, dir, "policy", "replay", "--since", "1h", "--config", cfg)
	if code != 0 {
		t.Fatalf("replay: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"replayed 3 calls", "same decision:      2", "allowed → denied: 1", "now rule no-contractors"} {
		if !strings.Contains(out, want) {
			t.Errorf("replay output lacks %q:\n%s", want, out)
		}
	}
}
