package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	cdpwebauthn "github.com/chromedp/cdproto/webauthn"
	"github.com/chromedp/chromedp"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
	"github.com/guard-mcp/guard/web"
)

// newPasskeyEnv is a UI with ui.passkey: required: its relying party is
// localhost, where the browser reaches it.
func newPasskeyEnv(t *testing.T) (*env, string) {
	t.Helper()
	var origin string
	e := newEnvAt(t, t.TempDir()+"/g.db", func(o *web.Options) {
		_, port, _ := strings.Cut(o.AllowedHosts[0], ":")
		origin = "http://localhost:" + port
		o.Passkeys = &web.Passkeys{Store: o.Store.(*store.DB).Passkeys(), Origin: origin}
	})
	return e, origin
}

// authenticator gives the page a platform authenticator that holds
// passkeys and verifies its user (as a fingerprint would), through the
// DevTools WebAuthn domain.
func (p *page) authenticator() cdpwebauthn.AuthenticatorID {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	if _, err := chromedp.Call(ctx, cdpwebauthn.Enable, cdpwebauthn.EnableParams{}); err != nil {
		p.t.Fatalf("WebAuthn.enable: %v", err)
	}
	res, err := chromedp.Call(ctx, cdpwebauthn.AddVirtualAuthenticator, cdpwebauthn.AddVirtualAuthenticatorParams{
		Options: &cdpwebauthn.VirtualAuthenticatorOptions{
			Protocol:                    cdpwebauthn.AuthenticatorProtocolCtap2,
			Ctap2version:                cdpwebauthn.Ctap2versionCtap21,
			Transport:                   cdpwebauthn.AuthenticatorTransportInternal,
			HasResidentKey:              true,
			HasUserVerification:         true,
			IsUserVerified:              true,
			AutomaticPresenceSimulation: true,
		}})
	if err != nil {
		p.t.Fatalf("WebAuthn.addVirtualAuthenticator: %v", err)
	}
	return res.AuthenticatorID
}

// With passkeys required, the first one is enrolled with a code from the
// terminal, and then every decision takes the passkey: Chromium's
// authenticator approves, the decision names the passkey's person, as
// verified with it. The UI token alone (a session without a passkey)
// decides nothing, enrols nothing, and a code serves once.
func TestPasskeyApproval(t *testing.T) {
	e, origin := newPasskeyEnv(t)
	ctx := context.Background()
	a := e.hold("files", "delete_file", `{"path":"/srv/x"}`)

	// A process with the UI token: its session cannot approve, nor add a
	// passkey.
	thief := e.login("alice")
	res, body := thief.post("/approvals/"+a.ID+"/approve", nil)
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "needs your passkey") {
		t.Fatalf("a session without a passkey approved: HTTP %d %s", res.StatusCode, body)
	}
	for _, path := range []string{"/tools/changes/decide", "/config/decide"} {
		if res, body := thief.post(path, url.Values{"decision": {"accept"}}); res.StatusCode != http.StatusForbidden || !strings.Contains(body, "needs your passkey") {
			t.Fatalf("%s without a passkey: HTTP %d %s", path, res.StatusCode, body)
		}
	}
	if res, _ := thief.get("/passkey/enroll"); res.StatusCode != http.StatusForbidden {
		t.Fatalf("a session without a passkey may enrol one: HTTP %d", res.StatusCode)
	}
	if res, _ := thief.post("/passkey/enroll/begin", url.Values{}); res.StatusCode != http.StatusForbidden {
		t.Fatalf("a session without a passkey began an enrolment: HTTP %d", res.StatusCode)
	}
	if got := e.approval(a.ID); got.State != guard.ApprovalPending {
		t.Fatalf("the held call is %s", got.State)
	}

	const code = "9c4e0b7a1d2f3e4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a"
	if err := e.db.Passkeys().AddPasskeyEnrolment(ctx, code, "alice", time.Now().Add(5*time.Minute)); err != nil {
		t.Fatal(err)
	}
	p := newPage(t, e)
	first := p.authenticator()
	p.do(10*time.Second, chromedp.Navigate(origin+"/passkey/enroll?code="+code), chromedp.WaitVisible(chromedp.CSS(`#passkey-enroll`)))
	p.do(10*time.Second, chromedp.Click(chromedp.CSS(`#passkey-enroll`)),
		chromedp.WaitVisible(chromedp.CSS(`body[data-live="open"] #approver[data-via="passkey"]`)))
	if who := evaluate[string](p, `document.querySelector("#approver").textContent`); who != "alice" {
		t.Fatalf("deciding as %q after the enrolment", who)
	}
	keys, err := e.db.Passkeys().Passkeys(ctx)
	if err != nil || len(keys) != 1 || keys[0].User != "alice" {
		t.Fatalf("passkeys: %+v %v", keys, err)
	}
	// The code served once.
	if res, _ := e.client().get("/passkey/enroll?code=" + code); res.StatusCode != http.StatusForbidden {
		t.Fatalf("the code served twice: HTTP %d", res.StatusCode)
	}

	// Approve with the passkey.
	p.do(5*time.Second, chromedp.WaitVisible(chromedp.CSS(card(a.ID))))
	p.submit(card(a.ID) + ` [data-action="approve"]`)
	got := e.approval(a.ID)
	if got.State != guard.ApprovalApproved || got.DecidedBy != "alice" || len(got.Reviews) != 1 || got.Reviews[0].Via != guard.ViaPasskey {
		t.Fatalf("the approval: %+v %+v", got, got.Reviews)
	}
	keys, _ = e.db.Passkeys().Passkeys(ctx)
	if keys[0].LastUsed.IsZero() {
		t.Fatal("the passkey's use was not recorded")
	}

	// An assertion serves once, and only the decision it was made for.
	d1, d2 := e.hold("files", "delete_file", `{"path":"/srv/1"}`), e.hold("files", "delete_file", `{"path":"/srv/2"}`)
	assertFor := func(ask string, send ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
		defer cancel()
		st, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(async () => {
			const csrf = document.querySelector('input[name="csrf"]').value;
			const opts = await fetch("/passkey/challenge", {method: "POST",
				body: new URLSearchParams({csrf, path: "/approvals/`+ask+`/approve"})}).then(r => r.json());
			const cred = await navigator.credentials.get({publicKey: PublicKeyCredential.parseRequestOptionsFromJSON(opts.publicKey)});
			const assertion = JSON.stringify(cred.toJSON());
			const out = [];
			for (const id of `+"`"+strings.Join(send, ",")+"`"+`.split(",")) {
				const r = await fetch("/approvals/" + id + "/approve", {method: "POST", redirect: "manual",
					body: new URLSearchParams({csrf, assertion})});
				out.push(r.type === "opaqueredirect" ? "done" : String(r.status));
			}
			return out.join(",");
		})()`, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	if got := assertFor(d1.ID, d2.ID); got != "403" {
		t.Fatalf("an assertion for one call decided another: %s", got)
	}
	if got := assertFor(d1.ID, d1.ID, d1.ID); got != "done,403" {
		t.Fatalf("an assertion used for its call, then again: %s", got)
	}
	if got := e.approval(d2.ID); got.State != guard.ApprovalPending {
		t.Fatalf("the other call is %s", got.State)
	}
	if got := e.approval(d1.ID); got.State != guard.ApprovalApproved || got.DecidedBy != "alice" {
		t.Fatalf("the call the assertion was for: %+v", got)
	}
	p.do(10*time.Second, chromedp.Navigate(origin+"/"), chromedp.WaitVisible(chromedp.CSS(`body[data-live="open"]`)))

	// Deny another with a reason: the passkey again.
	b := e.hold("files", "delete_file", `{"path":"/srv/y"}`)
	p.do(5*time.Second, chromedp.WaitVisible(chromedp.CSS(card(b.ID))),
		chromedp.SendKeys(chromedp.CSS(card(b.ID)+` [data-role="reason"]`), "not this one"))
	p.submit(card(b.ID) + ` [data-action="deny"]`)
	if got := e.approval(b.ID); got.State != guard.ApprovalDenied || got.DecidedBy != "alice" || got.Reason != "not this one" {
		t.Fatalf("the denial: %+v", got)
	}

	// The session that used a passkey may add another, on a new
	// authenticator (the first holds one for alice already), which then
	// approves.
	if _, err := chromedp.Call(p.ctx, cdpwebauthn.RemoveVirtualAuthenticator,
		cdpwebauthn.RemoveVirtualAuthenticatorParams{AuthenticatorID: first}); err != nil {
		t.Fatal(err)
	}
	p.authenticator()
	p.do(10*time.Second, chromedp.Navigate(origin+"/passkey/enroll"), chromedp.WaitVisible(chromedp.CSS(`#passkey-enroll`)),
		chromedp.Click(chromedp.CSS(`#passkey-enroll`)), chromedp.WaitVisible(chromedp.CSS(`body[data-live="open"]`)))
	if keys, _ := e.db.Passkeys().Passkeys(ctx); len(keys) != 2 || keys[1].User != "alice" {
		t.Fatalf("the second passkey: %+v", keys)
	}
	c := e.hold("files", "delete_file", `{"path":"/srv/z"}`)
	p.do(5*time.Second, chromedp.WaitVisible(chromedp.CSS(card(c.ID))))
	p.submit(card(c.ID) + ` [data-action="approve"]`)
	if got := e.approval(c.ID); got.State != guard.ApprovalApproved || got.DecidedBy != "alice" {
		t.Fatalf("approved with the second passkey: %+v", got)
	}
	// Both enrolments are in the audit log.
	enrolled := 0
	_ = e.db.Reader().Records(ctx, func(r *guard.Record) error {
		if r.Method == store.MethodPasskeyEnrolled && r.DecidedBy == "alice" {
			enrolled++
		}
		return nil
	})
	if enrolled != 2 {
		t.Fatalf("%d enrolment records, want 2", enrolled)
	}
	if log := e.logs.String(); strings.Contains(log, code) {
		t.Fatal("the enrolment code is in the log")
	}
}
