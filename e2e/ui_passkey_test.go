package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	cdpwebauthn "github.com/chromedp/cdproto/webauthn"
	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	guard "github.com/guard-mcp/guard"
)

// With ui.passkey: required, the first passkey is enrolled through the
// link guard ui enroll prints, and a call a real MCP client made through
// guard is approved with it in Chromium (its virtual authenticator: a
// platform authenticator that verifies its user). What the UI token alone
// gives, a browser session from guard ui url and the command line's
// --by (guard approvals approve, guard tools accept), cannot approve it.
func TestPasskeyApprovalInTheBrowser(t *testing.T) {
	addr := freePort(t)
	_, port, _ := strings.Cut(addr, ":")
	origin := "http://localhost:" + port
	e := newEnv(t, "approval: {wait: 30s}\nui: {listen: '"+addr+"', passkey: required}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cs, _ := e.uiProcess(ctx, addr)
	defer cs.Close()

	out, code := e.guard("ui", "enroll", "--name", "alice")
	link := regexp.MustCompile(`http://\S+/passkey/enroll\?code=[0-9a-f]+`).FindString(out)
	if code != 0 || !strings.HasPrefix(link, origin+"/") {
		t.Fatalf("guard ui enroll: exit %d: %s", code, out)
	}
	b := chromium(t)
	c, stop := context.WithTimeout(b, 5*time.Second)
	if _, err := chromedp.Call(c, cdpwebauthn.Enable, cdpwebauthn.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(c, cdpwebauthn.AddVirtualAuthenticator, cdpwebauthn.AddVirtualAuthenticatorParams{
		Options: &cdpwebauthn.VirtualAuthenticatorOptions{Protocol: cdpwebauthn.AuthenticatorProtocolCtap2,
			Ctap2version: cdpwebauthn.Ctap2versionCtap21, Transport: cdpwebauthn.AuthenticatorTransportInternal,
			HasResidentKey: true, HasUserVerification: true, IsUserVerified: true, AutomaticPresenceSimulation: true}}); err != nil {
		t.Fatal(err)
	}
	stop()
	waitUI(t, b, link, `#passkey-enroll`)
	browse(t, b, 10*time.Second, chromedp.Click(chromedp.CSS(`#passkey-enroll`)),
		chromedp.WaitVisible(chromedp.CSS(`body[data-live="open"] #approver[data-via="passkey"]`)))

	got := goCall(func() (*mcp.CallToolResult, error) {
		return cs.CallTool(ctx, &mcp.CallToolParams{Name: "delete_note", Arguments: map[string]any{"title": "welcome"}})
	})
	a := e.pendingFor(ctx, "delete_note")

	// The UI token alone: a session from guard ui url cannot approve.
	out, _ = e.guard("ui", "url")
	login := strings.TrimSpace(out)
	if !strings.HasPrefix(login, origin+"/login?token=") {
		t.Fatalf("guard ui url with passkeys: %s", login)
	}
	jar, _ := cookiejar.New(nil)
	token := &http.Client{Jar: jar, Timeout: 5 * time.Second}
	if status, _ := get(t, token, login); status != http.StatusOK {
		t.Fatalf("the token link: HTTP %d", status)
	}
	_, page := get(t, token, origin+"/")
	csrf := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(page)
	if csrf == nil {
		t.Fatalf("no CSRF token: %s", page)
	}
	req, _ := http.NewRequest(http.MethodPost, origin+"/approvals/"+a.ID+"/approve", strings.NewReader(url.Values{"csrf": {csrf[1]}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", origin)
	res, err := token.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "needs your passkey") {
		t.Fatalf("the token's session approved: HTTP %d %s", res.StatusCode, body)
	}
	// Nor the command line with a typed name.
	out, code = e.guard("approvals", "approve", a.ID, "--by", "alice")
	if code != 1 || !strings.Contains(out, "ui.passkey is required") {
		t.Fatalf("guard approvals approve --by: exit %d: %s", code, out)
	}
	if out, code := e.guard("tools", "accept", "notes", "delete_note", "--by", "alice"); code != 1 || !strings.Contains(out, "approval.cli: true") {
		t.Fatalf("guard tools accept --by: exit %d: %s", code, out)
	}
	// Nor with a configuration of its own, where the command line may
	// decide: the call was held where decisions need a passkey, and keeps
	// that whoever asks.
	empty := filepath.Join(t.TempDir(), "empty.yaml")
	e.writeConfig(empty, "") // on PostgreSQL, only the key file every replica needs
	const held = "this call was held where decisions need the approver's passkey (ui.passkey: required), " +
		`and "alice" is a typed name, not a verified identity`
	if out, code := e.guard("approvals", "approve", a.ID, "--by", "alice", "--config", empty); code != 1 || !strings.Contains(out, held) {
		t.Fatalf("guard approvals approve --by --config empty.yaml: exit %d: %s", code, out)
	}
	elsewhere := exec.Command(guardBin, "approvals", "deny", a.ID, "--db", e.db, "--by", "alice", "--reason", "typed")
	elsewhere.Env = append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir(), "GUARD_CONFIG=")
	if e.key != "" {
		// No configuration at all on PostgreSQL would lack the key.
		elsewhere.Env = append(elsewhere.Env, "GUARD_CONFIG="+empty)
	}
	if out, err := elsewhere.CombinedOutput(); elsewhere.ProcessState.ExitCode() != 1 || !strings.Contains(string(out), held) {
		t.Fatalf("guard approvals deny --by with another XDG_CONFIG_HOME: %v: %s", err, out)
	}
	if out, code := e.guard("approvals", "show", a.ID); code != 0 || !strings.Contains(out, "decided with  the approver's passkey (ui.passkey: required), as configured when it was held") {
		t.Fatalf("guard approvals show: exit %d: %s", code, out)
	}

	// The passkey approves.
	sel := `[data-approval-id="` + a.ID + `"]`
	browse(t, b, 5*time.Second, chromedp.WaitVisible(chromedp.CSS(sel)))
	click(t, b, sel+` [data-action="approve"]`)
	if r := awaitCall(t, got); r == nil || r.IsError {
		t.Fatalf("approved with the passkey: %v", r)
	}
	db := e.open(ctx)
	defer db.Close()
	found := false
	_ = db.Reader().Records(ctx, func(r *guard.Record) error {
		if r.Kind == guard.KindDecision && r.Approval == a.ID {
			var d struct {
				Via string `json:"via"`
			}
			_ = json.Unmarshal([]byte(r.Detail), &d)
			found = r.DecidedBy == "alice" && d.Via == guard.ViaPasskey
			if !found {
				t.Errorf("the decision record: by %q, detail %s", r.DecidedBy, r.Detail)
			}
		}
		return nil
	})
	if !found {
		t.Fatal("no decision record names alice as verified with a passkey")
	}
}
