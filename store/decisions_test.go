package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
)

// recordsOf returns the records of a kind, in the chain's order.
func recordsOf(t *testing.T, db *DB, kind string) []*guard.Record {
	t.Helper()
	var out []*guard.Record
	if err := db.Reader().Records(context.Background(), func(r *guard.Record) error {
		if r.Kind == kind {
			out = append(out, r)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// detailOf decodes a record's detail.
func detailOf(t *testing.T, r *guard.Record) map[string]any {
	t.Helper()
	var d map[string]any
	if err := json.Unmarshal([]byte(r.Detail), &d); err != nil {
		t.Fatalf("detail %q: %v", r.Detail, err)
	}
	return d
}

// heldApproval is a held call's approval whose id is not the call's (a
// call held again after its tool's review).
func heldApproval(id string) *guard.Approval {
	a := newApproval(id)
	a.CallID, a.Session, a.Client, a.Rule, a.HeldReason = "call-"+id, "sess-1", "claude-ai/0.1.0", "prod-writes", "writes to production"
	return a
}

// verifyOK checks the chain as it stands, with a checkpoint of it.
func verifyOK(t *testing.T, db *DB) {
	t.Helper()
	db.ing.caughtUp(context.Background())
	if err := db.ckpt.writeCheckpoint(); err != nil {
		t.Fatal(err)
	}
	rep, err := db.Verifier().Verify(context.Background())
	if err != nil || !rep.OK {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}

func TestAPersonsDecisionIsARecordInTheChain(t *testing.T) {
	db := openDB(t, testPath(t))
	defer db.Close()
	ctx := context.Background()
	for _, a := range []*guard.Approval{heldApproval("a1"), heldApproval("a2")} {
		if err := db.Holds().CreateApproval(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Holds().DecideApproval(ctx, "a1", true, "alice", "checked the path"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Holds().DecideApproval(ctx, "a2", false, "bob", "not on production"); err != nil {
		t.Fatal(err)
	}
	got := recordsOf(t, db, guard.KindDecision)
	if len(got) != 2 {
		t.Fatalf("%d decision records, want 2", len(got))
	}
	for i, want := range []struct{ approval, call, decision, by, reason string }{
		{"a1", "call-a1", guard.ApprovalApproved, "alice", "checked the path"},
		{"a2", "call-a2", guard.ApprovalDenied, "bob", "not on production"},
	} {
		r := got[i]
		if r.Approval != want.approval || r.CallID != want.call || r.Decision != want.decision || r.DecidedBy != want.by ||
			r.Reason != want.reason || r.Server != "files" || r.Tool != "write_file" || r.Session != "sess-1" ||
			r.Client != "claude-ai/0.1.0" || r.Pin != "sha256:p" || r.Time.IsZero() || r.Arguments != "" {
			t.Errorf("decision record %d: %+v", i, r)
		}
		if d := detailOf(t, r); d["rule"] != "prod-writes" || d["held"] == "" {
			t.Errorf("detail: %v", d)
		}
	}
	// The second decision on one approval is refused and not recorded.
	if _, err := db.Holds().DecideApproval(ctx, "a1", false, "carol", "late"); !errors.Is(err, guard.ErrAlreadyDecided) {
		t.Fatalf("a second decision: %v", err)
	}
	if n := len(recordsOf(t, db, guard.KindDecision)); n != 2 {
		t.Fatalf("%d decision records after a refused one, want 2", n)
	}
	verifyOK(t, db)
}

func TestAnExpiryAndAWithdrawalAreRecords(t *testing.T) {
	db := openDB(t, testPath(t))
	defer db.Close()
	ctx := context.Background()
	a := newApproval("a1") // stored before approvals kept the call's id
	for _, x := range []*guard.Approval{a, heldApproval("a2"), heldApproval("a3")} {
		if err := db.Holds().CreateApproval(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := db.Holds().EndApproval(ctx, "a1", guard.ApprovalExpired, "no decision within the approval timeout"); !ok || err != nil {
		t.Fatalf("expire: %v %v", ok, err)
	}
	if ok, err := db.Holds().EndApproval(ctx, "a2", guard.ApprovalWithdrawn, "the client cancelled the call"); !ok || err != nil {
		t.Fatalf("withdraw: %v %v", ok, err)
	}
	// A pending approval moved by TransitionApproval is recorded too.
	if ok, err := db.Holds().TransitionApproval(ctx, "a3", guard.ApprovalPending, guard.ApprovalExpired); !ok || err != nil {
		t.Fatalf("transition: %v %v", ok, err)
	}
	if ok, err := db.Holds().EndApproval(ctx, "a1", guard.ApprovalWithdrawn, "again"); ok || err != nil {
		t.Fatalf("ending an approval no longer pending: %v %v", ok, err)
	}
	if _, err := db.Holds().EndApproval(ctx, "a3", guard.ApprovalApproved, "x"); err == nil {
		t.Fatal("EndApproval approved an approval")
	}
	got := recordsOf(t, db, guard.KindDecision)
	if len(got) != 3 {
		t.Fatalf("%d decision records, want 3: %+v", len(got), got)
	}
	for i, want := range []struct{ approval, call, decision, reason string }{
		{"a1", "a1", guard.ApprovalExpired, "no decision within the approval timeout"},
		{"a2", "call-a2", guard.ApprovalWithdrawn, "the client cancelled the call"},
		{"a3", "call-a3", guard.ApprovalExpired, "no decision within the approval timeout"},
	} {
		r := got[i]
		if r.Approval != want.approval || r.CallID != want.call || r.Decision != want.decision || r.DecidedBy != ByGuard || r.Reason != want.reason {
			t.Errorf("record %d: %+v", i, r)
		}
		x, err := db.Holds().Approval(ctx, want.approval)
		if err != nil || x.State != want.decision || x.Arguments != "" || x.Reason != want.reason {
			t.Errorf("approval %s: %+v %v", want.approval, x, err)
		}
	}
	// A decision that comes after a withdrawal is told why.
	_, err := db.Holds().DecideApproval(ctx, "a2", true, "alice", "")
	if !errors.Is(err, guard.ErrAlreadyDecided) || !strings.Contains(err.Error(), "withdrawn at ") ||
		!strings.HasSuffix(err.Error(), ": the client cancelled the call") {
		t.Errorf("a decision after the withdrawal: %v", err)
	}
	verifyOK(t, db)
}

// Of several decisions on one approval at once, exactly one is recorded,
// and it is the one that took effect.
func TestOfDecisionsAtOnceOnlyTheOneTakenIsRecorded(t *testing.T) {
	db := openDB(t, testPath(t))
	defer db.Close()
	ctx := context.Background()
	if err := db.Holds().CreateApproval(ctx, heldApproval("a1")); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			switch i % 3 {
			case 0:
				_, _ = db.Holds().DecideApproval(ctx, "a1", true, fmt.Sprint("person", i), "")
			case 1:
				_, _ = db.Holds().DecideApproval(ctx, "a1", false, fmt.Sprint("person", i), "no")
			default:
				_, _ = db.Holds().EndApproval(ctx, "a1", guard.ApprovalWithdrawn, "the client cancelled the call")
			}
		})
	}
	wg.Wait()
	got := recordsOf(t, db, guard.KindDecision)
	a, _ := db.Holds().Approval(ctx, "a1")
	if len(got) != 1 || got[0].Decision != a.State || (a.DecidedBy != "" && got[0].DecidedBy != a.DecidedBy) {
		t.Fatalf("records %+v for approval %+v", got, a)
	}
}

// Replicas deciding at once on the same held calls, more of them than a
// replica has connections to write with: each call gets exactly one
// decision record, the one that took effect (the decisions lock is every
// replica's), and no decision waits for ever.
func TestReplicasDecidingAtOnceRecordOneDecisionEach(t *testing.T) {
	dbs := replicas(t, 2)
	ctx := context.Background()
	const calls = 12
	for i := range calls {
		if err := dbs[0].Holds().CreateApproval(ctx, heldApproval(fmt.Sprint("a", i))); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i := range calls {
		for j := range 3 {
			db := dbs[(i+j)%2]
			wg.Go(func() {
				_, err := db.Holds().DecideApproval(ctx, fmt.Sprint("a", i), j%2 == 0, fmt.Sprint("person", j), "because")
				if err != nil && !errors.Is(err, guard.ErrAlreadyDecided) {
					t.Error(err)
				}
			})
		}
	}
	wg.Wait()
	byApproval := map[string][]*guard.Record{}
	for _, r := range recordsOf(t, dbs[1], guard.KindDecision) {
		byApproval[r.Approval] = append(byApproval[r.Approval], r)
	}
	for i := range calls {
		id := fmt.Sprint("a", i)
		a, err := dbs[1].Holds().Approval(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		got := byApproval[id]
		if len(got) != 1 || got[0].Decision != a.State || got[0].DecidedBy != a.DecidedBy {
			t.Errorf("%s: records %+v for approval %+v", id, got, a)
		}
	}
}

func TestAToolReviewIsARecord(t *testing.T) {
	db := openDB(t, testPath(t))
	defer db.Close()
	ctx := context.Background()
	now := time.Now()
	def := func(desc string) guard.Tool {
		return guard.Tool{Name: "write_file", Def: []byte(`{"name":"write_file","description":"` + desc + `"}`), Pin: "sha256:" + desc}
	}
	if err := db.Catalog().RecordTools(ctx, "files", []guard.Tool{def("v1")}, now, false); err != nil {
		t.Fatal(err)
	}
	if err := db.Catalog().RecordTools(ctx, "files", []guard.Tool{def("v2")}, now, false); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Catalog().DecideTool(ctx, "files", "write_file", "sha256:v2", false, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Catalog().DecideTool(ctx, "files", "write_file", "", true, "bob"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Catalog().DecideTool(ctx, "files", "write_file", "sha256:nope", true, "bob"); !errors.Is(err, guard.ErrNotFound) {
		t.Fatalf("an unknown pin: %v", err)
	}
	// A tool that appears later is accepted by new_tools: allow, and a
	// listing with nothing new records nothing.
	other := guard.Tool{Name: "read_file", Def: []byte(`{"name":"read_file"}`), Pin: "sha256:r1"}
	for range 2 {
		if err := db.Catalog().RecordTools(ctx, "files", []guard.Tool{def("v2"), other}, now, true); err != nil {
			t.Fatal(err)
		}
	}
	got := recordsOf(t, db, guard.KindToolReview)
	if len(got) != 4 {
		t.Fatalf("%d tool_review records, want 4: %+v", len(got), got)
	}
	for i, want := range []struct{ tool, pin, decision, by, cause string }{
		{"write_file", "sha256:v1", guard.ReviewAccepted, "baseline", guard.CauseBaseline},
		{"write_file", "sha256:v2", guard.ReviewRejected, "alice", guard.CauseChanged},
		{"write_file", "sha256:v2", guard.ReviewAccepted, "bob", guard.CauseChanged},
		{"read_file", "sha256:r1", guard.ReviewAccepted, "new_tools: allow", guard.CauseNew},
	} {
		r := got[i]
		if r.Server != "files" || r.Tool != want.tool || r.Pin != want.pin || r.Decision != want.decision || r.DecidedBy != want.by || r.Reason == "" {
			t.Errorf("record %d: %+v", i, r)
		}
		if d := detailOf(t, r); d["cause"] != want.cause {
			t.Errorf("record %d detail: %v", i, d)
		}
	}
	if d := detailOf(t, got[2]); d["was"] != guard.ReviewRejected {
		t.Errorf("a person's review says how the definition stood: %v", d)
	}
	verifyOK(t, db)
}

func TestConfigLifecycleAndRuleRecords(t *testing.T) {
	db := openDB(t, testPath(t))
	defer db.Close()
	if err := db.Operations().RecordConfig(ConfigLoad{Digest: "sha256:cfg", Policy: "pv1", How: "loaded", Reason: "configuration loaded", Process: "guard run"}); err != nil {
		t.Fatal(err)
	}
	if err := db.Operations().RecordLifecycle(Lifecycle{Event: LifecycleStarted, Process: "guard serve", Version: "v1.2.3",
		Serves: []string{"http://127.0.0.1:8930/mcp/files"}, Reason: "guard serve started"}); err != nil {
		t.Fatal(err)
	}
	a := heldApproval("a1")
	if err := db.Operations().RecordRuleAdded(RuleAdded{Approval: a, By: "alice", Rule: "approved-files-write_file", Server: "files",
		Tool: "write_file", Method: "tools/call", Action: guard.ActionAllow, File: "/etc/guard/rules.d/approved.yaml"}); err != nil {
		t.Fatal(err)
	}
	c := recordsOf(t, db, guard.KindConfig)
	if len(c) != 1 || c[0].Decision != "loaded" || c[0].Reason != "configuration loaded" {
		t.Fatalf("config records: %+v", c)
	}
	if d := detailOf(t, c[0]); d["digest"] != "sha256:cfg" || d["policy"] != "pv1" || d["process"] != "guard run" || d["pid"] == nil {
		t.Errorf("config detail: %v", d)
	}
	l := recordsOf(t, db, guard.KindLifecycle)
	if len(l) != 1 || l[0].Decision != LifecycleStarted {
		t.Fatalf("lifecycle records: %+v", l)
	}
	if d := detailOf(t, l[0]); d["process"] != "guard serve" || d["version"] != "v1.2.3" || fmt.Sprint(d["serves"]) != "[http://127.0.0.1:8930/mcp/files]" {
		t.Errorf("lifecycle detail: %v", d)
	}
	r := recordsOf(t, db, guard.KindRuleAdded)
	if len(r) != 1 || r[0].Approval != "a1" || r[0].CallID != "call-a1" || r[0].DecidedBy != "alice" || r[0].Decision != guard.ActionAllow ||
		r[0].Server != "files" || r[0].Tool != "write_file" {
		t.Fatalf("rule_added records: %+v", r)
	}
	if d := detailOf(t, r[0]); d["rule"] != "approved-files-write_file" || d["file"] != "/etc/guard/rules.d/approved.yaml" {
		t.Errorf("rule_added detail: %v", d)
	}
	verifyOK(t, db)
}

// A decision whose record cannot be written is refused and changes
// nothing: the database refuses records (as a full disk does), so the
// ingester fails and appends are refused.
func TestADecisionWhoseRecordCannotBeWrittenIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.db")
	db := openDB(t, path)
	defer db.Close()
	ctx := context.Background()
	if err := db.Holds().CreateApproval(ctx, heldApproval("a1")); err != nil {
		t.Fatal(err)
	}
	if err := db.Catalog().RecordTools(ctx, "files", []guard.Tool{{Name: "t", Def: []byte(`{"name":"t"}`), Pin: "sha256:t1"}}, time.Now(), false); err != nil {
		t.Fatal(err)
	}
	if err := db.Catalog().RecordTools(ctx, "files", []guard.Tool{{Name: "t", Def: []byte(`{"name":"t","x":1}`), Pin: "sha256:t2"}}, time.Now(), false); err != nil {
		t.Fatal(err)
	}
	if err := db.Configs().NoteConfigChange(ctx, "sha256:c", "rule added"); err != nil {
		t.Fatal(err)
	}
	cure := poison(t, path)
	bad := rec(1, guard.KindRequest)
	bad.Tool = "poison"
	if err := db.Append(bad); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the ingester to fail", func() bool { return db.ing.failed() != nil })

	if _, err := db.Holds().DecideApproval(ctx, "a1", true, "alice", ""); !errors.Is(err, guard.ErrAuditWrite) {
		t.Fatalf("approve with no audit log: %v", err)
	}
	if _, err := db.Holds().EndApproval(ctx, "a1", guard.ApprovalExpired, "timeout"); !errors.Is(err, guard.ErrAuditWrite) {
		t.Fatalf("expire with no audit log: %v", err)
	}
	if _, err := db.Catalog().DecideTool(ctx, "files", "t", "sha256:t2", true, "alice"); !errors.Is(err, guard.ErrAuditWrite) {
		t.Fatalf("accept a tool with no audit log: %v", err)
	}
	if _, err := db.Configs().ApplyConfig(ctx, "sha256:c", "alice"); !errors.Is(err, guard.ErrAuditWrite) {
		t.Fatalf("apply a configuration with no audit log: %v", err)
	}
	if err := db.Catalog().RecordTools(ctx, "mail", []guard.Tool{{Name: "send", Def: []byte(`{"name":"send"}`), Pin: "sha256:s1"}}, time.Now(), false); !errors.Is(err, guard.ErrAuditWrite) {
		t.Fatalf("a baseline accepted with no audit log: %v", err)
	}
	if r, _ := db.Catalog().Review(ctx, "mail", "send", "sha256:s1"); r != nil {
		t.Fatalf("a baseline was accepted without its record: %+v", r)
	}
	if a, _ := db.Holds().Approval(ctx, "a1"); a.State != guard.ApprovalPending || a.DecidedBy != "" || a.Arguments == "" {
		t.Fatalf("the approval changed: %+v", a)
	}
	if r, _ := db.Catalog().Review(ctx, "files", "t", "sha256:t2"); r.State != guard.ReviewPending {
		t.Fatalf("the review changed: %+v", r)
	}
	if c, _ := db.Configs().PendingConfigChange(ctx); c == nil || c.Digest != "sha256:c" {
		t.Fatalf("the configuration change is no longer pending: %+v", c)
	}

	// Once the log takes records again, the same decision goes through,
	// recorded once.
	cure()
	waitFor(t, "the ingester to recover", func() bool { return db.ing.failed() == nil })
	if _, err := db.Holds().DecideApproval(ctx, "a1", true, "alice", ""); err != nil {
		t.Fatal(err)
	}
	if got := recordsOf(t, db, guard.KindDecision); len(got) != 1 || got[0].DecidedBy != "alice" {
		t.Fatalf("decision records: %+v", got)
	}
	verifyOK(t, db)
}

func TestAReadOnlyDatabaseTakesNoDecision(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.db")
	db := openDB(t, path)
	if err := db.Holds().CreateApproval(context.Background(), heldApproval("a1")); err != nil {
		t.Fatal(err)
	}
	db.Close()
	ro, err := OpenReadOnly(context.Background(), Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if _, err := ro.Holds().DecideApproval(context.Background(), "a1", true, "alice", ""); !errors.Is(err, guard.ErrAuditWrite) ||
		!strings.Contains(err.Error(), "read-only") {
		t.Fatalf("decide on a read-only database: %v", err)
	}
}

// The step that goes with an approval ("approve, and allow from now on"
// writes its rule there) runs only for an approval still pending, and an
// approval whose step fails is not recorded.
func TestAStepWithAnApprovalRunsOnlyWhileItIsPending(t *testing.T) {
	db := openDB(t, testPath(t))
	defer db.Close()
	ctx := context.Background()
	for _, a := range []*guard.Approval{heldApproval("a1"), heldApproval("a2")} {
		if err := db.Holds().CreateApproval(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	// Denied by someone else first: the step does not run.
	if _, err := db.Holds().DecideApproval(ctx, "a1", false, "bob", "no"); err != nil {
		t.Fatal(err)
	}
	ran := 0
	step := func(*guard.Approval) error { ran++; return nil }
	if _, err := db.Holds().DecideApprovalWith(ctx, "a1", true, "alice", "yes", step); !errors.Is(err, guard.ErrAlreadyDecided) || ran != 0 {
		t.Fatalf("approving a denied approval: %v, the step ran %d times", err, ran)
	}
	// A step that fails: nothing recorded, the approval still pending.
	if _, err := db.Holds().DecideApprovalWith(ctx, "a2", true, "alice", "yes", func(*guard.Approval) error { return errors.New("disk full") }); err == nil {
		t.Fatal("an approval whose step failed was recorded")
	}
	if a, err := db.Holds().Approval(ctx, "a2"); err != nil || a.State != guard.ApprovalPending {
		t.Fatalf("after a failed step: %+v %v", a, err)
	}
	if _, err := db.Holds().DecideApprovalWith(ctx, "a2", true, "alice", "yes", step); err != nil || ran != 1 {
		t.Fatalf("approving with a step: %v, the step ran %d times", err, ran)
	}
	if got := recordsOf(t, db, guard.KindDecision); len(got) != 2 {
		t.Fatalf("%d decision records, want the denial and the approval", len(got))
	}
}

// A decision's own step may read the database ("approve, and allow from
// now on" reads the rules learned so far, under the decisions lock),
// while more decisions of the same replica than it has connections wait
// for the lock: the decisions waiting must not hold the connections the
// one holding the lock needs, or none ever ends.
func TestADecisionsStepReadsWhileOthersWaitForTheLock(t *testing.T) {
	db := replicas(t, 1)[0]
	ctx := context.Background()
	const others = 12
	for i := range others + 1 {
		if err := db.Holds().CreateApproval(ctx, heldApproval(fmt.Sprint("a", i))); err != nil {
			t.Fatal(err)
		}
	}
	inStep, goOn := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := db.Holds().DecideApprovalWith(ctx, "a0", true, "alice", "", func(*guard.Approval) error {
			close(inStep)
			<-goOn
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second) // a failure bound
			defer cancel()
			_, err := db.Holds().Approvals(rctx, guard.ApprovalPending)
			return err
		})
		done <- err
	}()
	<-inStep
	var wg sync.WaitGroup
	for i := 1; i <= others; i++ {
		wg.Go(func() {
			if _, err := db.Holds().DecideApproval(ctx, fmt.Sprint("a", i), false, "bob", "no"); err != nil {
				t.Error(err)
			}
		})
	}
	for bound := time.Now().Add(10 * time.Second); db.lockWaiters.Load() < others; {
		if time.Now().After(bound) {
			t.Fatalf("%d of the %d decisions wait for the lock", db.lockWaiters.Load(), others)
		}
		runtime.Gosched()
	}
	close(goOn)
	if err := <-done; err != nil {
		t.Fatalf("the decision holding the lock: %v", err)
	}
	wg.Wait()
}
