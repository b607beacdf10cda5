package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
)

func newManager(t *testing.T, path string, o Options) (*Manager, *store.DB) {
	t.Helper()
	db, err := store.Open(context.Background(), store.Options{Path: path, Durability: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return New(db.Holds(), o), db
}

// waitingStore is a store that says, by closing waiting, when a wait for a
// decision (WaitApproval) has begun.
type waitingStore struct {
	store.Holds
	once    *sync.Once
	waiting chan struct{}
}

func (s waitingStore) WaitApproval(ctx context.Context, id string) (*guard.Approval, error) {
	s.once.Do(func() { close(s.waiting) })
	return s.Holds.WaitApproval(ctx, id)
}

// newWaitingManager is newManager over a waitingStore: what it returns
// is closed once Await waits for the decision, for a test to decide then.
func newWaitingManager(t *testing.T, o Options) (*Manager, *store.DB, <-chan struct{}) {
	t.Helper()
	_, db := newManager(t, filepath.Join(t.TempDir(), "g.db"), o)
	waiting := make(chan struct{})
	return New(waitingStore{Holds: db.Holds(), once: new(sync.Once), waiting: waiting}, o), db, waiting
}

func held(id string) *guard.Approval {
	return &guard.Approval{ID: id, Server: "files", Tool: "delete_file", Arguments: `{"path":"/tmp/x"}`,
		Digest: "sha256:d", Pin: "sha256:p", PolicyVersion: "v1", Rule: "default", HeldReason: "destructive"}
}

func TestHoldReusesThePendingApprovalOfAnIdenticalCall(t *testing.T) {
	m, _ := newManager(t, filepath.Join(t.TempDir(), "g.db"), Options{})
	ctx := context.Background()
	a, reused, err := m.Hold(ctx, held("a1"))
	if err != nil || reused || a.State != guard.ApprovalPending || a.ExpiresAt.Sub(a.CreatedAt) != 10*time.Minute {
		t.Fatalf("hold: %+v %v %v", a, reused, err)
	}
	b, reused, err := m.Hold(ctx, held("a2"))
	if err != nil || !reused || b.ID != "a1" {
		t.Fatalf("retry while pending: %+v %v %v", b, reused, err)
	}
}

func TestAwaitEndings(t *testing.T) {
	ctx := context.Background()
	t.Run("denied", func(t *testing.T) {
		m, _, waiting := newWaitingManager(t, Options{Wait: 5 * time.Second})
		m.Hold(ctx, held("a"))
		go func() { <-waiting; m.Decide(ctx, "a", false, "alice", "not on production") }()
		r, err := m.Await(ctx, "a", nil)
		if err != nil || r.End != guard.WaitDenied || guard.DeniedByPersonText(r.Approval) != "Denied by alice: not on production" {
			t.Fatalf("%+v %v", r, err)
		}
	})
	t.Run("approved once", func(t *testing.T) {
		m, db, waiting := newWaitingManager(t, Options{Wait: 5 * time.Second})
		m.Hold(ctx, held("a"))
		go func() { <-waiting; m.Decide(ctx, "a", true, "alice", "") }()
		r, err := m.Await(ctx, "a", nil)
		if err != nil || r.End != guard.WaitApproved {
			t.Fatalf("%+v %v", r, err)
		}
		a, _ := db.Holds().Approval(ctx, "a")
		if a.State != guard.ApprovalUsed {
			t.Fatalf("an approval let through is not used up: %s", a.State)
		}
		if _, ok, _ := m.Consume(ctx, "files", "delete_file", "sha256:d", "sha256:p", "v1", ""); ok {
			t.Fatal("an approval used by the waiting call was consumed again")
		}
	})
	t.Run("wait limit, then retry once", func(t *testing.T) {
		m, _ := newManager(t, filepath.Join(t.TempDir(), "g.db"), Options{Wait: 100 * time.Millisecond, ProgressEvery: 20 * time.Millisecond})
		m.Hold(ctx, held("a"))
		var progress []string
		r, err := m.Await(ctx, "a", func(s string) { progress = append(progress, s) })
		if err != nil || r.End != guard.WaitLimit || r.Approval.State != guard.ApprovalPending {
			t.Fatalf("%+v %v", r, err)
		}
		if len(progress) < 1 || progress[0] != "waiting for approval at the guard UI; approval id a" {
			t.Fatalf("progress while waiting: %q", progress)
		}
		if _, err := m.Decide(ctx, "a", true, "bob", ""); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := m.Consume(ctx, "files", "delete_file", "sha256:d", "sha256:other-pin", "v1", ""); ok {
			t.Fatal("consumed with another pin")
		}
		if a, ok, err := m.Consume(ctx, "files", "delete_file", "sha256:d", "sha256:p", "v1", ""); !ok || err != nil || a.DecidedBy != "bob" {
			t.Fatalf("consume: %v %v %v", a, ok, err)
		}
		if _, ok, _ := m.Consume(ctx, "files", "delete_file", "sha256:d", "sha256:p", "v1", ""); ok {
			t.Fatal("consumed twice")
		}
	})
	t.Run("progress repeats while waiting", func(t *testing.T) {
		// The decision is made once the progress said so twice: whatever
		// the machine's load, not after a while.
		m, _ := newManager(t, filepath.Join(t.TempDir(), "g.db"), Options{Wait: time.Minute, ProgressEvery: 10 * time.Millisecond})
		m.Hold(ctx, held("a"))
		var progress []string
		r, err := m.Await(ctx, "a", func(s string) {
			if progress = append(progress, s); len(progress) == 2 {
				go m.Decide(ctx, "a", false, "alice", "seen twice")
			}
		})
		if err != nil || r.End != guard.WaitDenied || len(progress) < 2 || progress[1] != progress[0] {
			t.Fatalf("%+v %v, progress %q", r, err, progress)
		}
	})
	t.Run("expired", func(t *testing.T) {
		m, _ := newManager(t, filepath.Join(t.TempDir(), "g.db"), Options{Timeout: 100 * time.Millisecond, Wait: 5 * time.Second})
		m.Hold(ctx, held("a"))
		r, err := m.Await(ctx, "a", nil)
		if err != nil || r.End != guard.WaitExpired {
			t.Fatalf("%+v %v", r, err)
		}
		if _, err := m.Decide(ctx, "a", true, "late", ""); !errors.Is(err, guard.ErrAlreadyDecided) || !strings.Contains(err.Error(), "expired") {
			t.Fatalf("deciding an expired call: %v", err)
		}
	})
	t.Run("withdrawn", func(t *testing.T) {
		m, _, waiting := newWaitingManager(t, Options{Wait: 5 * time.Second})
		m.Hold(ctx, held("a"))
		go func() { <-waiting; m.Withdraw(ctx, "a", "the client cancelled the call") }()
		r, err := m.Await(ctx, "a", nil)
		if err != nil || r.End != guard.WaitWithdrawn {
			t.Fatalf("%+v %v", r, err)
		}
		if _, err := m.Decide(ctx, "a", true, "x", ""); !errors.Is(err, guard.ErrAlreadyDecided) {
			t.Fatalf("a withdrawn call was decided: %v", err)
		}
	})
}

func TestDecideRules(t *testing.T) {
	m, _ := newManager(t, filepath.Join(t.TempDir(), "g.db"), Options{})
	ctx := context.Background()
	m.Hold(ctx, held("a"))
	if _, err := m.Decide(ctx, "a", false, "alice", " "); err == nil {
		t.Fatal("a denial without a reason was accepted")
	}
	if _, err := m.Decide(ctx, "nope", true, "alice", ""); !errors.Is(err, guard.ErrNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := m.Decide(ctx, "a", true, fmt.Sprint("p", i), ""); err == nil {
				mu.Lock()
				wins++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d decisions won", wins)
	}
}

// TestHelperDecider decides an approval from a separate process.
func TestHelperDecider(t *testing.T) {
	path := os.Getenv("GUARD_APPROVALS_CHILD_DB")
	if path == "" {
		t.Skip("run as a child process only")
	}
	m, _ := newManager(t, path, Options{})
	if _, err := m.Decide(context.Background(), os.Getenv("GUARD_APPROVALS_CHILD_ID"), true, "child", ""); err != nil {
		t.Fatal(err)
	}
	fmt.Println("DECIDED", time.Now().UnixNano())
}

// A decision another process makes ends the wait here (within about a
// poll of the store, 250 ms: logged, a figure, since a busy machine is
// slower), well before the wait's own limit.
func TestADecisionFromAnotherProcessIsSeen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.db")
	m, _ := newManager(t, path, Options{Wait: 20 * time.Second})
	ctx := context.Background()
	m.Hold(ctx, held("a"))
	got := make(chan time.Time, 1)
	go func() {
		r, err := m.Await(ctx, "a", nil)
		if err != nil || r.End != guard.WaitApproved {
			t.Errorf("%+v %v", r, err)
		}
		got <- time.Now()
	}()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperDecider$", "-test.v")
	cmd.Env = append(os.Environ(), "GUARD_APPROVALS_CHILD_DB="+path, "GUARD_APPROVALS_CHILD_ID=a")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	i := strings.Index(string(out), "DECIDED ")
	if i < 0 {
		t.Fatalf("child output: %s", out)
	}
	var ns int64
	fmt.Sscan(string(out[i+8:]), &ns)
	seen := <-got
	t.Logf("the decision was seen %v after it was made", seen.Sub(time.Unix(0, ns)))
}

func TestTexts(t *testing.T) {
	for d, want := range map[time.Duration]string{10 * time.Minute: "10m", 90 * time.Minute: "1h30m", 45 * time.Second: "45s", 48 * time.Hour: "2d", 400 * time.Millisecond: "400ms"} {
		if got := guard.HumanDuration(d); got != want {
			t.Errorf("%v: %s, want %s", d, got, want)
		}
	}
	if got := guard.ExpiredText(10 * time.Minute); got != "Expired: no one decided on this call within 10m" {
		t.Fatal(got)
	}
	const retry = "Waiting for approval (id x): ask the user to approve it, then call the tool again with the same arguments"
	for _, c := range []struct {
		a    guard.Approval
		want string
	}{
		{guard.Approval{ID: "x", Scope: guard.ScopeSession, Session: "s1"}, retry + " in this session (the approval holds for this session only: " +
			"a client that starts a new session for each request cannot use it; there the user should set approval.scope: any in guard's " +
			"configuration and approve the call held next)"},
		{guard.Approval{ID: "x", Scope: guard.ScopeAny, Session: "s1"}, retry + " (from this session or another)"},
		{guard.Approval{ID: "x", Scope: guard.ScopeSession, Session: "client:app/alice"}, retry},
	} {
		if got := guard.RetryText(&c.a); got != c.want {
			t.Errorf("scope %s, session %s:\n got %s\nwant %s", c.a.Scope, c.a.Session, got, c.want)
		}
	}
}

// Settling a review decides the calls held for that definition's review,
// and only those; one decided meanwhile is skipped.
func TestSettleReview(t *testing.T) {
	m, db := newManager(t, filepath.Join(t.TempDir(), "g.db"), Options{})
	ctx := context.Background()
	review := func(id, pin, digest string) *guard.Approval {
		a := held(id)
		a.Rule, a.Pin, a.Digest = guard.ToolReviewRule, pin, digest
		return a
	}
	for _, a := range []*guard.Approval{review("r1", "sha256:new", "d1"), review("r2", "sha256:new", "d2"), review("r3", "sha256:new", "d3"),
		review("other-pin", "sha256:old", "d4"), held("by-rule")} {
		if _, _, err := m.Hold(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	pending, err := db.Holds().Approvals(ctx, guard.ApprovalPending)
	if err != nil || len(pending) != 5 {
		t.Fatalf("pending: %d %v", len(pending), err)
	}
	if _, err := m.Decide(ctx, "r3", true, "bob", ""); err != nil { // decided meanwhile
		t.Fatal(err)
	}
	rejected := &guard.Review{Server: "files", Name: "delete_file", Pin: "sha256:new", State: guard.ReviewRejected, Cause: guard.CauseChanged}
	s, err := SettleReview(ctx, m, pending, rejected, nil, Named("alice"), "the tool's definition was rejected")
	if s.Decided != 2 || s.Kept != 0 || err != nil || s.String() != "2 held call(s) denied" {
		t.Fatalf("settled %+v (%s): %v", s, s, err)
	}
	for id, want := range map[string]string{"r1": guard.ApprovalDenied, "r2": guard.ApprovalDenied, "r3": guard.ApprovalApproved,
		"other-pin": guard.ApprovalPending, "by-rule": guard.ApprovalPending} {
		if a, _ := m.Get(ctx, id); a.State != want {
			t.Errorf("%s: %s, want %s", id, a.State, want)
		}
	}
	old := &guard.Review{Server: "files", Name: "delete_file", Pin: "sha256:old", State: guard.ReviewRejected}
	if _, err := SettleReview(ctx, m, pending, old, nil, Named(""), "x"); err == nil || !strings.Contains(err.Error(), "held call other-pin") {
		t.Fatalf("a decision that cannot be recorded: %v", err)
	}
}

// Accepting a definition releases the calls held for it to the rules,
// unless the change weakens a hint the rules read or the scanner flagged
// it: then each stays pending, for its own decision.
func TestAcceptingReleasesHeldCallsUnlessItWeakensOrWasFlagged(t *testing.T) {
	ctx := context.Background()
	weakens := []guard.Change{{Member: "description", Text: "description changed"},
		{Member: "annotations.readOnlyHint", Text: "readOnlyHint false → true", Weakens: true},
		{Member: "annotations.idempotentHint", Text: "idempotentHint false → true"},
		{Member: "annotations.destructiveHint", Text: "destructiveHint true → false", Weakens: true}}
	harmless := []guard.Change{{Member: "title", Text: "title added"}, {Member: "annotations.destructiveHint", Text: "destructiveHint false → true"}}
	flags := []guard.Flag{{Kind: "hidden_tag", Where: "description", Evidence: "<IMPORTANT>"}}
	for _, tc := range []struct {
		name    string
		changes []guard.Change
		cause   string
		flags   []guard.Flag
		release bool
		why     string
	}{
		{"a change that weakens nothing", harmless, guard.CauseChanged, nil, true, ""},
		{"a new tool", nil, guard.CauseNew, nil, true, ""},
		{"a change that weakens hints", weakens, guard.CauseChanged, nil, false, "the change weakens readOnlyHint and destructiveHint"},
		{"a flagged definition", harmless, guard.CauseFlagged, flags, false, "the scanner flagged its descriptions"},
		{"flagged, and weakening", weakens[1:2], guard.CauseFlagged, flags, false,
			"the change weakens readOnlyHint; the scanner flagged its descriptions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &guard.Review{Server: "files", Name: "delete_file", Pin: "sha256:new", State: guard.ReviewAccepted, Cause: tc.cause, Flags: tc.flags}
			release, why := ReleasesHeld(tc.changes, r)
			if release != tc.release || why != tc.why {
				t.Fatalf("ReleasesHeld: %v %q, want %v %q", release, why, tc.release, tc.why)
			}
			m, db := newManager(t, filepath.Join(t.TempDir(), "g.db"), Options{})
			for _, id := range []string{"r1", "r2"} {
				a := held(id)
				a.Rule, a.Pin, a.Digest = guard.ToolReviewRule, "sha256:new", "d-"+id
				if _, _, err := m.Hold(ctx, a); err != nil {
					t.Fatal(err)
				}
			}
			pending, _ := db.Holds().Approvals(ctx, guard.ApprovalPending)
			s, err := SettleReview(ctx, m, pending, r, tc.changes, Named("alice"), "the tool's definition was accepted")
			if err != nil {
				t.Fatal(err)
			}
			want, text := guard.ApprovalApproved, "2 held call(s) released to the rules"
			if !tc.release {
				want, text = guard.ApprovalPending, "2 held call(s) still wait: "+tc.why+"; each needs its own decision"
			}
			if s.String() != text {
				t.Errorf("settled: %q, want %q", s, text)
			}
			for _, id := range []string{"r1", "r2"} {
				if a, _ := m.Get(ctx, id); a.State != want {
					t.Errorf("%s: %s, want %s", id, a.State, want)
				}
			}
		})
	}
}

// DecideDefinition reads what changed before it accepts: the definition
// accepted before is the one the change is measured from.
func TestDecideDefinitionMeasuresTheChangeFromTheDefinitionAcceptedBefore(t *testing.T) {
	ctx := context.Background()
	m, db := newManager(t, filepath.Join(t.TempDir(), "g.db"), Options{})
	def := func(text string) guard.Tool {
		return guard.Tool{Server: "files", Name: "rm", Def: json.RawMessage(text), Pin: "sha256:" + fmt.Sprint(len(text))}
	}
	v1 := def(`{"name":"rm","annotations":{"destructiveHint":true}}`)
	v2 := def(`{"name":"rm","annotations":{"destructiveHint":false}}  `)
	if err := db.Catalog().RecordTools(ctx, "files", []guard.Tool{v1}, time.Now(), false); err != nil {
		t.Fatal(err)
	}
	if err := db.Catalog().RecordTools(ctx, "files", []guard.Tool{v2}, time.Now().Add(time.Second), false); err != nil {
		t.Fatal(err)
	}
	a := held("h")
	a.Tool, a.Rule, a.Pin = "rm", guard.ToolReviewRule, v2.Pin
	if _, _, err := m.Hold(ctx, a); err != nil {
		t.Fatal(err)
	}
	r, s, err := DecideDefinition(ctx, db.Catalog(), db.Holds(), m, "files", "rm", v2.Pin, true, Named("alice"), "")
	if err != nil || r.State != guard.ReviewAccepted || r.DecidedBy != "alice" {
		t.Fatalf("decide: %+v %v", r, err)
	}
	if s.Kept != 1 || s.String() != "1 held call(s) still wait: the change weakens destructiveHint; each needs its own decision" {
		t.Fatalf("settled: %+v", s)
	}
	got, _ := m.Get(ctx, "h")
	if got.State != guard.ApprovalPending {
		t.Fatalf("the held call: %+v", got)
	}
	if text := KeptAfterReview(got, r, func(t time.Time) string { return "T" }); text !=
		"Held for the review of its tool's definition, which was accepted at T by alice; this call needs its own decision. "+
			"Approving lets it go on to the rules, which judge it by the accepted definition." {
		t.Fatalf("the held call's note: %q", text)
	}
	if _, _, err := DecideDefinition(ctx, db.Catalog(), db.Holds(), m, "files", "nope", "sha256:x", true, Named("alice"), ""); !errors.Is(err, guard.ErrNotFound) {
		t.Fatalf("an unknown tool: %v", err)
	}
}

// An approval's scope decides which session's repeated call it lets
// through, and which session's identical call joins its pending hold; a
// session's end withdraws its session-scoped holds and marks the others.
func TestScope(t *testing.T) {
	ctx := context.Background()
	for _, scope := range []string{"", guard.ScopeSession, guard.ScopeAny} {
		t.Run("scope "+scope, func(t *testing.T) {
			m, db := newManager(t, filepath.Join(t.TempDir(), "g.db"), Options{Scope: scope})
			a := held("a")
			a.Session = "s1"
			if _, _, err := m.Hold(ctx, a); err != nil {
				t.Fatal(err)
			}
			want := scope
			if want == "" {
				want = guard.ScopeSession
			}
			if got, _ := db.Holds().Approval(ctx, "a"); got.Scope != want {
				t.Fatalf("scope %q, want %q", got.Scope, want)
			}
			other := held("b")
			other.Session = "s2"
			p, joined, err := m.Hold(ctx, other)
			if err != nil || joined != (want == guard.ScopeAny) || (joined && p.ID != "a") {
				t.Fatalf("another session's identical call: joined %v (%v, %v)", joined, p, err)
			}
			if _, err := m.Decide(ctx, "a", true, "alice", ""); err != nil {
				t.Fatal(err)
			}
			_, ok, err := m.Consume(ctx, "files", "delete_file", "sha256:d", "sha256:p", "v1", "s3")
			if err != nil || ok != (want == guard.ScopeAny) {
				t.Fatalf("consumed from another session: %v %v", ok, err)
			}
			if want == guard.ScopeSession {
				if got, ok, err := m.Consume(ctx, "files", "delete_file", "sha256:d", "sha256:p", "v1", "s1"); err != nil || !ok || got.ID != "a" {
					t.Fatalf("the session's own repeated call: %v %v %v", got, ok, err)
				}
			}
		})
	}
	t.Run("session ended", func(t *testing.T) {
		mine, db := newManager(t, filepath.Join(t.TempDir(), "g.db"), Options{})
		shared := New(db.Holds(), Options{Scope: guard.ScopeAny})
		for _, h := range []struct {
			m  *Manager
			id string
		}{{mine, "a"}, {shared, "b"}} {
			a := held(h.id)
			a.Session, a.Digest = "s1", "sha256:"+h.id
			if _, _, err := h.m.Hold(ctx, a); err != nil {
				t.Fatal(err)
			}
		}
		if err := mine.SessionEnded(ctx, "s1", guard.ClientGoneReason); err != nil {
			t.Fatal(err)
		}
		if a, _ := db.Holds().Approval(ctx, "a"); a.State != guard.ApprovalWithdrawn {
			t.Fatalf("a session-scoped hold of an ended session: %s", a.State)
		}
		if b, _ := db.Holds().Approval(ctx, "b"); b.State != guard.ApprovalPending || b.SessionEnded.IsZero() {
			t.Fatalf("a hold of any session, once its session ended: %s %v", b.State, b.SessionEnded)
		}
	})
}

// A hold scoped to any session whose client has gone says that approving
// it does not run the call; any other says nothing.
func TestClientGoneSaysApprovingDoesNotRunTheCall(t *testing.T) {
	ctx := context.Background()
	at := func(time.Time) string { return "T" }
	for _, scope := range []string{guard.ScopeSession, guard.ScopeAny} {
		m, _ := newManager(t, filepath.Join(t.TempDir(), "g.db"), Options{Scope: scope})
		a := held("a")
		a.Session = "s1"
		if _, _, err := m.Hold(ctx, a); err != nil {
			t.Fatal(err)
		}
		if got, _ := m.Get(ctx, "a"); ClientGoneText(got, at) != "" {
			t.Errorf("%s: a hold whose client waits: %q", scope, ClientGoneText(got, at))
		}
		if err := m.SessionEnded(ctx, "s1", guard.ClientGoneReason); err != nil {
			t.Fatal(err)
		}
		got, _ := m.Get(ctx, "a")
		want := ""
		if scope == guard.ScopeAny {
			want = "Its client is gone (at T). Approving does not run this call: it lets the same call through once when a client " +
				"makes it again (same server, tool and arguments, any session; approval.scope: any)."
		}
		if text := ClientGoneText(got, at); text != want {
			t.Errorf("%s: %q, want %q", scope, text, want)
		}
	}
}
