package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/auth/oidctest"
	"github.com/guard-mcp/guard/e2e/guardtest"
)

// uiOIDCProvider runs an identity provider with alice (sre) and bob (dev),
// and guard's UI at addr registered as a confidential client.
func uiOIDCProvider(t *testing.T, addr string) *oidctest.Provider {
	t.Helper()
	return oidctest.Start(t, oidctest.Options{
		Users: []oidctest.User{
			{Subject: "u-alice", Email: "alice@example.com", Groups: []string{"sre"}},
			{Subject: "u-bob", Email: "bob@example.com", Groups: []string{"dev"}},
		},
		Clients: []oidctest.Client{{ID: "guard-ui", Secret: "ui-client-s3cret", RedirectURIs: []string{"http://" + addr + "/login/oidc/callback"}}},
	})
}

// waitUI loads the UI's address in the browser until guard serves it and
// shows sel.
func waitUI(t *testing.T, b context.Context, url, sel string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, stop := context.WithTimeout(b, 5*time.Second)
		err := chromedp.Do(c, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(sel)))
		stop()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the UI did not come up at %s: %v", url, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// textOf reads an element's text in the browser.
func textOf(t *testing.T, b context.Context, sel string) string {
	t.Helper()
	c, cancel := context.WithTimeout(b, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(c, chromedp.TextContent(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("browser: the text of %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

// Chromium logs in to the UI through the organisation's provider, and
// approves a call a real MCP client made through guard: the client gets
// the server's result, and the audit log's decision names the provider's
// user and says the identity was verified by it. With token_login: false,
// the token link is refused, and the command line cannot decide with a
// typed name.
func TestBrowserLogsInThroughTheIdentityProvider(t *testing.T) {
	addr := freePort(t)
	p := uiOIDCProvider(t, addr)
	t.Setenv("GUARD_TEST_UI_SECRET", "ui-client-s3cret")
	e := newEnv(t, `
approval: {wait: 30s}
ui:
  oidc: {issuer: "`+p.Issuer+`", client_id: guard-ui, client_secret: "${GUARD_TEST_UI_SECRET}"}
  token_login: false
`)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cs, _ := e.uiProcess(ctx, addr)
	defer cs.Close()
	b := chromium(t)

	p.LoginAs("u-alice")
	waitUI(t, b, "http://"+addr+"/", `#oidc-login`)
	if link := textOf(t, b, `#oidc-login`); link != "Log in with "+p.Issuer {
		t.Fatalf("the login link reads %q", link)
	}
	browse(t, b, 10*time.Second, chromedp.Click(chromedp.CSS(`#oidc-login`)),
		chromedp.WaitVisible(chromedp.CSS(`body[data-live="open"] #pending-list`)))
	if who := textOf(t, b, `#approver[data-via="oidc"]`); who != "alice@example.com" {
		t.Fatalf("deciding as %q", who)
	}

	// A call held for a person, approved in the browser.
	got := goCall(func() (*mcp.CallToolResult, error) {
		return cs.CallTool(ctx, &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"title": "welcome"}})
	})
	a := e.pendingFor(ctx, "delete_note")
	sel := `[data-approval-id="` + a.ID + `"]`
	browse(t, b, 5*time.Second, chromedp.WaitVisible(chromedp.CSS(sel)))

	// The command line cannot decide it with a typed name.
	out, code := e.guard("approvals", "approve", a.ID, "--by", "alice@example.com")
	if code != 1 || !strings.Contains(out, "refused") || !strings.Contains(out, "approval.cli: true") {
		t.Fatalf("guard approvals approve --by: exit %d: %s", code, out)
	}

	click(t, b, sel+` [data-action="approve"]`)
	if r := awaitCall(t, got); r == nil || r.IsError {
		t.Fatalf("approved in the browser: %v", r)
	}

	db := e.open(ctx)
	defer db.Close()
	found := false
	_ = db.Reader().Records(ctx, func(r *guard.Record) error {
		if r.Kind == guard.KindDecision && r.Approval == a.ID {
			var d struct {
				Via      string         `json:"via"`
				Approver guard.Identity `json:"approver"`
			}
			_ = json.Unmarshal([]byte(r.Detail), &d)
			found = r.DecidedBy == "alice@example.com" && d.Via == guard.ViaOIDC && d.Approver.Subject == "u-alice"
			if !found {
				t.Errorf("the decision record: by %q, detail %s", r.DecidedBy, r.Detail)
			}
		}
		return nil
	})
	if !found {
		t.Fatal("no decision record names alice as verified by the provider")
	}

	// The token link is off.
	out, _ = e.guard("ui", "url")
	res, err := http.Get(strings.Replace(strings.TrimSpace(out), "127.0.0.1:8931", addr, 1))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("the token link with token_login: false: %s", res.Status)
	}
}

// A rule that needs two members of sre: the caller guard serve's front
// authenticated (alice, with an access token of the provider's) cannot
// approve her own call in the UI, logged in as herself through the same
// provider; bob's approval leaves it waiting for one more; carol's, in
// another Chromium session, releases it (the approval used, each review
// kept with its verified approver).
func TestTwoApproversThroughTheIdentityProvider(t *testing.T) {
	serveAddr, uiAddr := freePort(t), freePort(t)
	p := oidctest.Start(t, oidctest.Options{
		Users: []oidctest.User{
			{Subject: "u-alice", Email: "alice@example.com", Groups: []string{"sre"}},
			{Subject: "u-bob", Email: "bob@example.com", Groups: []string{"sre"}},
			{Subject: "u-carol", Email: "carol@example.com", Groups: []string{"sre"}},
		},
		Clients: []oidctest.Client{{ID: "guard-ui", Secret: "ui-client-s3cret", RedirectURIs: []string{"http://" + uiAddr + "/login/oidc/callback"}}},
	})
	audience := "http://" + serveAddr + "/mcp"
	e := newEnv(t, `
approval: {wait: 30s}
auth: {issuer: "`+p.Issuer+`", audience: "`+audience+`"}
ui:
  oidc: {issuer: "`+p.Issuer+`", client_id: guard-ui, client_secret: ui-client-s3cret}
policy:
  rules:
    - {name: two-sre, tool: delete_note, action: approve, approvers: {groups: [sre], count: 2}}
servers:
  notes:
    command: [`+guardBin+`, example-server]
`)
	guardtest.StartServe(t, serveAddr, guardBin, e.environ, os.Stderr, "serve", "--config", e.cfg, "--db", e.db, "--ui", uiAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	token := p.Mint(t, oidctest.Mint{Subject: "u-alice", ClientID: "agent", Audience: []string{audience}})
	client := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+token)
		return http.DefaultTransport.RoundTrip(r)
	})}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: audience + "/notes", HTTPClient: client}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	got := goCall(func() (*mcp.CallToolResult, error) {
		return cs.CallTool(ctx, &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"title": "welcome"}})
	})
	a := e.pendingFor(ctx, "delete_note")
	sel := `[data-approval-id="` + a.ID + `"]`

	// loginAs logs a browser in through the provider as user.
	loginAs := func(b context.Context, user, email string) {
		t.Helper()
		p.LoginAs(user)
		waitUI(t, b, "http://"+uiAddr+"/", `#oidc-login`)
		browse(t, b, 10*time.Second, chromedp.Click(chromedp.CSS(`#oidc-login`)),
			chromedp.WaitVisible(chromedp.CSS(`body[data-live="open"] #pending-list`)))
		if who := textOf(t, b, `#approver[data-via="oidc"]`); who != email {
			t.Fatalf("deciding as %q, want %s", who, email)
		}
		browse(t, b, 5*time.Second, chromedp.WaitVisible(chromedp.CSS(sel)))
	}
	first := chromium(t)
	loginAs(first, "u-alice", "alice@example.com")
	// Her own call's card says why she cannot decide, and offers no
	// buttons (the server refuses a decision of hers all the same).
	browse(t, first, 5*time.Second, chromedp.WaitVisible(chromedp.CSS(sel+` [data-role="refusal"][data-own]`)),
		chromedp.WaitNotVisible(chromedp.CSS(sel+` [data-action="approve"]`)))
	if why := textOf(t, first, sel+` [data-role="refusal"]`); !strings.Contains(why, "alice@example.com made this call, and cannot decide on it") {
		t.Fatalf("the requester's card: %q", why)
	}
	browse(t, first, 10*time.Second, chromedp.Click(chromedp.CSS(`[data-action="logout"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#oidc-login`)))
	loginAs(first, "u-bob", "bob@example.com")
	click(t, first, sel+` [data-action="approve"]`)
	if flash := textOf(t, first, `.flash`); !strings.Contains(flash, "waits for 1 more approval") {
		t.Fatalf("bob's approval: %q", flash)
	}

	// Another browser context: cookies of its own. Its tab is made by a
	// first run without a time limit, which would close it.
	second, stop := chromedp.NewContext(first, chromedp.WithNewBrowserContext())
	defer stop()
	if err := chromedp.Do(second); err != nil {
		t.Fatal(err)
	}
	loginAs(second, "u-carol", "carol@example.com")
	click(t, second, sel+` [data-action="approve"]`)
	if r := awaitCall(t, got); r == nil || r.IsError {
		t.Fatalf("approved by two: %v", r)
	}

	db := e.open(ctx)
	defer db.Close()
	x, err := db.Holds().Approval(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if x.State != guard.ApprovalUsed || x.DecidedBy != "carol@example.com" || len(x.Reviews) != 2 || x.Reviews[0].By.Email != "bob@example.com" ||
		x.Reviews[1].By.Email != "carol@example.com" || x.Reviews[0].Via != guard.ViaOIDC || x.Caller.Subject != "u-alice" {
		t.Fatalf("the approval: %+v reviews %+v", x, x.Reviews)
	}
}
