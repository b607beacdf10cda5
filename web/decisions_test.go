package web_test

import (
	"context"
	"database/sql"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
)

// decisionRecords returns the decision records in the chain.
func (e *env) decisionRecords() []*guard.Record {
	e.t.Helper()
	var out []*guard.Record
	if err := e.db.Reader().Records(context.Background(), func(r *guard.Record) error {
		if r.Kind == guard.KindDecision {
			out = append(out, r)
		}
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// A decision in the UI is a record in the chain, with who, why and the
// approval.
func TestAnApprovalInTheUIIsARecord(t *testing.T) {
	e := newEnv(t)
	a := e.hold("files", "delete_file", `{"path":"/tmp/x"}`)
	b := e.login("alice")
	res, _ := b.post("/approvals/"+a.ID+"/deny", url.Values{"reason": {"not this file"}})
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("deny: %d", res.StatusCode)
	}
	got := e.decisionRecords()
	if len(got) != 1 || got[0].Decision != guard.ApprovalDenied || got[0].DecidedBy != "alice" || got[0].Reason != "not this file" ||
		got[0].Approval != a.ID || got[0].CallID != a.ID || got[0].Server != "files" || got[0].Tool != "delete_file" {
		t.Fatalf("decision records: %+v", got)
	}
}

// poisonRecords makes the database refuse audit records (as a full disk
// does) and waits until the store refuses appends; the returned func
// lets it take them again.
func poisonRecords(t *testing.T, e *env, path string) func() {
	t.Helper()
	raw, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	if _, err := raw.Exec(`CREATE TRIGGER poison BEFORE INSERT ON records BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`); err != nil {
		t.Fatal(err)
	}
	// The first append is durable in the journal and fails in the
	// database; the store then refuses appends until it can commit.
	_ = e.db.Append(&guard.Record{Kind: guard.KindEvent, Method: "test/poison"})
	deadline := time.Now().Add(time.Minute)
	for e.db.Append(&guard.Record{Kind: guard.KindEvent, Method: "test/probe"}) == nil {
		if time.Now().After(deadline) {
			t.Fatal("appends were never refused")
		}
		time.Sleep(time.Millisecond)
	}
	return func() {
		if _, err := raw.Exec(`DROP TRIGGER poison`); err != nil {
			t.Fatal(err)
		}
	}
}

// A decision whose record cannot be written is refused with a clear
// error, and the held call stays pending.
func TestTheUIRefusesADecisionTheLogCannotRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.db")
	e := newEnvAt(t, path)
	a := e.hold("files", "delete_file", `{"path":"/tmp/x"}`)
	b := e.login("alice")
	poisonRecords(t, e, path)
	res, body := b.post("/approvals/"+a.ID+"/approve", url.Values{})
	if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "Not recorded") ||
		!strings.Contains(body, "the audit log could not be written") {
		t.Fatalf("approve with no audit log: %d %s", res.StatusCode, body)
	}
	if x := e.approval(a.ID); x.State != guard.ApprovalPending || x.DecidedBy != "" {
		t.Fatalf("the held call changed: %+v", x)
	}
}

// A failed scheduled verification of a tampered file is shown on every
// page, over HTTP, until one passes.
func TestAFailedVerificationIsShownOnEveryPage(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "g.db")
	db, err := store.Open(ctx, store.Options{Path: path, Durability: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if err := db.Append(&guard.Record{Kind: guard.KindRequest, Server: "files", Method: "tools/call", Tool: "read_file",
			Arguments: `{"path":"/tmp/` + string(rune('a'+i)) + `"}`, Decision: guard.DecisionAllowed}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil { // with its checkpoint
		t.Fatal(err)
	}
	// Someone with the file drops the triggers and rewrites a record.
	raw, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`DROP TRIGGER records_no_update; DROP TRIGGER records_no_delete;
		UPDATE records SET arguments = '{"path":"/etc/shadow"}' WHERE seq = 2`); err != nil {
		t.Fatal(err)
	}
	raw.Close()

	e := newEnvAt(t, path)
	b := e.login("alice")
	if _, body := b.get("/"); strings.Contains(body, `id="verify-failed"`) {
		t.Fatal("a banner before any verification")
	}
	v, err := e.db.Verifier().VerifyIfDue(ctx, time.Hour)
	if err != nil || v == nil || v.OK {
		t.Fatalf("verification of the tampered file: %+v %v", v, err)
	}
	for _, page := range []string{"/", "/activity", "/tools", "/tools/changes", "/config", "/name"} {
		res, body := b.get(page)
		if res.StatusCode != http.StatusOK || !strings.Contains(body, `id="verify-failed"`) ||
			!strings.Contains(body, "The audit log failed verification") || !strings.Contains(body, v.Problem) {
			t.Fatalf("%s: %d, no banner naming %q:\n%s", page, res.StatusCode, v.Problem, body)
		}
	}
}

// A passing verification shows no banner.
func TestAPassingVerificationShowsNoBanner(t *testing.T) {
	e := newEnv(t)
	v, err := e.db.Verifier().VerifyIfDue(context.Background(), time.Hour)
	if err != nil || v == nil || !v.OK {
		t.Fatalf("%+v %v", v, err)
	}
	if _, body := e.login("alice").get("/"); strings.Contains(body, `id="verify-failed"`) {
		t.Fatal("a banner after a passing verification")
	}
}
