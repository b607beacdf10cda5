package store

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
)

// The hash of a record's canonical form never changes: every chain
// already written depends on it.
func TestHashRecordIsStable(t *testing.T) {
	for i, tc := range []struct {
		r    *guard.Record
		want string
	}{
		{&guard.Record{}, "9e326d3fb7bad4524c91cf04cfcb610733011304346867603a5f1a14ce0fed9c"},
		{&guard.Record{Seq: 7, ID: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", CallID: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c",
			Kind: guard.KindRequest, Time: time.Date(2026, 7, 28, 12, 34, 56, 789e6, time.UTC), Session: "s1",
			Client: "claude/1.0", Protocol: "2025-06-18", Server: "files", Direction: "client", Method: "tools/call",
			Tool: "write_file", Arguments: `{"path":"/tmp/x","content":"a\"b\\c"}`, Pin: "sha256:ab", Decision: "allowed",
			DecidedBy: "rule-1", Reason: "ok", RequestSize: 123, PrevHash: "00ff"},
			"5fd6a433ea8d657841adacf1942d2a4bab83819e526c44beb6b86f4c6768fb72"},
		{&guard.Record{Kind: guard.KindOutcome, Outcome: "ok", Result: "\x00\x01\x1f\b\f\n\r\t\"\\ é \xff\xfe",
			ResponseSize: -5, DurationMS: 1 << 40, Detail: `{"code":-32000}`, Time: time.UnixMilli(1).UTC()},
			"d660af2e680fa8821254fd1ab198b1f8526c85bb1f405a00087c6ce27c0c839f"},
	} {
		if got := HashRecord(tc.r); got != tc.want {
			t.Errorf("record %d: hash %s, want %s", i, got, tc.want)
		}
		// The writer's form, which reuses its buffer, agrees.
		buf := []byte("left over from a longer record")
		if got, _ := audit.HashInto(buf, tc.r); got != tc.want {
			t.Errorf("record %d: hash with a used buffer %s, want %s", i, got, tc.want)
		}
	}
}

// Query's filters on who called and who decided select the calls whose
// records say so, and only those.
func TestQueryFiltersByClientSessionAndDecider(t *testing.T) {
	db := openDB(t, testPath(t))
	defer db.Close()
	type who struct{ client, session, by string }
	calls := []who{{"alice", "s1", "default"}, {"bob", "s1", "no-shell"}, {"alice", "s2", "ops@example.com"}}
	for i, w := range calls {
		req := rec(i, guard.KindRequest)
		req.Client, req.Session, req.DecidedBy = w.client, w.session, w.by
		out := rec(i, guard.KindOutcome)
		out.Client, out.Session, out.DecidedBy, out.Outcome = w.client, w.session, w.by, guard.OutcomeOK
		if err := db.Append(req, out); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		f    Filter
		want []string // call ids
	}{
		{Filter{Client: "alice"}, []string{"call-2", "call-0"}},
		{Filter{Session: "s1"}, []string{"call-1", "call-0"}},
		{Filter{DecidedBy: "no-shell"}, []string{"call-1"}},
		{Filter{Client: "alice", Session: "s1"}, []string{"call-0"}},
		{Filter{Client: "carol"}, nil},
	} {
		var got []string
		if err := db.Reader().Query(context.Background(), tc.f, func(c *Call) error { got = append(got, c.ID); return nil }); err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		want := slices.Clone(tc.want)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%+v: calls %v, want %v", tc.f, got, want)
		}
	}
}

// A record's approval reaches the database through the journal, is
// covered by its hash, and a record without one hashes as before.
func TestApprovalIsKeptAndHashed(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, testPath(t))
	defer db.Close()
	r := rec(1, guard.KindDecision)
	r.Approval = "01930000-0000-7000-8000-000000000001"
	if err := db.Append(r); err != nil {
		t.Fatal(err)
	}
	var got *guard.Record
	if err := db.Reader().Records(ctx, func(r *guard.Record) error { got = r; return nil }); err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Approval != r.Approval {
		t.Fatalf("record came back as %+v", got)
	}
	if err := db.ckpt.writeCheckpoint(); err != nil {
		t.Fatal(err)
	}
	if rep, err := db.Verifier().Verify(ctx); err != nil || !rep.OK {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	h := HashRecord(got)
	got.Approval = "01930000-0000-7000-8000-000000000002"
	if HashRecord(got) == h {
		t.Fatal("the approval is not covered by the hash")
	}
	got.Approval = ""
	if c := string(audit.AppendCanonical(nil, got)); !strings.HasPrefix(c, `{"arguments":`) || !strings.HasSuffix(c, `"v":1}`) {
		t.Fatalf("a record without the later members is not in the first form: %s", c)
	}
}

// Decisions lists, oldest first, each call's first request record since
// the given time that carries a decision (a held call's round after its
// approval does not replace it), with its caller, on either engine.
func TestDecisionsAreEachCallsFirstRequest(t *testing.T) {
	ctx := context.Background()
	db, err := testOpen(ctx, Options{Path: testPath(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	since := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := func(r *guard.Record, d time.Duration, decision, by string) *guard.Record {
		r.Time, r.Decision, r.DecidedBy = since.Add(d), decision, by
		return r
	}
	byCarol := func(r *guard.Record) *guard.Record {
		r.User, r.UserEmail, r.UserGroups = "carol", "carol@example.com", []string{"contractors"}
		return r
	}
	for _, r := range []*guard.Record{
		at(rec(0, guard.KindRequest), -time.Minute, guard.DecisionAllowed, "default"), // before since
		at(rec(1, guard.KindRequest), time.Second, guard.DecisionHeld, "prod-writes"),
		byCarol(at(rec(2, guard.KindRequest), 2*time.Second, guard.DecisionDenied, "no-shell")),
		at(rec(1, guard.KindRequest), 3*time.Second, guard.DecisionAllowed, "alice"), // call 1 again, approved
		at(rec(3, guard.KindRequest), 4*time.Second, "", ""),                         // no decision: not a call policy decided
		at(rec(2, guard.KindOutcome), 5*time.Second, guard.DecisionDenied, "no-shell"),
	} {
		if err := db.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	if err := db.Reader().Decisions(ctx, since, func(d *Decided) error {
		got = append(got, d.CallID+" "+d.Decision+" "+d.DecidedBy+" "+d.Time.Format(time.TimeOnly)+" "+
			d.Caller.Subject+" "+d.Caller.Email+" "+strings.Join(d.Caller.Groups, ","))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{"call-1 held prod-writes 12:00:01   ", "call-2 denied no-shell 12:00:02 carol carol@example.com contractors"}
	if !slices.Equal(got, want) {
		t.Fatalf("decisions %q, want %q", got, want)
	}
}
