package web_test

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
)

// activityLog appends n calls with several clients, sessions, deciders
// and words; every third carries an approval; some have a client name
// that needs escaping everywhere it is shown or linked.
func activityLog(t testing.TB, db *store.DB, n int) {
	t.Helper()
	at := time.Now().Add(-time.Hour).UTC()
	for i := range n {
		id := newID()
		client := []string{"claude-ai/0.1.0", `a&b "<x>"`}[i%2]
		req := &guard.Record{CallID: id, Kind: guard.KindRequest, Time: at.Add(time.Duration(i/2) * time.Millisecond),
			Server: []string{"files", "db"}[i/3%2], Method: "tools/call", Tool: "read_file", Client: client,
			Session: fmt.Sprintf("s%d", i%4), Decision: guard.DecisionAllowed, DecidedBy: []string{"default", "alice"}[i%5/4],
			Arguments: fmt.Sprintf(`{"path":"/srv/%s/%d"}`, []string{"alpha", "bravo", "charlie"}[i%3], i)}
		if i%3 == 0 {
			req.Approval = fmt.Sprintf("appr-%d", i)
		}
		out := &guard.Record{CallID: id, Kind: guard.KindOutcome, Time: req.Time, Server: req.Server, Method: "tools/call",
			Tool: "read_file", Client: client, Outcome: guard.OutcomeOK, Result: `{"text":"fine"}`}
		if err := db.Append(req, out); err != nil {
			t.Fatal(err)
		}
	}
}

var (
	callIDRE = regexp.MustCompile(`data-call-id="([^"]+)"`)
	olderRE  = regexp.MustCompile(`href="([^"]*)" rel="next"`)
	newerRE  = regexp.MustCompile(`href="([^"]*)" rel="prev"`)
)

func shownCalls(body string) []string {
	var ids []string
	for _, m := range callIDRE.FindAllStringSubmatch(body, -1) {
		ids = append(ids, m[1])
	}
	return ids
}

func storeIDs(t *testing.T, db *store.DB, f store.Filter) []string {
	t.Helper()
	var ids []string
	if err := db.Reader().Query(context.Background(), f, func(c *store.Call) error { ids = append(ids, c.ID); return nil }); err != nil {
		t.Fatal(err)
	}
	return ids
}

// The Activity page's filters select what guard audit query selects, its
// older and newer links walk every call once with the filter kept, and
// every value typed is escaped where it is shown and linked.
func TestActivityFiltersAndPages(t *testing.T) {
	e := newEnv(t)
	activityLog(t, e.db, 47)
	b := e.login("")
	for q, f := range map[string]store.Filter{
		"client=" + url.QueryEscape(`a&b "<x>"`): {Client: `a&b "<x>"`},
		"session=s2":                             {Session: "s2"},
		"decided_by=alice":                       {DecidedBy: "alice"},
		"approval=appr-9":                        {Approval: "appr-9"},
		"text=bravo":                             {Text: "bravo"},
		"text=" + url.QueryEscape(`"srv charlie" ^ path*`): {Text: `"srv charlie" ^ path*`},
		"server=db&text=alpha":                             {Server: "db", Text: "alpha"},
		"until=1m":                                         {Until: time.Now().Add(-time.Minute)},
	} {
		_, body := b.get("/activity?" + q)
		if got, want := shownCalls(body), storeIDs(t, e.db, f); !slices.Equal(got, want) || len(want) == 0 {
			t.Errorf("%s: shows %d calls %v, want %d %v", q, len(got), got, len(want), want)
		}
	}
	before := storeIDs(t, e.db, store.Filter{})

	// Pages of 10 of one client's calls, older then newer.
	q := "/activity?limit=10&client=" + url.QueryEscape(`a&b "<x>"`)
	want := storeIDs(t, e.db, store.Filter{Client: `a&b "<x>"`})
	var pages [][]string
	for next := q; next != ""; {
		res, body := b.get(next)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", next, res.StatusCode)
		}
		if ids := shownCalls(body); len(ids) > 0 {
			pages = append(pages, ids)
		}
		next = ""
		if m := olderRE.FindStringSubmatch(body); m != nil {
			next = html.UnescapeString(m[1])
			if u, _ := url.Parse(next); u.Query().Get("client") != `a&b "<x>"` || u.Query().Get("limit") != "10" {
				t.Fatalf("the older link loses the filter: %s", next)
			}
		}
		if len(pages) > 10 {
			t.Fatal("the pages do not end")
		}
	}
	if got := slices.Concat(pages...); !slices.Equal(got, want) {
		t.Fatalf("pages %v,\nwant %v", pages, want)
	}
	// From the oldest page, newer links walk back through the same pages.
	_, body := b.get(q)
	for range len(pages) - 1 {
		m := olderRE.FindStringSubmatch(body)
		_, body = b.get(html.UnescapeString(m[1]))
	}
	for i := len(pages) - 2; i >= 0; i-- {
		m := newerRE.FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("no newer link on page %d", i+1)
		}
		_, body = b.get(html.UnescapeString(m[1]))
		if got := shownCalls(body); !slices.Equal(got, pages[i]) {
			t.Fatalf("newer page %d: %v, want %v", i, got, pages[i])
		}
	}
	if newerRE.MatchString(body) {
		t.Error("the newest page links to newer ones")
	}

	// What is typed comes back escaped, and FTS syntax is only words.
	evil := `"><script>alert(1)</script>`
	_, body = b.get("/activity?text=" + url.QueryEscape(evil) + "&session=" + url.QueryEscape(evil))
	if strings.Contains(body, "<script>alert") || !strings.Contains(body, "&lt;script&gt;alert(1)") && !strings.Contains(body, "&#34;&gt;&lt;script&gt;") {
		t.Errorf("a typed value is not escaped: %s", body)
	}
	for _, bad := range []string{"decision=approve", "outcome=fine", "text=" + url.QueryEscape(`" * "`),
		"since=yesterday", "until=" + url.QueryEscape("2026-13-45"), "since=1h&until=soon"} {
		_, body = b.get("/activity?" + bad)
		if !strings.Contains(body, "Not shown:") || len(shownCalls(body)) != 0 {
			t.Errorf("%s: not refused, or calls shown", bad)
		}
	}
	if _, body = b.get("/activity?before=banana"); !strings.Contains(body, "Ignored: before") {
		t.Error("a bad page cursor is not reported")
	}
	// Reading changed nothing.
	if after := storeIDs(t, e.db, store.Filter{}); !slices.Equal(after, before) {
		t.Error("reading the activity page changed the log")
	}
}

// In Chromium: the filter form puts its values in the address (a view
// can be shared), and the older and newer links page through.
func TestBrowserActivityFilterAndPages(t *testing.T) {
	e := newEnv(t)
	activityLog(t, e.db, 30)
	p := newPage(t, e)
	p.do(10*time.Second, chromedp.Navigate(e.ts.URL+"/login?token="+testToken), chromedp.WaitVisible(chromedp.CSS(`#pending-list`)))
	p.open("/activity?limit=4")
	p.do(5*time.Second, chromedp.SendKeys(chromedp.CSS(`input[name="text"]`), "bravo"),
		chromedp.SetValue(chromedp.CSS(`input[name="client"]`), `a&b "<x>"`))
	p.submit(`#activity-filter button[type="submit"]`)
	loc, _ := url.Parse(evaluate[string](p, `location.href`))
	if loc.Query().Get("text") != "bravo" || loc.Query().Get("client") != `a&b "<x>"` || loc.Query().Get("limit") != "4" {
		t.Fatalf("the address does not hold the filter: %s", loc)
	}
	want := storeIDs(t, e.db, store.Filter{Text: "bravo", Client: `a&b "<x>"`})
	rows := func() []string {
		return evaluate[[]string](p, `[...document.querySelectorAll("tr[data-call-id]")].map(r => r.dataset.callId)`)
	}
	// The links are followed as the page has them (the live updates may
	// replace them while a click is on its way: their addresses stay).
	follow := func(rel string) bool {
		href := evaluate[string](p, `(document.querySelector('a[rel="`+rel+`"]') || {}).href || ""`)
		if href != "" {
			u, _ := url.Parse(href)
			p.open(u.RequestURI())
		}
		return href != ""
	}
	var got []string
	for page := 0; ; page++ {
		got = append(got, rows()...)
		if !follow("next") {
			break
		}
		if page > 10 {
			t.Fatal("the pages do not end")
		}
	}
	if !slices.Equal(got, want) || len(want) <= 4 {
		t.Fatalf("pages showed %v, want %v", got, want)
	}
	if !follow("prev") {
		t.Fatal("the oldest page has no link to newer calls")
	}
	if r := rows(); len(r) != 4 || !slices.Contains(want, r[0]) {
		t.Fatalf("the newer page shows %v", r)
	}
	if v := evaluate[string](p, `document.querySelector('input[name="client"]').value`); v != `a&b "<x>"` {
		t.Fatalf("the form shows the client as %q", v)
	}
}

// userCalls appends n calls of a caller the front authenticated, whose
// groups need escaping where they are shown.
func userCalls(t testing.TB, db *store.DB, who guard.Identity, n int) {
	t.Helper()
	at := time.Now().Add(-30 * time.Minute).UTC()
	for i := range n {
		id := newID()
		req := &guard.Record{CallID: id, Kind: guard.KindRequest, Time: at.Add(time.Duration(i) * time.Millisecond), Server: "db",
			Method: "tools/call", Tool: "query", Client: "mcp-remote/0.1", Session: "s-alice", Decision: guard.DecisionAllowed,
			DecidedBy: "default", Arguments: `{"sql":"SELECT 1"}`, User: who.Subject, UserEmail: who.Email, UserGroups: who.Groups}
		out := *req
		out.Kind, out.Outcome, out.Arguments = guard.KindOutcome, guard.OutcomeOK, ""
		if err := db.Append(req, &out); err != nil {
			t.Fatal(err)
		}
	}
}

var alice = guard.Identity{Subject: "user-7f3a", Email: "alice@example.com", Groups: []string{"sre", "<b>on-call</b>"}}

// The Activity page shows who the front authenticated for a call where
// there is one, in a column that only a page with such a call has; its
// user filter selects what guard audit query --user selects, by subject
// or by email, and is kept in the paging links; a call's page shows the
// user, email and groups, escaped.
func TestActivityShowsTheUser(t *testing.T) {
	e := newEnv(t)
	activityLog(t, e.db, 12)
	userCalls(t, e.db, alice, 5)
	b := e.login("")
	_, body := b.get("/activity")
	if !strings.Contains(body, "<th>User</th>") || strings.Count(body, ">alice@example.com</td>") != 5 {
		t.Errorf("the activity page does not name alice on her 5 calls:\n%s", body)
	}
	if _, body := b.get("/activity?server=files"); strings.Contains(body, "<th>User</th>") || len(shownCalls(body)) == 0 {
		t.Errorf("a page of calls no one authenticated has a user column:\n%s", body)
	}
	want := storeIDs(t, e.db, store.Filter{User: alice.Email})
	if len(want) != 5 {
		t.Fatalf("the store finds %d of alice's calls", len(want))
	}
	for _, who := range []string{alice.Email, alice.Subject} {
		_, body := b.get("/activity?user=" + url.QueryEscape(who))
		if got := shownCalls(body); !slices.Equal(got, want) {
			t.Errorf("user=%s: shows %v, want %v", who, got, want)
		}
	}
	_, body = b.get("/activity?limit=2&user=" + url.QueryEscape(alice.Email))
	m := olderRE.FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no older page of alice's calls")
	}
	if u, _ := url.Parse(html.UnescapeString(m[1])); u.Query().Get("user") != alice.Email {
		t.Errorf("the older link loses the user: %s", m[1])
	}
	_, body = b.get("/activity/" + want[0])
	for _, s := range []string{">user-7f3a</dd>", ">alice@example.com</dd>", ">sre, &lt;b&gt;on-call&lt;/b&gt;</dd>"} {
		if !strings.Contains(body, s) {
			t.Errorf("the call's page lacks %s:\n%s", s, body)
		}
	}
	if strings.Contains(body, "<b>on-call") {
		t.Error("a group is not escaped")
	}
}

// In Chromium: the user typed in the filter form goes in the address,
// and the page shows that user's calls.
func TestBrowserActivityUserFilter(t *testing.T) {
	e := newEnv(t)
	activityLog(t, e.db, 6)
	userCalls(t, e.db, alice, 3)
	p := newPage(t, e)
	p.do(10*time.Second, chromedp.Navigate(e.ts.URL+"/login?token="+testToken), chromedp.WaitVisible(chromedp.CSS(`#pending-list`)))
	p.open("/activity")
	p.do(5*time.Second, chromedp.SendKeys(chromedp.CSS(`input[name="user"]`), alice.Subject))
	p.submit(`#activity-filter button[type="submit"]`)
	loc, _ := url.Parse(evaluate[string](p, `location.href`))
	if loc.Query().Get("user") != alice.Subject {
		t.Fatalf("the address does not hold the user: %s", loc)
	}
	rows := evaluate[[]string](p, `[...document.querySelectorAll("tr[data-call-id]")].map(r => r.dataset.callId)`)
	if want := storeIDs(t, e.db, store.Filter{User: alice.Subject}); !slices.Equal(rows, want) || len(want) != 3 {
		t.Fatalf("rows %v, want %v", rows, want)
	}
	users := evaluate[[]string](p, `[...document.querySelectorAll("tr[data-call-id] td.user")].map(td => td.textContent)`)
	if len(users) != 3 || users[0] != alice.Email {
		t.Fatalf("the user column shows %v", users)
	}
}
