package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
)

// People of the approval rules' tests: the caller whose call is held, two
// members of sre, and someone outside it, each verified by the identity
// provider.
var (
	requester = guard.Identity{Subject: "agent-7", Email: "dev@example.com", Groups: []string{"dev"}}
	alice     = guard.Identity{Subject: "u-alice", Email: "alice@example.com", Groups: []string{"sre"}}
	bob       = guard.Identity{Subject: "u-bob", Email: "bob@example.com", Groups: []string{"sre", "dba"}}
	carol     = guard.Identity{Subject: "u-carol", Email: "carol@example.com", Groups: []string{"sre"}}
	mallory   = guard.Identity{Subject: "u-mallory", Email: "mallory@example.com", Groups: []string{"dev"}}
)

// ruledApproval is a held call that needs count approvals from sre.
func ruledApproval(id string, count int) *guard.Approval {
	a := heldApproval(id)
	a.Approvers = guard.Approvers{Groups: []string{"sre"}, Count: count}
	a.Caller = requester
	return a
}

func TestTwoApproversRequired(t *testing.T) {
	db := openDB(t, testPath(t))
	defer db.Close()
	ctx := context.Background()
	if err := db.Holds().CreateApproval(ctx, ruledApproval("a1", 2)); err != nil {
		t.Fatal(err)
	}
	refused := []struct {
		name string
		by   guard.Identity
		via  string
		want error
		text string
	}{
		{"the requester", requester, guard.ViaOIDC, guard.ErrNotApprover, "dev@example.com made this call"},
		{"the requester by email, from another provider", guard.Identity{Subject: "other-idp-7", Email: "DEV@example.com", Groups: []string{"sre"}},
			guard.ViaOIDC, guard.ErrNotApprover, "made this call"},
		{"someone outside the groups", mallory, guard.ViaOIDC, guard.ErrNotApprover, "mallory@example.com may not decide on this call; members of sre may"},
		{"a typed name", guard.Identity{Subject: "alice"}, "", guard.ErrNotApprover, "a typed name, not a verified identity"},
	}
	for _, tc := range refused {
		_, err := db.Holds().ReviewApproval(ctx, "a1", tc.by, tc.via, true, "", nil)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: got %v, want %v saying %q", tc.name, err, tc.want, tc.text)
		}
	}
	if got := recordsOf(t, db, guard.KindDecision); len(got) != 0 {
		t.Fatalf("a refused review was recorded: %+v", got[0])
	}

	_, before, err := db.Holds().CountApprovals(ctx, guard.ApprovalPending)
	if err != nil {
		t.Fatal(err)
	}
	a, err := db.Holds().ReviewApproval(ctx, "a1", alice, guard.ViaOIDC, true, "looks right", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Pages that watch the pending calls see a review that leaves one
	// pending.
	if n, after, err := db.Holds().CountApprovals(ctx, guard.ApprovalPending); err != nil || n != 1 || after == before {
		t.Fatalf("pending after a review: %d %q (before %q) %v", n, after, before, err)
	}
	if a.State != guard.ApprovalPending || len(a.Reviews) != 1 || a.DecidedBy != "" {
		t.Fatalf("after one approval of two: %+v", a)
	}
	if _, err := db.Holds().ReviewApproval(ctx, "a1", alice, guard.ViaPasskey, true, "", nil); !errors.Is(err, guard.ErrAlreadyReviewed) ||
		!strings.Contains(err.Error(), "counts once; it needs 1 more approval(s) from someone else") {
		t.Fatalf("the same person twice: %v", err)
	}
	a, err = db.Holds().Approval(ctx, "a1")
	if err != nil || a.State != guard.ApprovalPending || len(a.Reviews) != 1 || a.Arguments == "" {
		t.Fatalf("pending after one approval: %+v %v", a, err)
	}
	a, err = db.Holds().ReviewApproval(ctx, "a1", bob, guard.ViaPasskey, true, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.State != guard.ApprovalApproved || a.DecidedBy != "bob@example.com" || len(a.Reviews) != 2 {
		t.Fatalf("after the second approval: %+v", a)
	}
	if _, err := db.Holds().ReviewApproval(ctx, "a1", carol, guard.ViaOIDC, false, "late", nil); !errors.Is(err, guard.ErrAlreadyDecided) ||
		!strings.Contains(err.Error(), "approved by bob@example.com") {
		t.Fatalf("a review after the decision: %v", err)
	}

	// As stored: the reviews in order, with who and how verified.
	a, err = db.Holds().Approval(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if a.State != guard.ApprovalApproved || a.Approvers.Count != 2 || !slices.Equal(a.Approvers.Groups, []string{"sre"}) ||
		a.Caller.Subject != requester.Subject || len(a.Reviews) != 2 {
		t.Fatalf("stored: %+v", a)
	}
	first, second := a.Reviews[0], a.Reviews[1]
	if first.By.Subject != alice.Subject || first.Via != guard.ViaOIDC || !first.Approve || first.Reason != "looks right" ||
		second.By.Email != bob.Email || !slices.Equal(second.By.Groups, bob.Groups) || second.Via != guard.ViaPasskey || first.Time.IsZero() {
		t.Fatalf("reviews: %+v", a.Reviews)
	}
	list, err := db.Holds().Approvals(ctx, "")
	if err != nil || len(list) != 1 || len(list[0].Reviews) != 2 {
		t.Fatalf("listed: %+v %v", list, err)
	}

	// In the chain: each review, before it counted.
	recs := recordsOf(t, db, guard.KindDecision)
	if len(recs) != 2 {
		t.Fatalf("%d decision records, want one per review", len(recs))
	}
	r1, r2 := recs[0], recs[1]
	if r1.Decision != "" || r1.DecidedBy != "alice@example.com" || r1.Approval != "a1" || r1.CallID != "call-a1" || r1.Reason != "looks right" {
		t.Fatalf("first review: %+v", r1)
	}
	d1 := detailOf(t, r1)
	if d1["review"] != "approve" || d1["via"] != "oidc" || fmt.Sprint(d1["approvals"]) != "1" || fmt.Sprint(d1["needed"]) != "2" ||
		fmt.Sprint(d1["approver"].(map[string]any)["groups"]) != "[sre]" || d1["requester"] != "dev@example.com" {
		t.Fatalf("first review's detail: %v", d1)
	}
	if r2.Decision != guard.ApprovalApproved || r2.DecidedBy != "bob@example.com" {
		t.Fatalf("second review: %+v", r2)
	}
	d2 := detailOf(t, r2)
	if fmt.Sprint(d2["approved_by"]) != "[alice@example.com bob@example.com]" || fmt.Sprint(d2["approver"].(map[string]any)["groups"]) != "[sre dba]" {
		t.Fatalf("second review's detail: %v", d2)
	}
	verifyOK(t, db)
}

func TestFirstDenialEndsAnApprovalWithRules(t *testing.T) {
	db := openDB(t, testPath(t))
	defer db.Close()
	ctx := context.Background()
	if err := db.Holds().CreateApproval(ctx, ruledApproval("a1", 3)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Holds().ReviewApproval(ctx, "a1", alice, guard.ViaOIDC, true, "", nil); err != nil {
		t.Fatal(err)
	}
	// Someone outside the groups cannot end it by denying either.
	if _, err := db.Holds().ReviewApproval(ctx, "a1", mallory, guard.ViaOIDC, false, "no", nil); !errors.Is(err, guard.ErrNotApprover) {
		t.Fatalf("a denial by someone not allowed: %v", err)
	}
	a, err := db.Holds().ReviewApproval(ctx, "a1", bob, guard.ViaOIDC, false, "not during the freeze", nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.State != guard.ApprovalDenied || a.DecidedBy != "bob@example.com" || a.Reason != "not during the freeze" {
		t.Fatalf("after a denial: %+v", a)
	}
	if got := guard.DeniedByPersonText(a); got != "Denied by bob@example.com: not during the freeze" {
		t.Fatal(got)
	}
	if _, err := db.Holds().ReviewApproval(ctx, "a1", carol, guard.ViaOIDC, true, "", nil); !errors.Is(err, guard.ErrAlreadyDecided) {
		t.Fatalf("an approval after the denial: %v", err)
	}
	recs := recordsOf(t, db, guard.KindDecision)
	if len(recs) != 2 || recs[1].Decision != guard.ApprovalDenied || detailOf(t, recs[1])["review"] != "deny" {
		t.Fatalf("records: %+v", recs)
	}
	verifyOK(t, db)
}

// The plain approval (no approvers) is decided by the first person, who
// may be a typed name; only the caller whose call is held is refused.
func TestPlainApprovalStaysOneTypedName(t *testing.T) {
	db := openDB(t, testPath(t))
	defer db.Close()
	ctx := context.Background()
	a := heldApproval("a1")
	a.Caller = guard.Identity{Subject: "alice"}
	if err := db.Holds().CreateApproval(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Holds().DecideApproval(ctx, "a1", true, "alice", ""); !errors.Is(err, guard.ErrNotApprover) {
		t.Fatalf("the requester's own approval: %v", err)
	}
	got, err := db.Holds().DecideApproval(ctx, "a1", true, "bob", "fine")
	if err != nil || got.State != guard.ApprovalApproved || got.DecidedBy != "bob" {
		t.Fatalf("%+v %v", got, err)
	}
	recs := recordsOf(t, db, guard.KindDecision)
	if len(recs) != 1 || recs[0].Decision != guard.ApprovalApproved || recs[0].DecidedBy != "bob" {
		t.Fatalf("records: %+v", recs)
	}
}

// Reviews made at the same moment through two handles on one database
// (two processes on one SQLite file; two replicas on one PostgreSQL
// database) each count once, and exactly the count needed approves.
func TestConcurrentReviewsCountExactly(t *testing.T) {
	path := testPath(t)
	dbs := []*DB{openDB(t, path), openDB(t, path)}
	defer dbs[0].Close()
	defer dbs[1].Close()
	ctx := context.Background()
	people := []guard.Identity{alice, bob, carol}
	const rounds = 8
	for i := range rounds {
		id := fmt.Sprint("c", i)
		if err := dbs[0].Holds().CreateApproval(ctx, ruledApproval(id, 2)); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]error, len(people))
		start := make(chan struct{})
		for j, p := range people {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[j] = dbs[(i+j)%2].Holds().ReviewApproval(ctx, id, p, guard.ViaOIDC, true, "", nil)
			}()
		}
		close(start)
		wg.Wait()
		ok, late := 0, 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case errors.Is(err, guard.ErrAlreadyDecided):
				late++
			default:
				t.Fatalf("%s: %v", id, err)
			}
		}
		if ok != 2 || late != 1 {
			t.Fatalf("%s: %d reviews counted, %d refused as late; want 2 and 1", id, ok, late)
		}
		a, err := dbs[1].Holds().Approval(ctx, id)
		if err != nil || a.State != guard.ApprovalApproved || len(a.Reviews) != 2 || a.Reviews[0].By.Same(a.Reviews[1].By) {
			t.Fatalf("%s: %+v %v", id, a, err)
		}
	}
	var approved, partial int
	for _, db := range dbs {
		db.ing.caughtUp(ctx)
	}
	for _, r := range recordsOf(t, dbs[0], guard.KindDecision) {
		switch r.Decision {
		case guard.ApprovalApproved:
			approved++
		case "":
			partial++
		}
	}
	if approved != rounds || partial != rounds {
		t.Fatalf("records: %d approvals, %d first reviews; want %d of each", approved, partial, rounds)
	}
	verifyOK(t, dbs[0])
}

// A database of the version before approval rules is read by the
// read-only commands as it is (no caller, approvers nor reviews), and a
// writable open upgrades it.
func TestReadOnlyBeforeApprovalRules(t *testing.T) {
	sqliteOnly(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "guard.db")
	db := openDB(t, path)
	if err := db.Holds().CreateApproval(ctx, heldApproval("a1")); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := rawDB(t, path).Exec(dropUserColumns(t) + `DROP TABLE approval_reviews; ALTER TABLE approvals DROP COLUMN user_subject;
		ALTER TABLE approvals DROP COLUMN user_email; ALTER TABLE approvals DROP COLUMN user_groups;
		ALTER TABLE approvals DROP COLUMN approvers; ALTER TABLE approvals DROP COLUMN reviews;
		DROP TABLE passkeys; DROP TABLE passkey_enrolments;
		ALTER TABLE approvals DROP COLUMN scope; ALTER TABLE approvals DROP COLUMN session_ended;
		DELETE FROM schema_migrations WHERE version >= 15`); err != nil {
		t.Fatal(err)
	}
	ro, err := OpenReadOnly(ctx, Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	list, err := ro.Holds().Approvals(ctx, "")
	if err != nil || len(list) != 1 || list[0].ID != "a1" || !list[0].Approvers.IsZero() || !list[0].Caller.IsZero() {
		t.Fatalf("listed: %+v %v", list, err)
	}
	if a, err := ro.Holds().Approval(ctx, "a1"); err != nil || a.State != guard.ApprovalPending {
		t.Fatalf("one: %+v %v", a, err)
	}
	if n, _, err := ro.Holds().CountApprovals(ctx, guard.ApprovalPending); err != nil || n != 1 {
		t.Fatalf("count: %d %v", n, err)
	}
	ro.Close()
	db = openDB(t, path)
	defer db.Close()
	if _, err := db.Holds().DecideApproval(ctx, "a1", true, "alice", ""); err != nil {
		t.Fatalf("after the upgrade: %v", err)
	}
}

// A review whose record cannot be written is refused and counts for
// nothing: neither the first of two approvals, nor the one that would
// approve the call.
func TestAReviewWhoseRecordCannotBeWrittenIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.db")
	db := openDB(t, path)
	defer db.Close()
	ctx := context.Background()
	if err := db.Holds().CreateApproval(ctx, ruledApproval("a1", 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Holds().ReviewApproval(ctx, "a1", alice, guard.ViaOIDC, true, "", nil); err != nil {
		t.Fatal(err)
	}
	cure := poison(t, path)
	bad := rec(1, guard.KindRequest)
	bad.Tool = "poison"
	if err := db.Append(bad); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the ingester to fail", func() bool { return db.ing.failed() != nil })
	if _, err := db.Holds().ReviewApproval(ctx, "a1", bob, guard.ViaOIDC, true, "", nil); !errors.Is(err, guard.ErrAuditWrite) {
		t.Fatalf("a review with no audit log: %v", err)
	}
	if a, _ := db.Holds().Approval(ctx, "a1"); a.State != guard.ApprovalPending || len(a.Reviews) != 1 {
		t.Fatalf("the approval changed: %+v", a)
	}
	cure()
	waitFor(t, "the ingester to recover", func() bool { return db.ing.failed() == nil })
	if a, err := db.Holds().ReviewApproval(ctx, "a1", bob, guard.ViaOIDC, true, "", nil); err != nil || a.State != guard.ApprovalApproved {
		t.Fatalf("after recovery: %+v %v", a, err)
	}
	if got := recordsOf(t, db, guard.KindDecision); len(got) != 2 || got[1].DecidedBy != "bob@example.com" {
		t.Fatalf("decision records: %+v", got)
	}
	verifyOK(t, db)
}

// The audit report names the review that decided a held call, not the
// first of the approvals it needed.
func TestAReportNamesTheReviewThatDecided(t *testing.T) {
	db := openDB(t, testPath(t))
	defer db.Close()
	ctx := context.Background()
	start := time.Now().Add(-time.Minute)
	a := ruledApproval("a1", 2)
	if err := db.Append(&guard.Record{CallID: a.CallID, Kind: guard.KindRequest, Server: a.Server, Method: "tools/call",
		Tool: a.Tool, Decision: guard.DecisionHeld, DecidedBy: a.Rule, Approval: a.ID, Direction: guard.ClientToServer}); err != nil {
		t.Fatal(err)
	}
	if err := db.Holds().CreateApproval(ctx, a); err != nil {
		t.Fatal(err)
	}
	for _, who := range []guard.Identity{alice, bob} {
		if _, err := db.Holds().ReviewApproval(ctx, "a1", who, guard.ViaOIDC, true, "", nil); err != nil {
			t.Fatal(err)
		}
	}
	db.ing.caughtUp(ctx)
	act, err := db.Reader().Activity(ctx, start, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(act.Approvals) != 1 || act.Approvals[0].Verdict != audit.HeldApproved || act.Approvals[0].DecidedBy != "bob@example.com" {
		t.Fatalf("held calls: %+v", act.Approvals)
	}
}
