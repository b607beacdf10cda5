package e2e

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	guard "github.com/guard-mcp/guard"
)

// chromium starts Debian's Chromium, headless. The browser tests are
// skipped only when GUARD_TEST_NO_BROWSER=1; a missing Chromium fails.
func chromium(t *testing.T) context.Context {
	t.Helper()
	if os.Getenv("GUARD_TEST_NO_BROWSER") == "1" {
		t.Skip("GUARD_TEST_NO_BROWSER=1: browser tests skipped")
	}
	const path = "/usr/bin/chromium"
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the browser tests need Chromium at %s (scripts/test installs it): %v", path, err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.Headless,
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	return ctx
}

func browse(t *testing.T, ctx context.Context, d time.Duration, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := chromedp.Do(c, steps...); err != nil {
		t.Fatalf("browser: %v", err)
	}
}

// click presses a form's button and waits for the page it leads to.
func click(t *testing.T, ctx context.Context, sel string) {
	t.Helper()
	browse(t, ctx, 10*time.Second,
		chromedp.Evaluate[chromedp.Void](`document.body.dataset.old = "1"`),
		chromedp.Click(chromedp.CSS(sel)),
		chromedp.WaitVisible(chromedp.CSS(`body:not([data-old])[data-live="open"]`)))
}

// The whole path in a real browser: a call held by guard run appears in
// the UI; approving it there gives the client the server's real result;
// denying it with a reason gives the client that reason; "allow from now
// on" lets the next call through unheld, while an explicit deny still wins.
func TestBrowserDecidesHeldCalls(t *testing.T) {
	e := newEnv(t, `
approval: {wait: 30s}
policy:
  rules:
    - {name: keep-welcome, tool: delete_note, when: 'args.title == "welcome"', action: deny, reason: "the welcome note stays"}
`)
	addr := freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cs, _ := e.uiProcess(ctx, addr)
	defer cs.Close()
	b := chromium(t)
	out, _ := e.guard("ui", "url")
	login := strings.Replace(strings.TrimSpace(out), "127.0.0.1:8931", addr, 1)
	// The UI is served once guard has started it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, stop := context.WithTimeout(b, 5*time.Second)
		err := chromedp.Do(c, chromedp.Navigate(login), chromedp.WaitVisible(chromedp.CSS(`#pending-list`)))
		stop()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the UI did not come up: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	browse(t, b, 10*time.Second, chromedp.Navigate("http://"+addr+"/name"), chromedp.SendKeys(chromedp.CSS(`#name`), "alice"))
	click(t, b, `[data-action="set-name"]`)

	for _, title := range []string{"a", "b", "c", "d"} {
		if r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "write_note", Arguments: map[string]any{"title": title, "body": "x"}}); err != nil || r.IsError {
			t.Fatalf("write_note: %v %v", r, err)
		}
	}
	text := func(r *mcp.CallToolResult) string { return r.Content[0].(*mcp.TextContent).Text }
	held := func(title string) (<-chan callResult, string) {
		got := goCall(func() (*mcp.CallToolResult, error) {
			return cs.CallTool(ctx, &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"title": title}})
		})
		a := e.pendingFor(ctx, "delete_note")
		sel := `[data-approval-id="` + a.ID + `"]`
		browse(t, b, 5*time.Second, chromedp.WaitVisible(chromedp.CSS(sel)))
		return got, sel
	}

	// Approve: the client gets the server's real result.
	got, sel := held("a")
	click(t, b, sel+` [data-action="approve"]`)
	if r := awaitCall(t, got); r == nil || r.IsError || text(r) != "deleted a" {
		t.Fatalf("approved in the browser: %v", r)
	}

	// Deny with a reason: the client reads it.
	got, sel = held("b")
	browse(t, b, 5*time.Second, chromedp.SendKeys(chromedp.CSS(sel+` [data-role="reason"]`), "not today"))
	click(t, b, sel+` [data-action="deny"]`)
	if r := awaitCall(t, got); r == nil || !r.IsError || text(r) != "Denied by alice: not today" {
		t.Fatalf("denied in the browser: %v", r)
	}

	// Approve, and allow from now on: the next call passes unheld...
	got, sel = held("c")
	click(t, b, sel+` [data-action="approve-always"]`)
	if r := awaitCall(t, got); r == nil || r.IsError || text(r) != "deleted c" {
		t.Fatalf("approved always: %v", r)
	}
	deadline = time.Now().Add(10 * time.Second) // the rule file is reloaded within seconds
	for {
		c, stop := context.WithTimeout(ctx, 3*time.Second)
		r, err := cs.CallTool(c, &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"title": "d"}})
		stop()
		if err == nil && !r.IsError && text(r) == "deleted d" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after allow-always the next call is still held: %v %v", r, err)
		}
		// Held meanwhile: decide it so the loop goes on.
		if a := e.pendingApproval("delete_note"); a != nil {
			e.guard("approvals", "deny", a.ID, "--reason", "retry")
		}
		time.Sleep(500 * time.Millisecond)
	}
	// ...while the explicit deny rule still wins.
	if r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"title": "welcome"}}); err != nil ||
		!r.IsError || text(r) != `Denied by policy rule "keep-welcome": the welcome note stays` {
		t.Fatalf("an explicit deny after allow-always: %v %v", r, err)
	}
	// The audit log says that a rule was added, and by whom.
	db := e.open(ctx)
	defer db.Close()
	found := false
	_ = db.Reader().Records(ctx, func(r *guard.Record) error {
		found = found || (r.Kind == guard.KindRuleAdded && r.Tool == "delete_note" && r.DecidedBy == "alice" && r.Approval != "")
		return nil
	})
	if !found {
		t.Fatal("no rule_added record by alice")
	}
}

// guard demo tours the product: allowed, invalid, denied by a condition,
// held; it prints the UI's login address.
func TestDemo(t *testing.T) {
	addr := freePort(t)
	cmd := exec.Command(guardBin, "demo", "--wait", "1s", "--stay=false", "--ui", addr, "--dir", t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("guard demo: %v\n%s", err, out)
	}
	for _, want := range []string{
		"http://" + addr + "/login?token=",
		"→ ok: welcome",
		`→ refused: Invalid arguments for write_note: /: missing property "body"`,
		`→ refused: Denied by policy rule "no-outside-messages"`,
		"→ refused: Waiting for approval (id ",
		"the call waits 1s for you (approval.wait), then its client is told to retry; the hold stays open 10m from now (approval.timeout)",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the demo's output lacks %q:\n%s", want, out)
		}
	}
}
