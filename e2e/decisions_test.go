package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
)

// chain reads every record of the database once guard has stopped, and
// checks that the log verifies.
func (e *env) chain() []*guard.Record {
	e.t.Helper()
	if out, code := e.guard("audit", "verify"); code != 0 {
		e.t.Fatalf("audit verify: %d %s", code, out)
	}
	db := e.openReadOnly(context.Background())
	defer db.Close()
	var out []*guard.Record
	if err := db.Reader().Records(context.Background(), func(r *guard.Record) error { out = append(out, r); return nil }); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// find returns the records that match.
func find(recs []*guard.Record, match func(r *guard.Record) bool) []*guard.Record {
	var out []*guard.Record
	for _, r := range recs {
		if match(r) {
			out = append(out, r)
		}
	}
	return out
}

// A person approves from the command line after the client was told to
// retry: the decision is a record of the held call in the chain, the
// held call's request and outcome and the retry that uses the approval
// carry the approval's id, and guard run's start, configuration and stop
// are records too.
func TestADecisionAfterTheClientWasToldToRetryIsARecord(t *testing.T) {
	e := newEnv(t, "approval: {wait: 300ms}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs := e.connectExample(ctx)
	args := map[string]any{"task": "backup"}
	text, isErr := callText(t, cs, "run_task", args)
	const prefix = "Waiting for approval (id "
	if !isErr || !strings.HasPrefix(text, prefix) {
		t.Fatalf("first call: %q", text)
	}
	id := text[len(prefix) : len(prefix)+36]
	if out, code := e.guard("approvals", "approve", id, "--by", "carol", "--reason", "backups are fine"); code != 0 {
		t.Fatalf("approve: %d %s", code, out)
	}
	if text, isErr := callText(t, cs, "run_task", args); isErr || text != "done: backup" {
		t.Fatalf("retry after approval: %q", text)
	}
	cs.Close() // guard run stops

	recs := e.chain()
	decisions := find(recs, func(r *guard.Record) bool { return r.Kind == guard.KindDecision })
	if len(decisions) != 1 {
		t.Fatalf("decision records: %+v", decisions)
	}
	d := decisions[0]
	if d.Decision != guard.ApprovalApproved || d.DecidedBy != "carol" || d.Reason != "backups are fine" || d.Approval != id ||
		d.CallID != id || d.Server != "notes" || d.Tool != "run_task" || d.Session == "" {
		t.Fatalf("decision record: %+v", d)
	}
	held := find(recs, func(r *guard.Record) bool {
		return r.CallID == id && (r.Kind == guard.KindRequest || r.Kind == guard.KindOutcome)
	})
	if len(held) != 2 || held[0].Kind != guard.KindRequest || held[1].Kind != guard.KindOutcome ||
		held[1].Outcome != guard.OutcomeAwaitingApproval || held[0].Approval != id || held[1].Approval != id || d.Session != held[0].Session {
		t.Fatalf("the held call's records: %+v", held)
	}
	retry := find(recs, func(r *guard.Record) bool {
		return r.Tool == "run_task" && r.CallID != id && (r.Kind == guard.KindRequest || r.Kind == guard.KindOutcome)
	})
	if len(retry) != 2 || retry[0].Approval != id || retry[1].Approval != id || retry[1].Decision != guard.DecisionAllowed ||
		retry[1].DecidedBy != "carol" || retry[1].Outcome != guard.OutcomeOK {
		t.Fatalf("the retry's records: %+v", retry)
	}
	if d.Seq > retry[0].Seq {
		t.Fatalf("the decision (%d) is after the call it let through (%d)", d.Seq, retry[0].Seq)
	}

	// guard run: its configuration and its start and stop.
	configs := find(recs, func(r *guard.Record) bool { return r.Kind == guard.KindConfig })
	if len(configs) != 1 || configs[0].Decision != "loaded" {
		t.Fatalf("config records: %+v", configs)
	}
	var cd map[string]any
	if err := json.Unmarshal([]byte(configs[0].Detail), &cd); err != nil || !strings.HasPrefix(cd["digest"].(string), "sha256:") ||
		cd["process"] != "guard run" {
		t.Fatalf("config record's detail: %s", configs[0].Detail)
	}
	life := find(recs, func(r *guard.Record) bool { return r.Kind == guard.KindLifecycle })
	if len(life) != 2 || life[0].Decision != store.LifecycleStarted || life[1].Decision != store.LifecycleStopped ||
		life[0].Server != "notes" || life[1].Seq != recs[len(recs)-1].Seq {
		t.Fatalf("lifecycle records: %+v", life)
	}
	var ld map[string]any
	if err := json.Unmarshal([]byte(life[0].Detail), &ld); err != nil || ld["process"] != "guard run" || ld["version"] == "" {
		t.Fatalf("lifecycle record's detail: %s", life[0].Detail)
	}
	if configs[0].Seq > life[0].Seq {
		t.Fatal("guard run said it started before its configuration was recorded")
	}
	// The server's first listing, accepted as its baseline.
	reviews := find(recs, func(r *guard.Record) bool { return r.Kind == guard.KindToolReview && r.Tool == "run_task" })
	if len(reviews) != 1 || reviews[0].Decision != guard.ReviewAccepted || reviews[0].DecidedBy != "baseline" || reviews[0].Pin == "" {
		t.Fatalf("the baseline's tool_review records: %+v", reviews)
	}
}

// A held call that expires and one the client cancels leave decision
// records (expired, withdrawn) before the outcome that answers them.
func TestAnExpiryAndAWithdrawalAreRecords(t *testing.T) {
	e := newEnv(t, "approval: {timeout: 400ms, wait: 10s}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs := e.connectExample(ctx)
	if text, isErr := callText(t, cs, "delete_note", map[string]any{"title": "a"}); !isErr || !strings.HasPrefix(text, "Expired") {
		t.Fatalf("expiry: %q", text)
	}
	cctx, stop := context.WithCancel(ctx)
	got := goCall(func() (*mcp.CallToolResult, error) {
		return cs.CallTool(cctx, &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"title": "b"}})
	})
	a := e.pendingFor(ctx, "delete_note")
	stop() // the client cancels the held call
	<-got
	for {
		out, _ := e.guard("approvals", "list", "--state", "all", "--format", "jsonl")
		if strings.Contains(out, `"state":"withdrawn"`) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the cancelled call was not withdrawn: %s", out)
		case <-time.After(50 * time.Millisecond):
		}
	}
	cs.Close()

	recs := e.chain()
	decisions := find(recs, func(r *guard.Record) bool { return r.Kind == guard.KindDecision })
	if len(decisions) != 2 {
		t.Fatalf("decision records: %+v", decisions)
	}
	exp, wd := decisions[0], decisions[1]
	if exp.Decision != guard.ApprovalExpired || exp.DecidedBy != store.ByGuard || exp.Tool != "delete_note" || exp.Approval == "" || exp.CallID != exp.Approval {
		t.Fatalf("expiry record: %+v", exp)
	}
	if wd.Decision != guard.ApprovalWithdrawn || wd.DecidedBy != store.ByGuard || wd.Reason != "the client cancelled the call" || wd.Approval != a.ID {
		t.Fatalf("withdrawal record: %+v", wd)
	}
	out := find(recs, func(r *guard.Record) bool { return r.CallID == exp.CallID && r.Kind == guard.KindOutcome })
	if len(out) != 1 || out[0].Outcome != guard.OutcomeExpired || out[0].Approval != exp.Approval || out[0].Seq < exp.Seq {
		t.Fatalf("the expired call's outcome: %+v (decision at %d)", out, exp.Seq)
	}
}

// On 2026-07-28 the person at the client answers in the call's next
// round: that decision is a record of the call too, before the rounds
// that carry the approval.
func TestADecisionInTheClientsRoundIsARecord(t *testing.T) {
	e := newEnv(t, "approval: {in_band: auto}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "desk", Version: "4"}, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "approve"}}, nil
		},
	})
	cs := e.connect(ctx, client, "2026-07-28", nil, "notes", guardBin, "example-server")
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"title": "welcome"}})
	if err != nil || r.IsError {
		t.Fatalf("approved in the client's round: %v %v", r, err)
	}
	cs.Close()
	recs := e.chain()
	d := find(recs, func(r *guard.Record) bool { return r.Kind == guard.KindDecision })
	if len(d) != 1 || d[0].Decision != guard.ApprovalApproved || d[0].DecidedBy != "user at desk/4" || d[0].Approval == "" || d[0].CallID != d[0].Approval {
		t.Fatalf("decision records: %+v", d)
	}
	rounds := find(recs, func(r *guard.Record) bool { return r.CallID == d[0].CallID && r.Kind == guard.KindOutcome })
	if len(rounds) != 2 || rounds[0].Outcome != guard.OutcomeInputRequired || rounds[1].Outcome != guard.OutcomeOK ||
		rounds[1].Approval != d[0].Approval || rounds[1].DecidedBy != "user at desk/4" || rounds[1].Seq < d[0].Seq {
		t.Fatalf("the call's outcomes: %+v", rounds)
	}
}

// guard serve with audit.verify_every verifies the log in the background:
// a file rewritten by someone who dropped its triggers fails, and the
// failure is logged at error level naming the problem, counted in
// /metrics for an alert, and shown as a banner on the UI's pages.
func TestAScheduledVerificationFailureIsLoggedCountedAndShown(t *testing.T) {
	sqliteOnly(t, "the log is rewritten in the SQLite file")
	e := newEnv(t, "audit: {verify_every: 300ms}\nservers:\n  notes:\n    command: ["+guardBin+", example-server]\n")
	ctx := context.Background()
	db := e.open(ctx)
	for i := range 4 {
		if err := db.Append(&guard.Record{Kind: guard.KindRequest, Server: "notes", Method: "tools/call", Tool: "echo",
			Arguments: `{"text":"` + strings.Repeat("x", i) + `"}`, Decision: guard.DecisionAllowed}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := sql.Open("sqlite", "file:"+e.db+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`DROP TRIGGER records_no_update; DROP TRIGGER records_no_delete;
		UPDATE records SET arguments = '{"text":"rewritten"}' WHERE seq = 2`); err != nil {
		t.Fatal(err)
	}
	raw.Close()

	listen, ui := freePort(t), freePort(t)
	var logs lockedLog
	cmd := exec.Command(guardBin, "serve", "--config", e.cfg, "--db", e.db, "--listen", listen, "--ui", ui)
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cmd.Process.Signal(os.Interrupt)
			<-exited
		}
	}
	defer stop()
	var metrics string
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(metrics, "guard_audit_verify_failures_total 1\n") {
		if time.Now().After(deadline) {
			t.Fatalf("no failed verification in /metrics:\n%s\nlog:\n%s", metrics, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
		if resp, err := http.Get("http://" + listen + "/metrics"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			metrics = string(b)
		}
	}
	for _, want := range []string{"# TYPE guard_audit_verify_failures_total counter", "guard_audit_verify_ok 0\n", "guard_audit_verify_last_timestamp_seconds "} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, metrics)
		}
	}
	c := e.browserSession(ui)
	code, page := get(t, c, "http://"+ui+"/activity")
	if code != http.StatusOK || !strings.Contains(page, `id="verify-failed"`) || !strings.Contains(page, "The audit log failed verification") {
		t.Fatalf("the UI shows no failed verification: %d\n%s", code, page)
	}
	stop()
	if l := logs.String(); !strings.Contains(l, `level=ERROR msg="audit log verification failed" problem=`) {
		t.Fatalf("the failure was not logged at error level with its problem:\n%s", l)
	}
}

// lockedLog is a process's stderr, read while it writes.
type lockedLog struct {
	mu      sync.Mutex
	b       strings.Builder
	written chan struct{} // closed at the next write
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.written != nil {
		close(l.written)
		l.written = nil
	}
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitFor waits until the log holds every one of wants, or the process
// has written nothing more for a while, and returns the log as it is
// then. A process's stderr reaches the log through a pipe, after what
// the process did next: what it logged may arrive after its answer.
func (l *lockedLog) waitFor(quiet time.Duration, wants ...string) string {
	for {
		l.mu.Lock()
		s := l.b.String()
		all := true
		for _, w := range wants {
			all = all && strings.Contains(s, w)
		}
		if all {
			l.mu.Unlock()
			return s
		}
		if l.written == nil {
			l.written = make(chan struct{})
		}
		next := l.written
		l.mu.Unlock()
		select {
		case <-next:
		case <-time.After(quiet):
			return l.String()
		}
	}
}
