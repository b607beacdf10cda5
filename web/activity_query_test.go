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
	if err := db.Query(context.Background(), f, func(c *store.Call) error { ids = append(ids, c.ID); return nil }); err != nil {
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
