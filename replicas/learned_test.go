package replicas

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/internal/pgtest"
)

// "Approve, and allow from now on" in one replica's UI teaches every
// replica the rule: each puts it in force (a config record of its own,
// all with one policy version, the one guard policy check computes), and
// the tool is then allowed on every replica without a hold. On
// PostgreSQL the rule lives in the database, not in a file.
func TestARuleLearnedOnOneReplicaAppliesOnEvery(t *testing.T) {
	c := newCluster(t, 3, "approval: {wait: 40s}\n"+exampleServer())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs := c.connect(ctx, c.url("notes"), "learner", "2025-11-25")
	got := callInBackground(ctx, cs, "delete_note", map[string]any{"title": "welcome"})
	held := c.pending("delete_note")
	c.decideInUI(c.replicas[1], held.ID, "erin", "approve-always")
	if res := <-got; res.err != nil || res.r.IsError {
		t.Fatalf("the call approved with its rule: %q %v", text(res.r), res.err)
	}
	// Every replica records that it put the learned rule in force.
	var version string
	c.waitRecords("every replica's record of the learned rule in force", func(recs []*guard.Record) bool {
		added := -1
		for i, r := range recs {
			if r.Kind == guard.KindRuleAdded && r.Approval == held.ID {
				added = i
			}
		}
		if added < 0 {
			return false
		}
		versions := map[int]string{} // pid → policy version
		for _, r := range recs[added+1:] {
			var d struct {
				PID    int    `json:"pid"`
				Policy string `json:"policy"`
			}
			if r.Kind == guard.KindConfig && r.Decision == "reloaded" && json.Unmarshal([]byte(r.Detail), &d) == nil {
				versions[d.PID] = d.Policy
			}
		}
		if len(versions) < len(c.replicas) {
			return false
		}
		version = ""
		for _, v := range versions {
			if version != "" && v != version {
				t.Fatalf("the replicas put the learned rule in force with different policy versions: %v", versions)
			}
			version = v
		}
		return true
	})
	out, code := c.guard("policy", "check")
	if code != 0 || !strings.Contains(out, "policy version: "+version) {
		t.Fatalf("guard policy check (policy version %s in force on every replica): %d %s", version, code, out)
	}
	// The tool is allowed now on every replica, reached directly.
	for _, r := range c.replicas {
		s := c.connect(ctx, r.url("notes"), "after-"+r.name, "2025-11-25")
		res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"title": "welcome"}})
		if err != nil || res.IsError || text(res) != "deleted welcome" {
			t.Fatalf("delete_note on %s after the rule was learned: %q %v", r.name, text(res), err)
		}
		s.Close()
	}
	if out, code := c.guard("audit", "query", "--tool", "delete_note", "--decision", "allowed", "--format", "jsonl"); code != 0 ||
		strings.Count(out, `"decided_by":"approved-notes-delete_note"`) != len(c.replicas) {
		t.Fatalf("the calls allowed by the learned rule, by its name: %d\n%s", code, out)
	}
	// On PostgreSQL no replica has a learned-rules file.
	if m, _ := filepath.Glob(filepath.Join(c.dir, "*", "rules.d", "approved.yaml")); pgtest.Postgres() && len(m) > 0 {
		t.Fatalf("learned rules written to files on PostgreSQL: %v", m)
	}
	cs.Close()
	c.stopAndVerify()
}
