package replicas

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	guard "github.com/guard-mcp/guard"
)

// callResult is what a call in the background came to.
type callResult struct {
	r   *mcp.CallToolResult
	err error
}

// callInBackground calls a tool on cs and returns where its result will
// come.
func callInBackground(ctx context.Context, cs *mcp.ClientSession, tool string, args map[string]any) <-chan callResult {
	got := make(chan callResult, 1)
	go func() {
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		got <- callResult{r, err}
	}()
	return got
}

// checkDecided fails unless the audit log holds the request, a person's
// decision by by, and the outcome ok of the held call a.
func (c *cluster) checkDecided(a *guard.Approval, by string) {
	c.t.Helper()
	var request, decision, outcome bool
	c.waitRecords("the request, the decision and the outcome of call "+a.ID, func(recs []*guard.Record) bool {
		request, decision, outcome = false, false, false
		for _, r := range recs {
			switch {
			case r.Kind == guard.KindRequest && r.CallID == a.ID && r.Tool == a.Tool:
				request = true
			case r.Kind == guard.KindDecision && r.Approval == a.ID && r.Decision == guard.ApprovalApproved && r.DecidedBy == by:
				decision = true
			case r.Kind == guard.KindOutcome && r.CallID == a.ID && r.Outcome == "ok":
				outcome = true
			}
		}
		return request && decision && outcome
	})
}

// A call held on one replica, its session reached through the balancer,
// is released when a person approves it from anywhere: on the command
// line against the shared database, or in another replica's UI. The held
// call then runs where it waits, its answer comes through the balancer,
// and the audit log has its request, the decision and its outcome.
func TestHoldOnOneReplicaApprovedElsewhere(t *testing.T) {
	c := newCluster(t, 2, "approval: {wait: 40s}\n"+exampleServer())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, inUI := range []bool{false, true} {
		cs := c.connect(ctx, c.url("notes"), "held", "2025-11-25")
		table, err := c.haproxy.sticky()
		if err != nil {
			t.Fatal(err)
		}
		home, elsewhere := c.replicas[0], c.replicas[1]
		if table[cs.ID()] == elsewhere.name {
			home, elsewhere = elsewhere, home
		}
		got := callInBackground(ctx, cs, "delete_note", map[string]any{"title": "welcome"})
		held := c.pending("delete_note")
		by := "the command line"
		if inUI {
			by = elsewhere.name + "'s UI"
			c.approveInUI(elsewhere, held.ID, "erin")
		} else if out, code := c.guard("approvals", "approve", held.ID, "--by", "erin"); code != 0 {
			t.Fatalf("approve: %s", out)
		}
		decided := time.Now()
		res := <-got
		t.Logf("approved on %s: the call held on %s answered %v after the approval returned", by, home.name, time.Since(decided).Round(100*time.Microsecond))
		if res.err != nil || res.r.IsError || text(res.r) != "deleted welcome" {
			t.Fatalf("the call held on %s, approved on %s: %q %v", home.name, by, text(res.r), res.err)
		}
		c.checkDecided(held, "erin")
		cs.Close()
	}
	c.stopAndVerify()
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// approveInUI logs in to replica r's UI as a person named by would, and
// approves the held call id there.
func (c *cluster) approveInUI(r *replica, id, by string) { c.decideInUI(r, id, by, "approve") }

// decideInUI is approveInUI with the UI's action: approve, deny or
// approve-always.
func (c *cluster) decideInUI(r *replica, id, by, action string) {
	c.t.Helper()
	out, code := c.guard("ui", "url")
	u, err := url.Parse(strings.TrimSpace(out))
	if code != 0 || err != nil {
		c.t.Fatalf("guard ui url: %s", out)
	}
	base := "http://" + r.ui
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	page := func(method, path string, form url.Values) (int, string) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(form.Encode()))
		if method == "POST" {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Origin", base)
		}
		resp, err := browser.Do(req)
		if err != nil {
			c.t.Fatal(err)
		}
		defer resp.Body.Close()
		var body strings.Builder
		_, _ = io.Copy(&body, resp.Body)
		return resp.StatusCode, body.String()
	}
	if status, _ := page("GET", "/login?"+u.RawQuery, nil); status != http.StatusOK {
		c.t.Fatalf("logging in to %s's UI: %d", r.name, status)
	}
	_, body := page("GET", "/name", nil)
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		c.t.Fatalf("no CSRF token on %s's name page: %s", r.name, body)
	}
	if status, _ := page("POST", "/name", url.Values{"name": {by}, "next": {"/"}, "csrf": {m[1]}}); status != http.StatusOK {
		c.t.Fatalf("giving a name in %s's UI: %d", r.name, status)
	}
	if status, body := page("POST", "/approvals/"+id+"/"+action, url.Values{"csrf": {m[1]}, "reason": {"decided in the test"}}); status != http.StatusOK {
		c.t.Fatalf("%s in %s's UI: %d %s", action, r.name, status, body)
	}
}

// 2026-07-28 has no sessions: a call held past approval.wait is answered
// "retry", and the client's retry may land on any replica. There, after
// a person approved, the identical call passes, once.
func TestRetryOfAHeldCallOnAnotherReplica(t *testing.T) {
	c := newCluster(t, 3, "approval: {wait: 1s}\n"+exampleServer())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := map[string]any{"task": "backup"}
	call := func(r *replica) *mcp.CallToolResult {
		t.Helper()
		cs := c.connect(ctx, r.url("notes"), "retrying", "2026-07-28")
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_task", Arguments: args})
		if err != nil {
			t.Fatalf("run_task on %s: %v", r.name, err)
		}
		return res
	}
	const waiting = "Waiting for approval (id "
	first := call(c.replicas[0])
	if !first.IsError || !strings.HasPrefix(text(first), waiting) {
		t.Fatalf("the held call on %s: %q", c.replicas[0].name, text(first))
	}
	id := strings.TrimPrefix(text(first), waiting)[:36]
	if out, code := c.guard("approvals", "approve", id, "--by", "carol"); code != 0 {
		t.Fatalf("approve: %s", out)
	}
	if retry := call(c.replicas[1]); retry.IsError || text(retry) != "done: backup" {
		t.Fatalf("the retry on %s after the approval: %q", c.replicas[1].name, text(retry))
	}
	// Once: the next identical call is held again, wherever it lands.
	for _, r := range []*replica{c.replicas[2], c.replicas[1]} {
		again := call(r)
		if !again.IsError || !strings.HasPrefix(text(again), waiting) || strings.Contains(text(again), id) {
			t.Fatalf("another identical call on %s: %q", r.name, text(again))
		}
	}
	c.waitRecords("the decision and the retry's outcome", func(recs []*guard.Record) bool {
		var decided, ran bool
		for _, r := range recs {
			decided = decided || r.Kind == guard.KindDecision && r.Approval == id && r.DecidedBy == "carol"
			ran = ran || r.Kind == guard.KindOutcome && r.Tool == "run_task" && r.Outcome == "ok"
		}
		return decided && ran
	})
	c.stopAndVerify()
}

// A call held on a replica that stops is not lost: a replica that is
// stopped (an interrupt) takes no new request and answers the calls it
// holds with the retry answer once approval.wait ends; a replica that
// dies answers nothing. Either way the hold stays in the database until
// it expires: approved meanwhile, the same call made again on another
// replica passes, once. (The client's new session is another session:
// its approvals are scoped to any, as a team whose replicas may stop
// configures them.)
func TestHoldsOfAReplicaThatStops(t *testing.T) {
	c := newCluster(t, 3, "approval: {wait: 5s, scope: any}\n"+exampleServer())
	survivor := c.replicas[2]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	state := func(id string) string {
		out, code := c.guard("approvals", "list", "--state", "all", "--format", "jsonl")
		if code != 0 {
			t.Fatalf("guard approvals list: %s", out)
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var a guard.Approval
			if json.Unmarshal([]byte(line), &a) == nil && a.ID == id {
				return a.State
			}
		}
		return ""
	}
	for _, r := range c.replicas[:2] {
		how := map[bool]string{true: "stopped", false: "killed"}[r == c.replicas[0]]
		cs := c.connect(ctx, r.url("notes"), "held-on-"+r.name, "2025-11-25")
		got := callInBackground(ctx, cs, "delete_note", map[string]any{"title": "welcome"})
		a := c.pending("delete_note")
		if how == "stopped" {
			if err := r.serve.Stop(); err != nil {
				t.Fatalf("stopping %s: %v", r.name, err)
			}
			if res := <-got; res.err != nil || !res.r.IsError || !strings.HasPrefix(text(res.r), "Waiting for approval (id "+a.ID+")") {
				t.Fatalf("the call held on %s, which was stopped: %q %v", r.name, text(res.r), res.err)
			}
		} else {
			if err := r.serve.Kill(); err == nil {
				t.Fatalf("%s survived SIGKILL", r.name)
			}
			if res := <-got; res.err == nil {
				t.Fatalf("the call held on %s, which was killed, was answered: %q", r.name, text(res.r))
			}
		}
		if s := state(a.ID); s != guard.ApprovalPending {
			t.Fatalf("the hold of the %s %s: %s", how, r.name, s)
		}
		if out, code := c.guard("approvals", "approve", a.ID, "--by", "erin"); code != 0 {
			t.Fatalf("approve: %s", out)
		}
		again := c.connect(ctx, survivor.url("notes"), "again", "2025-11-25")
		res, err := again.CallTool(ctx, &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"title": "welcome"}})
		if err != nil || res.IsError || text(res) != "deleted welcome" {
			t.Fatalf("the call held on the %s %s, made again on %s after the approval: %q %v", how, r.name, survivor.name, text(res), err)
		}
		if s := state(a.ID); s != guard.ApprovalUsed {
			t.Fatalf("the approval of the call held on the %s %s, after the call passed: %s", how, r.name, s)
		}
	}
	c.stopAndVerify()
}
