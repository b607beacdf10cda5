package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/auth/oidctest"
	"github.com/guard-mcp/guard/web"
)

// mallory's profile at the provider carries alice's address, which the
// provider did not verify, and says so as some userinfo endpoints do: the
// string "false".
var malloryAsAlice = oidctest.User{Subject: "u-mallory", Email: "alice@example.com", EmailVerified: "false", Groups: []string{"dev"}}

// In Chromium, mallory logs in through the provider: the UI shows her as
// her subject, not as alice; a call only alice may approve shows her why
// she cannot, with no buttons, and her approval, forged past the page, is
// refused and recorded nowhere; a call anyone may decide records her
// subject as who decided. alice, logged in after her, approves hers.
func TestBrowserAnUnverifiedEmailIsNoOnesIdentity(t *testing.T) {
	e, prov := newOIDCEnvWith(t, []oidctest.User{malloryAsAlice})
	p := newPage(t, e)
	prov.LoginAs("u-mallory")
	p.do(10*time.Second, chromedp.Navigate(e.ts.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`#oidc-login`)))
	p.do(10*time.Second, chromedp.Click(chromedp.CSS(`#oidc-login`)), chromedp.WaitVisible(chromedp.CSS(`body[data-live="open"] #pending-list`)))
	if who := evaluate[string](p, `document.querySelector('#approver[data-via="oidc"]').textContent`); who != "u-mallory" {
		t.Fatalf("mallory is shown as %q", who)
	}
	if !strings.Contains(e.logs.String(), "unverified_email=alice@example.com") {
		t.Errorf("the log does not say the provider's email was not taken: %s", e.logs.String())
	}

	onlyAlice := &guard.Approval{Server: "db", Tool: "drop_table", Arguments: `{"table":"orders"}`, Rule: "alice-drops",
		HeldReason: "drops a table", Approvers: guard.Approvers{Users: []string{"alice@example.com"}}}
	p.appearsLive(onlyAlice)
	c := card(onlyAlice.ID)
	if got := evaluate[string](p, `document.querySelector('`+c+` [data-role="refusal"]').textContent`); !strings.Contains(got, "u-mallory may not decide on this call; alice@example.com may") {
		t.Fatalf("refusal: %q", got)
	}
	if evaluate[bool](p, `document.querySelector('`+c+` [data-action="approve"]').checkVisibility()`) {
		t.Fatal("the approve button is visible to someone who cannot decide")
	}
	// The form the page does not offer, posted from the page anyway: the
	// page it leads to says why it was not recorded.
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	answer, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(async () => {
		const f = new URLSearchParams({csrf: document.querySelector('input[name="csrf"]').value});
		const r = await fetch("/approvals/`+onlyAlice.ID+`/approve", {method: "POST", body: f});
		return r.status + " " + await r.text();
	})()`, chromedp.EvalAwaitPromise))
	if err != nil || !strings.HasPrefix(answer, "200 ") || !strings.Contains(answer, "u-mallory may not decide on this call; alice@example.com may") {
		t.Fatalf("the forged approval: %v %.2000s", err, answer)
	}
	if got := e.approval(onlyAlice.ID); got.State != guard.ApprovalPending || len(got.Reviews) != 0 {
		t.Fatalf("mallory's approval counted: %+v %+v", got, got.Reviews)
	}
	if len(e.decisionRecords()) != 0 {
		t.Fatalf("mallory's refused approval is recorded: %+v", e.decisionRecords()[0])
	}

	anyone := e.hold("files", "delete_file", `{"path":"/srv/x"}`)
	p.open("/")
	p.submit(card(anyone.ID) + ` [data-action="approve"]`)
	got := e.approval(anyone.ID)
	if got.State != guard.ApprovalApproved || got.DecidedBy != "u-mallory" || len(got.Reviews) != 1 ||
		got.Reviews[0].By.Email != "" || got.Reviews[0].Via != guard.ViaOIDC {
		t.Fatalf("mallory's decision: %+v %+v", got, got.Reviews)
	}
	recs := e.decisionRecords()
	if len(recs) != 1 || recs[0].DecidedBy != "u-mallory" {
		t.Fatalf("the decision records: %+v", recs)
	}
	var d struct{ Approver guard.Identity }
	if err := json.Unmarshal([]byte(recs[0].Detail), &d); err != nil || d.Approver.Subject != "u-mallory" || d.Approver.Email != "" {
		t.Fatalf("the decision's approver: %s %v", recs[0].Detail, err)
	}

	alice := e.oidcLogin(prov, "u-alice")
	if res, _ := alice.post("/approvals/"+onlyAlice.ID+"/approve", nil); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("alice's approval: HTTP %d", res.StatusCode)
	}
	if got := e.approval(onlyAlice.ID); got.State != guard.ApprovalApproved || got.DecidedBy != "alice@example.com" ||
		got.Reviews[0].By.Subject != "u-alice" {
		t.Fatalf("alice's decision: %+v %+v", got, got.Reviews)
	}
}

// With ui.oidc.trust_email, an email that comes without email_verified
// (as Entra ID sends them) is the person's; one the provider says it did
// not verify is not, in any form. Without it, neither is.
func TestOIDCTrustEmailTakesOnlyAMissingClaim(t *testing.T) {
	users := []oidctest.User{
		{Subject: "u-carol", Email: "carol@example.com", EmailVerified: oidctest.Omitted{}},
		{Subject: "u-dave", Email: "dave@example.com", EmailVerified: false},
		malloryAsAlice,
	}
	for _, trust := range []bool{false, true} {
		e, prov := newOIDCEnvWith(t, users, func(o *web.Options) { o.OIDC.TrustEmail = trust })
		for _, u := range users {
			b := e.oidcLogin(prov, u.Subject)
			_, body := b.get("/")
			want := u.Subject
			if _, omitted := u.EmailVerified.(oidctest.Omitted); omitted && trust {
				want = u.Email
			}
			if !strings.Contains(body, `data-via="oidc">`+want+`<`) {
				t.Errorf("trust_email %v, %s (email_verified %#v): not shown as %s: %s", trust, u.Subject, u.EmailVerified, want, body)
			}
		}
	}
}
