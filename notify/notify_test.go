package notify

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
)

func openDB(t *testing.T) *store.DB {
	t.Helper()
	db, err := store.Open(context.Background(), store.Options{Path: filepath.Join(t.TempDir(), "guard.db"), Durability: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// hold stores a pending approval and its call's request record, as a
// session does when policy holds a call, and returns the approval.
func hold(t *testing.T, db *store.DB, tool string) *guard.Approval {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Millisecond)
	id := guard.NewID()
	a := &guard.Approval{ID: id, CallID: id, Session: "s1", Client: "desk/1", Server: "notes", Tool: tool,
		Arguments: `{"title":"a"}`, Digest: "sha256:" + id, Pin: "sha256:p", PolicyVersion: "v1", Rule: "default",
		HeldReason: "destructive", State: guard.ApprovalPending, CreatedAt: now, ExpiresAt: now.Add(10 * time.Minute)}
	if err := db.Holds().CreateApproval(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	if err := db.Append(&guard.Record{CallID: id, Kind: guard.KindRequest, Session: "s1", Client: "desk/1", Server: "notes",
		Direction: guard.ClientToServer, Method: "tools/call", Tool: tool, Arguments: `{"title":"a"}`,
		Decision: guard.DecisionHeld, DecidedBy: "default", Approval: id}); err != nil {
		t.Fatal(err)
	}
	return a
}

// receiverServer is a webhook receiver: a real HTTP server whose answer
// to each request handle decides; it passes on the approval id of each
// announcement it got.
func receiverServer(t *testing.T, handle func(w http.ResponseWriter, body []byte)) (string, <-chan string) {
	got := make(chan string, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var h struct{ Approval string }
		_ = json.Unmarshal(b, &h)
		got <- h.Approval
		handle(w, b)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/hook", got
}

func ok(w http.ResponseWriter, _ []byte) { w.WriteHeader(http.StatusOK) }

// start runs a notifier on db until the test ends (or stop is called).
func start(t *testing.T, db *store.DB, holder string, o Options, recv ...Config) (n *Notifier, stop func()) {
	t.Helper()
	o.Store, o.Receivers, o.Holder, o.BaseURL = db, recv, holder, "https://guard.example.com"
	if testing.Verbose() {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if o.BackoffMin == 0 {
		o.BackoffMin, o.BackoffMax = 10*time.Millisecond, 50*time.Millisecond
	}
	o.Poll, o.LeaseTTL = 50*time.Millisecond, 3*time.Second
	n, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { n.Run(ctx); close(done) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return n, stop
}

func receive(t *testing.T, got <-chan string, what string) string {
	t.Helper()
	select {
	case id := <-got:
		return id
	case <-time.After(20 * time.Second):
		t.Fatalf("%s never came", what)
		return ""
	}
}

// eventually waits until cond holds, or fails after 20s saying what it
// waited for.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// events returns the delivery events of the log, newest first.
func events(t *testing.T, db *store.DB) []*guard.Record {
	t.Helper()
	db.Streams().CaughtUp(context.Background())
	var out []*guard.Record
	if err := db.Reader().QueryRecords(context.Background(), guard.KindEvent, store.Filter{}, func(r *guard.Record) error {
		if r.Method == Method {
			out = append(out, r)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// A receiver that does not answer in time fails that attempt, is said
// to be failing, and gives up once the announcement's time is over; a
// receiver beside it gets the announcement at once. Once the first
// receiver answers again, it is said to have recovered.
func TestASlowReceiverDelaysOnlyItself(t *testing.T) {
	db := openDB(t)
	release := make(chan struct{})
	var slow sync.Once
	slowURL, slowGot := receiverServer(t, func(w http.ResponseWriter, _ []byte) {
		<-release // no answer until released
		w.WriteHeader(http.StatusNoContent)
	})
	t.Cleanup(func() { slow.Do(func() { close(release) }) })
	fastURL, fastGot := receiverServer(t, ok)
	slowR := Config{Webhook: slowURL, Format: FormatJSON, Secret: "k"}
	fastR := Config{Webhook: fastURL, Format: FormatJSON, Secret: "k"}
	n, stop := start(t, db, "one", Options{Timeout: 100 * time.Millisecond, RetryFor: 400 * time.Millisecond}, slowR, fastR)
	a := hold(t, db, "delete_note")
	if id := receive(t, fastGot, "the announcement to the fast receiver"); id != a.ID {
		t.Fatalf("announced %s, held %s", id, a.ID)
	}
	receive(t, slowGot, "the slow receiver's first attempt")
	// It gives up: a given_up event after a failing one.
	var evs []*guard.Record
	eventually(t, "the announcement given up", func() bool {
		evs = events(t, db)
		return len(Problems(evs)) == 1 && Problems(evs)[0].State == GivenUp
	})
	p := Problems(evs)[0]
	if p.Receiver != slowR.Label() || p.Approval != a.ID || p.Error != "no answer in time" {
		t.Fatalf("problem: %+v", p)
	}
	if !strings.Contains(p.String(), slowR.Label()+": an announcement was not delivered") {
		t.Fatalf("problem, for people: %s", p)
	}
	states := []string{}
	for _, ev := range evs {
		var d struct{ Delivery, Receiver string }
		_ = json.Unmarshal([]byte(ev.Detail), &d)
		states = append(states, d.Delivery)
		if ev.Approval != a.ID || ev.Tool != "delete_note" || d.Receiver != slowR.Label() {
			t.Fatalf("event: %+v", ev)
		}
	}
	if states[0] != GivenUp || states[len(states)-1] != Failing {
		t.Fatalf("events, newest first: %v", states)
	}

	// The receiver answers again: the next announcement goes through
	// and it is said to have recovered.
	slow.Do(func() { close(release) })
	b := hold(t, db, "write_note")
	for receive(t, slowGot, "the next announcement") != b.ID {
	}
	if id := receive(t, fastGot, "the next announcement to the fast receiver"); id != b.ID {
		t.Fatalf("announced %s, held %s", id, b.ID)
	}
	eventually(t, "the receiver recovered", func() bool { return len(Problems(events(t, db))) == 0 && n.Stats()[1].Sent == 2 })
	stop()
	stats := n.Stats()
	if len(stats) != 2 || stats[0].Receiver != slowR.Label() || stats[0].GivenUp != 1 || stats[0].Failures < 2 || stats[0].Sent != 1 ||
		stats[1].Receiver != fastR.Label() || stats[1].Sent != 2 || stats[1].Failures != 0 {
		t.Fatalf("stats: %+v", stats)
	}
}

// The signature is the one the README documents, as another tool
// computes it: printf '%s' '1767225600.{"type":"hold"}' | openssl dgst
// -sha256 -hmac whsec.
func TestSign(t *testing.T) {
	const want = "v1=9f6d3aab6caf62559803c6afe7cb020c5b258327d59746d727be43458c05a636"
	if got := Sign("whsec", 1767225600, []byte(`{"type":"hold"}`)); got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

// A notifier that stops and another that starts later (a restart, or
// another process taking the lease over) announce each hold once: the
// second starts after what the first delivered, skips a hold decided
// meanwhile, and announces the one still pending.
func TestAnnouncementsResumeWhereTheyStopped(t *testing.T) {
	db := openDB(t)
	before := hold(t, db, "delete_note") // before any notifier: not announced
	url, got := receiverServer(t, ok)
	r := Config{Webhook: url, Format: FormatJSON, Secret: "k"}
	_, stop := start(t, db, "first", Options{}, r)
	a := hold(t, db, "delete_note")
	settled(t, db, r)
	if ids := drained(got); len(ids) != 1 || ids[0] != a.ID {
		t.Fatalf("announced %v; want %s once (held before the notifier: %s)", ids, a.ID, before.ID)
	}
	stop()

	decided, pending := hold(t, db, "write_note"), hold(t, db, "send_message")
	if _, err := db.Holds().DecideApprovalWith(context.Background(), decided.ID, false, "carol", "no", nil); err != nil {
		t.Fatal(err)
	}
	start(t, db, "second", Options{}, r)
	settled(t, db, r)
	if ids := drained(got); len(ids) != 1 || ids[0] != pending.ID {
		t.Fatalf("announced %v after the restart; want only %s (decided: %s, announced before: %s)", ids, pending.ID, decided.ID, a.ID)
	}
	// A hold made now is the next announcement.
	last := hold(t, db, "run_task")
	if id := receive(t, got, "the last announcement"); id != last.ID {
		t.Fatalf("announced %s; want %s", id, last.ID)
	}
}

// The Slack message has the shape Slack's incoming webhooks document: a
// text (the notification's, and the fallback), and Block Kit blocks
// within their limits; mrkdwn's reserved characters escaped; the link
// in a button; no arguments.
func TestSlackMessageShape(t *testing.T) {
	exp := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	h := &Hold{Type: "hold", Approval: "01a2", Server: "db", Tool: "drop_<table>", Client: "agent & co/1", User: "alice",
		UserEmail: "alice@example.com", Rule: "prod-writes", Reason: strings.Repeat("long reason ", 400),
		Arguments: json.RawMessage(`{"table":"users"}`), Expires: exp, URL: "https://guard.example.com/#approval-01a2"}
	b, err := json.Marshal(SlackMessage(h))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "users") {
		t.Fatalf("the Slack message carries the arguments: %s", b)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for k := range m {
		if k != "text" && k != "blocks" {
			t.Errorf("unknown member %q", k)
		}
	}
	text, _ := m["text"].(string)
	blocks, _ := m["blocks"].([]any)
	if text == "" || len(blocks) == 0 || len(blocks) > 50 {
		t.Fatalf("text %q, %d blocks", text, len(blocks))
	}
	// textObject checks a text object and returns its text when it is
	// mrkdwn (plain_text is shown as it is).
	textObject := func(where string, v any, max int, types ...string) string {
		o, _ := v.(map[string]any)
		typ, _ := o["type"].(string)
		s, _ := o["text"].(string)
		if len(o) != 2 || typ == "" || !strings.Contains(strings.Join(types, " "), typ) || s == "" || len([]rune(s)) > max {
			t.Errorf("%s: not a text object of %v within %d characters: %v", where, types, max, v)
		}
		if typ != "mrkdwn" {
			return ""
		}
		return s + "\n"
	}
	var all, button, header string
	for i, v := range blocks {
		bl, _ := v.(map[string]any)
		switch bl["type"] {
		case "header":
			textObject("header", bl["text"], 150, "plain_text")
			header, _ = bl["text"].(map[string]any)["text"].(string)
		case "section":
			if bl["text"] == nil && bl["fields"] == nil {
				t.Errorf("block %d: a section needs text or fields", i)
			}
			if bl["text"] != nil {
				all += textObject("section", bl["text"], 3000, "plain_text", "mrkdwn")
			}
			if fs, ok := bl["fields"].([]any); bl["fields"] != nil && (!ok || len(fs) > 10) {
				t.Errorf("block %d: fields: %v", i, bl["fields"])
			} else {
				for _, f := range fs {
					all += textObject("field", f, 2000, "plain_text", "mrkdwn")
				}
			}
		case "actions":
			els, _ := bl["elements"].([]any)
			if len(els) == 0 || len(els) > 25 {
				t.Errorf("block %d: %d elements", i, len(els))
			}
			for _, e := range els {
				el, _ := e.(map[string]any)
				textObject("button", el["text"], 75, "plain_text")
				url, _ := el["url"].(string)
				id, _ := el["action_id"].(string)
				if el["type"] != "button" || len(url) > 3000 || len(id) > 255 || (el["style"] != nil && el["style"] != "primary" && el["style"] != "danger") {
					t.Errorf("block %d: button %v", i, el)
				}
				button = url
			}
		case "context":
			els, _ := bl["elements"].([]any)
			if len(els) == 0 || len(els) > 10 {
				t.Errorf("block %d: %d elements", i, len(els))
			}
			for _, e := range els {
				all += textObject("context", e, 3000, "plain_text", "mrkdwn")
			}
		default:
			t.Errorf("block %d: type %v", i, bl["type"])
		}
	}
	if button != h.URL || header != "Held for approval: db / drop_<table>" {
		t.Errorf("button to %q, header %q", button, header)
	}
	for _, want := range []string{"drop_&lt;table&gt;", "agent &amp; co/1", "alice (alice@example.com)", "prod-writes", "<!date^" + "1767366245" + "^", "01a2"} {
		if !strings.Contains(all, want) {
			t.Errorf("the blocks lack %q:\n%s", want, all)
		}
	}
	if strings.Contains(all, "<table>") || strings.Contains(all, "& co") || strings.Contains(text, "<table>") || strings.Contains(text, "& co") {
		t.Errorf("mrkdwn not escaped:\n%s", all)
	}
}

// settled waits until the receiver's cursor is past every record in the
// log: each hold in it has been dealt with (delivered, or skipped).
func settled(t *testing.T, db *store.DB, r Config) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(20 * time.Second)
	for {
		db.Streams().CaughtUp(ctx)
		last, err := db.Streams().LastSeq(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if c, err := db.Streams().StreamCursor(ctx, r.Name()); err == nil && c >= last {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the notifier never dealt with the whole log")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// drained returns what a receiver got and nobody took yet.
func drained(got <-chan string) []string {
	var out []string
	for {
		select {
		case id := <-got:
			out = append(out, id)
		default:
			return out
		}
	}
}

// A client that calls again while its call is held is told it waits on
// the same approval; that request record names the approval too, and is
// not announced again: not by the notifier that announced it, nor by one
// that starts later.
func TestARetryOfAHeldCallIsNotAnnouncedAgain(t *testing.T) {
	db := openDB(t)
	url, got := receiverServer(t, ok)
	r := Config{Webhook: url, Format: FormatJSON, Secret: "k"}
	retry := func(a *guard.Approval) {
		t.Helper()
		if err := db.Append(&guard.Record{CallID: guard.NewID(), Kind: guard.KindRequest, Session: "s2", Client: "desk/1", Server: "notes",
			Direction: guard.ClientToServer, Method: "tools/call", Tool: a.Tool, Arguments: `{"title":"a"}`,
			Decision: guard.DecisionHeld, DecidedBy: "default", Approval: a.ID}); err != nil {
			t.Fatal(err)
		}
	}
	_, stop := start(t, db, "one", Options{}, r)
	a := hold(t, db, "delete_note")
	retry(a)
	settled(t, db, r)
	if ids := drained(got); len(ids) != 1 || ids[0] != a.ID {
		t.Fatalf("announced %v; want %s once", ids, a.ID)
	}
	stop()
	retry(a)
	b := hold(t, db, "send_message")
	start(t, db, "two", Options{}, r)
	settled(t, db, r)
	if ids := drained(got); len(ids) != 1 || ids[0] != b.ID {
		t.Fatalf("announced %v after the restart; want %s once (the retry's approval: %s)", ids, b.ID, a.ID)
	}
}

// A failure another process recorded (or this one before a restart) is
// cleared by the next delivery: the receiver is said to have recovered.
func TestARecordedFailureIsClearedAfterARestart(t *testing.T) {
	db := openDB(t)
	var mu sync.Mutex
	status := http.StatusServiceUnavailable
	url, got := receiverServer(t, func(w http.ResponseWriter, _ []byte) {
		mu.Lock()
		defer mu.Unlock()
		w.WriteHeader(status)
	})
	r := Config{Webhook: url, Format: FormatJSON, Secret: "k"}
	undelivered := func() []Problem {
		t.Helper()
		db.Streams().CaughtUp(context.Background())
		ps, err := Undelivered(context.Background(), db.Reader(), time.Now().Add(-time.Hour), []Config{r})
		if err != nil {
			t.Fatal(err)
		}
		return ps
	}
	_, stop := start(t, db, "one", Options{RetryFor: 100 * time.Millisecond}, r)
	a := hold(t, db, "delete_note")
	receive(t, got, "the first attempt")
	eventually(t, "the announcement given up", func() bool { ps := undelivered(); return len(ps) == 1 && ps[0].State == GivenUp })
	if ps := undelivered(); len(ps) != 1 || ps[0].Receiver != r.Label() || ps[0].Approval != a.ID || ps[0].Error != "the receiver answered 503 Service Unavailable" {
		t.Fatalf("undelivered: %+v", ps)
	}
	stop()
	// Only the receivers configured now are named.
	if ps, _ := Undelivered(context.Background(), db.Reader(), time.Now().Add(-time.Hour), nil); len(ps) != 0 {
		t.Fatalf("undelivered, of no receiver: %+v", ps)
	}

	mu.Lock()
	status = http.StatusNoContent
	mu.Unlock()
	start(t, db, "two", Options{}, r)
	b := hold(t, db, "write_note")
	for receive(t, got, "the announcement after the restart") != b.ID {
	}
	eventually(t, "the failure cleared", func() bool { return len(undelivered()) == 0 })
}
