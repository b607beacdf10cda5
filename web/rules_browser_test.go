package web_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	guard "github.com/guard-mcp/guard"
)

// In Chromium, with a typed name: a call whose approval needs two
// verified people shows what it needs and why this person cannot decide,
// with no buttons to press; reviews made elsewhere appear live, and the
// call leaves the page once the second one approves it.
func TestBrowserShowsApprovalRulesLive(t *testing.T) {
	e := newEnv(t)
	p := newPage(t, e)
	p.do(10*time.Second, chromedp.Navigate(e.ts.URL+"/login?token="+testToken), chromedp.WaitVisible(chromedp.CSS(`#pending-list`)))
	p.do(10*time.Second, chromedp.Navigate(e.ts.URL+"/name"), chromedp.SendKeys(chromedp.CSS(`#name`), "carol"))
	p.submit(`[data-action="set-name"]`)
	p.open("/")

	a := &guard.Approval{Server: "db", Tool: "write_rows", Arguments: `{"table":"orders"}`, Rule: "prod-writes",
		HeldReason: "writes to production", Approvers: guard.Approvers{Groups: []string{"sre"}, Count: 2},
		Caller: guard.Identity{Subject: "agent-7", Email: "dev@example.com"}}
	p.appearsLive(a)
	c := card(a.ID)
	if got := evaluate[string](p, `document.querySelector('`+c+` [data-role="needs"]').textContent`); !strings.Contains(got, "2 approvals from members of sre") ||
		!strings.Contains(got, "a typed name cannot approve it") {
		t.Fatalf("needs: %q", got)
	}
	if got := evaluate[string](p, `document.querySelector('`+c+` [data-role="refusal"]').textContent`); !strings.Contains(got, `"carol" is a typed name, not a verified identity`) {
		t.Fatalf("refusal: %q", got)
	}
	if evaluate[bool](p, `document.querySelector('`+c+` [data-action="approve"]').checkVisibility()`) {
		t.Fatal("the approve button is visible to someone who cannot decide")
	}

	ctx := context.Background()
	if _, err := e.m.Review(ctx, a.ID, sreAlice, true, "checked", nil); err != nil {
		t.Fatal(err)
	}
	p.do(5*time.Second, chromedp.WaitVisible(chromedp.CSS(c+` [data-review="approved"]`)))
	if got := evaluate[string](p, `document.querySelector('`+c+` [data-role="waiting"]').textContent`); !strings.HasPrefix(got, "1 more approval from members of sre") {
		t.Fatalf("waiting: %q", got)
	}
	if _, err := e.m.Review(ctx, a.ID, sreBob, true, "", nil); err != nil {
		t.Fatal(err)
	}
	p.do(5*time.Second, chromedp.WaitNotPresent(chromedp.CSS(c)))
}
