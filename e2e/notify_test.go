package e2e

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/e2e/guardtest"
	"github.com/guard-mcp/guard/notify"
)

// hook is a webhook receiver of a test: a real HTTP server that answers
// the first fail requests 503 and the others 204, and passes on every
// request it got.
type hook struct {
	srv  *httptest.Server
	mu   sync.Mutex
	fail int
	got  chan delivery
}

// delivery is one request a hook got.
type delivery struct {
	header   http.Header
	body     []byte
	at       time.Time
	answered int
}

func newHook(t *testing.T, fail int) *hook {
	h := &hook{fail: fail, got: make(chan delivery, 100)}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		status := http.StatusNoContent
		if h.fail > 0 {
			h.fail--
			status = http.StatusServiceUnavailable
		}
		h.mu.Unlock()
		h.got <- delivery{header: r.Header.Clone(), body: body, at: time.Now(), answered: status}
		w.WriteHeader(status)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// next waits for the hook's next request.
func (h *hook) next(t *testing.T, what string) delivery {
	t.Helper()
	select {
	case d := <-h.got:
		return d
	case <-time.After(30 * time.Second):
		t.Fatalf("%s never came", what)
		return delivery{}
	}
}

// signedBy checks a json announcement as a receiver would: the
// Guard-Signature header is "v1=" and the hex HMAC-SHA256, keyed with the
// shared secret, of the Guard-Timestamp header, a dot and the body; and
// the timestamp is within five minutes of now (an older one is a replay).
func signedBy(secret string, d delivery, now time.Time) bool {
	ts := d.header.Get("Guard-Timestamp")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || now.Sub(time.Unix(sec, 0)).Abs() > 5*time.Minute {
		return false
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "." + string(d.body)))
	want := "v1=" + hex.EncodeToString(mac.Sum(nil))
	return hmac.Equal([]byte(want), []byte(d.header.Get("Guard-Signature")))
}

// A call that policy holds through guard serve is announced to every
// receiver of notify: a json receiver gets a body it can verify with the
// shared secret (and the same announcement again on each retry after it
// failed twice), a Slack receiver gets Slack's blocks with a button to
// the approval's card at public_url; neither carries the UI's token or a
// secret of the arguments. The call is held before and regardless of any
// delivery; a receiver no one answers at shows in /metrics and on the
// UI's Pending page.
func TestAHoldIsAnnouncedToWebhooks(t *testing.T) {
	const secret = "hook-secret-4b1d"
	signed, slack := newHook(t, 2), newHook(t, 0)
	dead := "http://" + freePort(t) + "/hook"
	e := newEnv(t, "approval: {wait: 60s}\n"+
		"public_url: https://guard.example.com\n"+
		"servers:\n  notes:\n    command: ["+guardBin+", example-server]\n"+
		"notify:\n"+
		"  - {webhook: "+signed.srv.URL+"/guard, secret: \"${HOOK_SECRET}\"}\n"+
		"  - {webhook: "+slack.srv.URL+"/services/T000/B000/XXXX, format: slack}\n"+
		"  - {webhook: "+dead+", secret: "+secret+"}\n")
	e.environ = []string{"HOOK_SECRET=" + secret}
	ui := freePort(t)
	var logs lockedLog
	s := guardtest.StartServe(t, "", guardBin, e.environ, &logs, "serve", "--config", e.cfg, "--db", e.db, "--ui", ui)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "desk", Version: "7"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + s.Addr + "/mcp/notes"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	const key = "AKIAQWERTYUIOPASDFGH" // an AWS access key id: redacted in the audit log
	got := goCall(func() (*mcp.CallToolResult, error) {
		return cs.CallTool(ctx, &mcp.CallToolParams{Name: "send_message", Arguments: map[string]any{"to": "ops", "message": "use " + key}})
	})

	// The first attempt fails; the hold exists already, and the call
	// still waits.
	first := signed.next(t, "the first announcement")
	var h struct {
		Type, Approval, Server, Tool, Client, Rule, Reason, URL, Session string
		CallID                                                           string `json:"call_id"`
		Arguments                                                        map[string]any
		Created, Expires                                                 time.Time
	}
	if err := json.Unmarshal(first.body, &h); err != nil {
		t.Fatalf("announcement: %v: %s", err, first.body)
	}
	db := e.openReadOnly(ctx)
	defer db.Close()
	a, err := db.Holds().Approval(ctx, h.Approval)
	if err != nil || a.State != guard.ApprovalPending || a.CreatedAt.After(first.at) {
		t.Fatalf("the hold when it was first announced: %+v %v", a, err)
	}
	select {
	case r := <-got:
		t.Fatalf("the call ended while its announcement failed: %+v %v", r.r, r.err)
	default:
	}

	// Retried, with a fresh signature each time, until delivered.
	second := signed.next(t, "the second attempt")
	third := signed.next(t, "the third attempt")
	if first.answered != 503 || second.answered != 503 || third.answered != 204 {
		t.Fatalf("answers: %d %d %d", first.answered, second.answered, third.answered)
	}
	for i, d := range []delivery{first, second, third} {
		if !signedBy(secret, d, time.Now()) {
			t.Fatalf("attempt %d: the signature does not verify: %v", i+1, d.header)
		}
		var again struct{ Approval string }
		if json.Unmarshal(d.body, &again) != nil || again.Approval != a.ID {
			t.Fatalf("attempt %d names another approval: %s", i+1, d.body)
		}
	}
	tampered := third
	tampered.body = append([]byte(nil), third.body...)
	tampered.body[len(tampered.body)-2] ^= 1
	if signedBy(secret, tampered, time.Now()) || signedBy("another secret", third, time.Now()) ||
		signedBy(secret, third, time.Now().Add(10*time.Minute)) {
		t.Fatal("the receiver's check passes a changed body, another key or a replay")
	}
	if h.Type != "hold" || h.CallID != a.CallID || h.Server != "notes" || h.Tool != "send_message" || h.Client != "desk/7" ||
		h.Rule != a.Rule || h.Rule == "" || h.Reason != a.HeldReason || h.Session == "" ||
		!h.Expires.Equal(a.ExpiresAt) || !h.Created.Equal(a.CreatedAt) || h.URL != "https://guard.example.com/#approval-"+a.ID ||
		h.Arguments["to"] != "ops" {
		t.Fatalf("announcement %+v of %+v", h, a)
	}

	sl := slack.next(t, "the Slack message")
	var msg struct {
		Text   string
		Blocks []struct {
			Type     string
			Elements []struct{ Type, URL string }
		}
	}
	if err := json.Unmarshal(sl.body, &msg); err != nil || msg.Text == "" || len(msg.Blocks) == 0 ||
		sl.header.Get("Guard-Signature") != "" {
		t.Fatalf("Slack message: %v %s %v", err, sl.body, sl.header)
	}
	button := ""
	for _, b := range msg.Blocks {
		for _, el := range b.Elements {
			if b.Type == "actions" && el.Type == "button" {
				button = el.URL
			}
		}
	}
	if button != h.URL || !strings.Contains(msg.Text, "notes / send_message") {
		t.Fatalf("Slack message: %s", sl.body)
	}

	// No credential in any announcement: not the UI's token, not the
	// arguments' secret.
	out, code := e.guard("ui", "url")
	token := regexp.MustCompile(`token=([^&\s]+)`).FindStringSubmatch(out)
	if code != 0 || token == nil {
		t.Fatalf("ui url: %s", out)
	}
	for _, d := range []delivery{first, second, third, sl} {
		for _, secretValue := range []string{token[1], key, secret} {
			if strings.Contains(string(d.body), secretValue) {
				t.Fatalf("an announcement carries %q: %s", secretValue, d.body)
			}
		}
	}

	// The dead receiver: in the metrics, and on the Pending page.
	deadLabel := notify.Config{Webhook: dead, Format: notify.FormatJSON}.Label()
	signedLabel := notify.Config{Webhook: signed.srv.URL + "/guard", Format: notify.FormatJSON}.Label()
	metrics := ""
	for !strings.Contains(metrics, `guard_notify_failures_total{receiver="`+deadLabel+`"}`) {
		select {
		case <-ctx.Done():
			t.Fatalf("the dead receiver is not in /metrics:\n%s", metrics)
		case <-time.After(50 * time.Millisecond):
		}
		if resp, err := http.Get("http://" + s.Addr + "/metrics"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			metrics = string(b)
		}
	}
	for _, want := range []string{
		"# TYPE guard_notify_sent_total counter",
		`guard_notify_sent_total{receiver="` + signedLabel + `"} 1` + "\n",
		`guard_notify_failures_total{receiver="` + signedLabel + `"} 2` + "\n",
		`guard_notify_sent_total{receiver="` + deadLabel + `"} 0` + "\n",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, metrics)
		}
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 5 * time.Second}
	guardtest.WaitHTTP(t, "http://"+ui+"/static/app.css")
	if code, _ := get(t, c, "http://"+ui+"/login?token="+token[1]); code != http.StatusOK {
		t.Fatalf("login: %d", code)
	}
	var page string
	for !strings.Contains(page, `id="notify-failing"`) {
		select {
		case <-ctx.Done():
			t.Fatalf("the Pending page does not show the dead receiver:\n%s", page)
		case <-time.After(50 * time.Millisecond):
		}
		_, page = get(t, c, "http://"+ui+"/")
	}
	failing := page[strings.Index(page, `id="notify-failing"`):]
	failing = html.UnescapeString(failing[:strings.Index(failing, "</div>")])
	if !strings.Contains(failing, deadLabel+": failing, retrying") || strings.Contains(failing, signedLabel) {
		t.Fatalf("the Pending page's line: %s", failing)
	}
	if !strings.Contains(page, `id="approval-`+a.ID+`"`) {
		t.Fatalf("the announcement's link leads to no card on the Pending page:\n%s", page)
	}

	if out, code := e.guard("approvals", "approve", a.ID, "--by", "carol"); code != 0 {
		t.Fatalf("approve: %s", out)
	}
	if r := <-got; r.err != nil || r.r.IsError {
		t.Fatalf("the approved call: %+v %v", r.r, r.err)
	}
	s.Stop()
	// Nor in guard's log: the secret, the Slack webhook's path.
	if l := logs.String(); strings.Contains(l, secret) || strings.Contains(l, "T000/B000/XXXX") || !strings.Contains(l, "notify: receiver failing") {
		t.Fatalf("guard's log:\n%s", l)
	}
}

// A call held for its tool's review and then, the tool accepted, held by
// a rule waits on a second approval: that hold is announced too, under
// its own approval id.
func TestAHoldAfterAToolsReviewIsAnnounced(t *testing.T) {
	h := newHook(t, 0)
	// The rug-pull server's add has instructions for the model in its
	// description: it is held for review from the first listing.
	e := newEnv(t, "approval: {wait: 60s}\n"+
		"servers:\n  weather:\n    command: ["+strconv.Quote(os.Args[0])+"]\n"+
		"policy:\n  default: allow\n  rules:\n    - {name: sums-need-a-person, tool: add, action: approve}\n"+
		"notify:\n  - {webhook: "+h.srv.URL+"/guard, secret: s3cret-hook}\n")
	e.environ = append(e.environ, "GUARD_E2E_SERVE=rugpull")
	s := guardtest.StartServe(t, "", guardBin, e.environ, &lockedLog{}, "serve", "--config", e.cfg, "--db", e.db, "--ui", freePort(t))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "desk", Version: "7"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + s.Addr + "/mcp/weather"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	got := goCall(func() (*mcp.CallToolResult, error) {
		return cs.CallTool(ctx, &mcp.CallToolParams{Name: "add", Arguments: map[string]any{"a": 1, "b": 2}})
	})
	announced := func(what string) (approval, rule string) {
		t.Helper()
		d := h.next(t, what)
		var a struct{ Approval, Rule string }
		if err := json.Unmarshal(d.body, &a); err != nil || a.Approval == "" {
			t.Fatalf("%s: %v %s", what, err, d.body)
		}
		return a.Approval, a.Rule
	}
	review, rule := announced("the hold for the tool's review")
	if rule != guard.ToolReviewRule {
		t.Fatalf("the first hold was by %q, want the tool's review", rule)
	}
	if out, code := e.guard("approvals", "approve", review, "--by", "alice"); code != 0 {
		t.Fatalf("accepting the tool: %s", out)
	}
	second, rule := announced("the hold by the rule")
	if second == review || rule != "sums-need-a-person" {
		t.Fatalf("the second hold: approval %s by %q (the first: %s)", second, rule, review)
	}
	if out, code := e.guard("approvals", "approve", second, "--by", "alice"); code != 0 {
		t.Fatalf("approving the call: %s", out)
	}
	if r := awaitCall(t, got); r == nil || r.IsError {
		t.Fatalf("the call approved twice: %v", r)
	}
	select {
	case d := <-h.got:
		t.Fatalf("a third announcement: %s", d.body)
	default:
	}
}
