package app

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
)

func TestARuleLearnedFromAnApprovalIsRecordedFirst(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "guard.db")
	db, err := store.Open(ctx, store.Options{Path: path, Durability: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rules := filepath.Join(dir, "rules.d")
	add := allowAlways(db, rules, nil)
	a := &guard.Approval{ID: "ap-1", CallID: "call-1", Session: "s1", Server: "files", Tool: "write_file"}
	if err := add(a, "alice"); err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(filepath.Join(rules, "approved.yaml"))
	if err != nil || !strings.Contains(string(file), "approved-files-write_file") {
		t.Fatalf("the rule file: %s %v", file, err)
	}
	var got []*guard.Record
	_ = db.Reader().Records(ctx, func(r *guard.Record) error {
		if r.Kind == guard.KindRuleAdded {
			got = append(got, r)
		}
		return nil
	})
	if len(got) != 1 || got[0].Approval != "ap-1" || got[0].CallID != "call-1" || got[0].DecidedBy != "alice" ||
		!strings.Contains(got[0].Detail, `"rule":"approved-files-write_file"`) || !strings.Contains(got[0].Detail, jsonText(t, filepath.Join(rules, "approved.yaml"))) {
		t.Fatalf("rule_added records: %+v", got)
	}

	// The database refuses records (as a full disk does): appends are
	// refused once its ingester fails.
	raw, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec(`CREATE TRIGGER poison BEFORE INSERT ON records BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`); err != nil {
		t.Fatal(err)
	}
	_ = db.Append(&guard.Record{Kind: guard.KindEvent, Method: "test/poison"})
	for db.Append(&guard.Record{Kind: guard.KindEvent, Method: "test/probe"}) == nil {
		time.Sleep(time.Millisecond)
	}
	b := &guard.Approval{ID: "ap-2", CallID: "call-2", Server: "files", Tool: "delete_file"}
	if err := add(b, "alice"); !errors.Is(err, guard.ErrAuditWrite) {
		t.Fatalf("a rule with no audit log: %v", err)
	}
	if after, _ := os.ReadFile(filepath.Join(rules, "approved.yaml")); !bytes.Equal(after, file) {
		t.Fatalf("the rule file changed though its record was not written:\n%s", after)
	}
	if _, err := raw.Exec(`DROP TRIGGER poison`); err != nil {
		t.Fatal(err)
	}
}

// jsonText is s as it reads inside a JSON string (a Windows path's
// backslashes doubled).
func jsonText(t *testing.T, s string) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b[1 : len(b)-1])
}
