package benchmark

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/approvals"
	"github.com/guard-mcp/guard/store"
	"github.com/guard-mcp/guard/web"
)

// The audit benchmark builds a log of many calls straight into a store,
// through the code every call's records go through (the journal, the
// ingester, the call index), then times what analysts do with it: guard
// audit query's default query, each filter alone, a text search, and the
// Activity page over HTTP.

// AuditConfig configures RunAudit.
type AuditConfig struct {
	// Dir holds the database (audit.db). One that is there already is
	// queried as it is, not built again.
	Dir string
	// Calls is the number of calls to build.
	Calls int
	// Runs is how many times each query runs; the median is reported.
	Runs int
}

// AuditSample names values of the log that the queries select on.
type AuditSample struct {
	Approval   string // the approval of a held call in the middle of the log
	Person     string // a person who decided held calls
	RareWord   string // a word few calls hold
	CommonWord string // a word many calls hold
	Session    string
}

// The log's vocabulary: servers with their tools, clients, people.
var (
	auditServers = []struct {
		name  string
		tools []string
	}{
		{"files", []string{"read_file", "write_file", "list_directory", "delete_file"}},
		{"db", []string{"query", "execute", "drop_table"}},
		{"web", []string{"fetch", "search"}},
		{"git", []string{"status", "diff", "commit", "push"}},
		{"mail", []string{"read_inbox", "send_email"}},
		{"shell", []string{"run_command"}},
	}
	auditClients = []string{"claude-desktop/0.9.2", "cursor/1.2.0", "ci-bot", "vscode-copilot/1.98", "zed/0.180", "support-agent"}
	auditPeople  = []string{"alice@example.com", "bob@example.com", "carol@example.com"}
	// The users the front authenticated for the calls of support-agent,
	// the one client that logs in with an access token.
	auditUsers = []guard.Identity{
		{Subject: "u-7f3a", Email: "dana@example.com", Groups: []string{"support"}},
		{Subject: "u-91c2", Email: "eli@example.com", Groups: []string{"support", "sre"}},
		{Subject: "u-05be", Email: "fay@example.com", Groups: []string{"contractors"}},
	}
	// Words that arguments and results are made of; with rand's Zipf
	// draw, the first are common and the last rare.
	auditWords = func() []string {
		head := []string{"report", "customer", "invoice", "config", "deploy", "error", "user", "orders", "staging",
			"production", "backup", "password", "token", "release", "migration", "schema", "index", "cache"}
		syll := []string{"ka", "lo", "mi", "ru", "te", "zan", "por", "vel", "dri", "qu", "sen", "tor", "bal", "nix", "fer", "gol"}
		words := slices.Clone(head)
		for _, a := range syll {
			for _, b := range syll {
				for _, c := range syll[:8] {
					words = append(words, a+b+c)
				}
			}
		}
		return words
	}()
)

// BuildAuditLog appends calls to the database at path (created), spread
// over the 30 days before now, and returns values to query for. Most
// calls are allowed; some are denied by rules; calls to destructive tools
// are held, and a person approves or denies them (a decision record with
// the approval's id) or they expire. progress, when not nil, gets a line
// every 100,000 calls.
func BuildAuditLog(ctx context.Context, path string, calls int, now time.Time, progress io.Writer) (AuditSample, error) {
	var s AuditSample
	db, err := store.Open(ctx, store.Options{Path: path, Durability: "normal"})
	if err != nil {
		return s, err
	}
	rng := rand.New(rand.NewPCG(1, 2))
	zipf := rand.NewZipf(rng, 1.1, 2, uint64(len(auditWords)-1))
	text := func(n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(auditWords[zipf.Uint64()])
		}
		return b.String()
	}
	span := 30 * 24 * time.Hour
	start := now.Add(-span)
	step := span / time.Duration(max(calls, 1))
	began := time.Now()
	s.CommonWord, s.RareWord = auditWords[0], auditWords[len(auditWords)-7]
	for i := range calls {
		if i%1024 == 0 && ctx.Err() != nil {
			db.Close()
			return s, ctx.Err()
		}
		srv := auditServers[rng.IntN(len(auditServers))]
		tool := srv.tools[rng.IntN(len(srv.tools))]
		client := auditClients[rng.IntN(len(auditClients))]
		at := start.Add(time.Duration(i)*step + time.Duration(rng.IntN(100))*time.Millisecond)
		callID := guard.NewID()
		session := fmt.Sprintf("%s-session-%d", client, i/5000)
		args := fmt.Sprintf(`{"path":"/srv/%s/%s.json","query":"%s","limit":%d}`, text(1), text(1), text(4), rng.IntN(500))
		if i == calls/2 {
			args = fmt.Sprintf(`{"path":"/srv/%s/%s.json","query":"%s"}`, s.RareWord, text(1), text(3))
		}
		req := &guard.Record{CallID: callID, Kind: guard.KindRequest, Time: at, Session: session, Client: client,
			Protocol: "2025-06-18", Server: srv.name, Direction: guard.ClientToServer, Method: "tools/call", Tool: tool,
			Arguments: args, Decision: guard.DecisionAllowed, DecidedBy: "default", RequestSize: int64(len(args) + 80)}
		out := &guard.Record{CallID: callID, Kind: guard.KindOutcome, Time: at.Add(time.Duration(5+rng.IntN(400)) * time.Millisecond),
			Session: session, Client: client, Protocol: req.Protocol, Server: srv.name, Direction: req.Direction,
			Method: req.Method, Tool: tool, Outcome: guard.OutcomeOK}
		var user guard.Identity
		if client == "support-agent" {
			user = auditUsers[i%len(auditUsers)]
		}
		recs := []*guard.Record{req, out}
		switch {
		case tool == "delete_file" || tool == "drop_table" || (tool == "run_command" || tool == "send_email") && rng.IntN(5) == 0:
			// Held: the client is told to come back; a person decides
			// later, or no one does and the approval expires.
			appr := guard.NewID()
			req.Decision, req.DecidedBy, req.Reason, req.Approval = guard.DecisionHeld, "destructive-needs-approval", "a destructive tool", appr
			out.Outcome, out.DurationMS = guard.OutcomeAwaitingApproval, 50000
			dec := &guard.Record{CallID: callID, Kind: guard.KindDecision, Time: out.Time.Add(time.Duration(1+rng.IntN(600)) * time.Second),
				Session: session, Client: client, Server: srv.name, Method: req.Method, Tool: tool, Approval: appr}
			switch p := rng.IntN(20); {
			case p < 12:
				dec.Decision, dec.DecidedBy, dec.Reason = guard.DecisionAllowed, auditPeople[p%3], "checked with the owner"
			case p < 17:
				dec.Decision, dec.DecidedBy, dec.Reason = guard.DecisionDenied, auditPeople[p%3], "not during the freeze"
			default:
				dec.Decision, dec.DecidedBy, dec.Reason = guard.DecisionDenied, "expiry", "no one decided in time"
			}
			recs = append(recs, dec)
			if s.Approval == "" && i >= calls/2 {
				s.Approval, s.Person, s.Session = appr, auditPeople[0], session
			}
		case tool == "push" && rng.IntN(2) == 0, tool == "execute" && rng.IntN(10) == 0:
			req.Decision, req.DecidedBy, req.Reason = guard.DecisionDenied, "no-writes-to-production", "a write to production"
			out.Outcome, out.Result = guard.OutcomeDenied, `{"isError":true,"content":[{"type":"text","text":"Denied by guard policy"}]}`
		default:
			switch p := rng.IntN(100); {
			case p < 93:
				out.Result = fmt.Sprintf(`{"content":[{"type":"text","text":"%s"}]}`, text(12))
			case p < 98:
				out.Outcome, out.Result = guard.OutcomeToolError, fmt.Sprintf(`{"isError":true,"content":[{"type":"text","text":"%s failed: %s"}]}`, tool, text(5))
			case p < 99:
				out.Outcome = guard.OutcomeUpstreamFailed
			default:
				out.Outcome = guard.OutcomeCancelled
			}
			out.DurationMS = int64(out.Time.Sub(at) / time.Millisecond)
		}
		out.Decision, out.DecidedBy, out.Reason = req.Decision, req.DecidedBy, req.Reason
		out.ResponseSize = int64(len(out.Result) + 60)
		for _, r := range recs {
			r.User, r.UserEmail, r.UserGroups = user.Subject, user.Email, user.Groups
		}
		if err := <-db.AppendAsync(recs...); err != nil {
			db.Close()
			return s, fmt.Errorf("call %d: %w", i, err)
		}
		if progress != nil && (i+1)%100000 == 0 {
			fmt.Fprintf(progress, "  %d calls appended (%.0f calls/s)\n", i+1, float64(i+1)/time.Since(began).Seconds())
		}
	}
	if err := db.Close(); err != nil {
		return s, err
	}
	return s, nil
}

// QueryTiming is one query's figures.
type QueryTiming struct {
	Name          string
	Rows          int
	First, Median time.Duration
}

// AuditFigures are what RunAudit measured.
type AuditFigures struct {
	Calls   int
	Build   time.Duration // 0 when the database was there already
	Size    int64         // the database's bytes
	Queries []QueryTiming
	Pages   []QueryTiming
}

// RunAudit builds (or reuses) an audit log of cfg.Calls calls and times
// queries and the Activity page on it, writing a table to out.
func RunAudit(ctx context.Context, cfg AuditConfig, out io.Writer) (*AuditFigures, error) {
	if cfg.Runs < 1 {
		cfg.Runs = 5
	}
	path := filepath.Join(cfg.Dir, "audit.db")
	fig := &AuditFigures{Calls: cfg.Calls}
	now := time.Now().UTC().Truncate(time.Hour)
	_, statErr := os.Stat(path)
	var sample AuditSample
	if errors.Is(statErr, os.ErrNotExist) {
		fmt.Fprintf(out, "building an audit log of %d calls in %s\n", cfg.Calls, path)
		start := time.Now()
		var err error
		if sample, err = BuildAuditLog(ctx, path, cfg.Calls, now, out); err != nil {
			return nil, fmt.Errorf("audit log: %w", err)
		}
		fig.Build = time.Since(start)
		fmt.Fprintf(out, "built in %v (%.0f calls/s)\n", fig.Build.Round(time.Millisecond), float64(cfg.Calls)/fig.Build.Seconds())
	} else {
		fmt.Fprintf(out, "querying the audit log already in %s\n", path)
	}
	for _, p := range []string{path, path + "-wal"} {
		if st, err := os.Stat(p); err == nil {
			fig.Size += st.Size()
		}
	}
	db, err := store.OpenReadOnly(ctx, store.Options{Path: path})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if sample.Approval == "" {
		if sample, err = findSample(ctx, db); err != nil {
			return nil, err
		}
	}
	var calls int64
	_ = db.Reader().Query(ctx, store.Filter{Limit: 1}, func(*store.Call) error { calls++; return nil })
	since := now.Add(-time.Hour)
	filters := []struct {
		name string
		f    store.Filter
	}{
		{"default (newest 100)", store.Filter{}},
		{"--server db", store.Filter{Server: "db"}},
		{"--tool drop_table", store.Filter{Tool: "drop_table"}},
		{"--client support-agent", store.Filter{Client: "support-agent"}},
		{"--user " + auditUsers[0].Email, store.Filter{User: auditUsers[0].Email}},
		{"--user " + auditUsers[1].Subject, store.Filter{User: auditUsers[1].Subject}},
		{"--session " + sample.Session, store.Filter{Session: sample.Session}},
		{"--decision denied", store.Filter{Decision: guard.DecisionDenied}},
		{"--decision held (none left)", store.Filter{Decision: guard.DecisionHeld}},
		{"--decided-by " + sample.Person, store.Filter{DecidedBy: sample.Person}},
		{"--outcome upstream_failed", store.Filter{Outcome: guard.OutcomeUpstreamFailed}},
		{"--outcome input_required (none)", store.Filter{Outcome: guard.OutcomeInputRequired}},
		{"--approval " + sample.Approval, store.Filter{Approval: sample.Approval}},
		{"--since 1h", store.Filter{Since: since}},
		{"--until 15d ago", store.Filter{Until: now.Add(-15 * 24 * time.Hour)}},
		{"--text " + sample.CommonWord + " (common)", store.Filter{Text: sample.CommonWord}},
		{"--text " + sample.RareWord + " (rare)", store.Filter{Text: sample.RareWord}},
		{"--text \"" + auditWords[1] + " " + auditWords[2] + "\" (two words)", store.Filter{Text: auditWords[1] + " " + auditWords[2]}},
		{"--text nosuchword", store.Filter{Text: "nosuchword"}},
		{"--server db --decision denied", store.Filter{Server: "db", Decision: guard.DecisionDenied}},
	}
	for _, q := range filters {
		f := q.f
		f.Limit = 100
		t, err := timeRuns(cfg.Runs, func() (int, error) {
			n := 0
			err := db.Reader().Query(ctx, f, func(*store.Call) error { n++; return nil })
			return n, err
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", q.name, err)
		}
		t.Name = q.name
		fig.Queries = append(fig.Queries, t)
	}
	if fig.Pages, err = timeActivity(ctx, db, cfg.Runs, sample); err != nil {
		return nil, fmt.Errorf("activity page: %w", err)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(out, "\naudit log: %d calls, %.0f MB; each query %d times (target: a query ≤ 100 ms, the page ≤ 200 ms)\n",
		cfg.Calls, float64(fig.Size)/(1<<20), cfg.Runs)
	fmt.Fprintln(tw, "query\trows\tfirst\tmedian\t")
	for _, q := range fig.Queries {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t\n", q.Name, q.Rows, ms(q.First), ms(q.Median))
	}
	fmt.Fprintln(tw, "Activity page (HTTP)\trows\tfirst\tmedian\t")
	for _, q := range fig.Pages {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t\n", q.Name, q.Rows, ms(q.First), ms(q.Median))
	}
	return fig, tw.Flush()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// timeRuns runs fn n times and returns the first run's time and the
// median's.
func timeRuns(n int, fn func() (int, error)) (QueryTiming, error) {
	var t QueryTiming
	var ds []time.Duration
	for range n {
		start := time.Now()
		rows, err := fn()
		if err != nil {
			return t, err
		}
		ds = append(ds, time.Since(start))
		t.Rows = rows
	}
	t.First = ds[0]
	slices.Sort(ds)
	t.Median = ds[len(ds)/2]
	return t, nil
}

// findSample reads values to query for from a log built before.
func findSample(ctx context.Context, db *store.DB) (AuditSample, error) {
	s := AuditSample{CommonWord: auditWords[0], RareWord: auditWords[len(auditWords)-7]}
	err := db.Reader().Query(ctx, store.Filter{DecidedBy: auditPeople[0], Limit: 1}, func(c *store.Call) error {
		s.Approval, s.Person, s.Session = c.Approval, c.DecidedBy, c.Session
		return nil
	})
	if err == nil && s.Approval == "" {
		err = errors.New("the log has no call decided by a person")
	}
	return s, err
}

// timeActivity serves the UI over the database and times the Activity
// page: the newest calls, filtered, a text search, and an older page.
func timeActivity(ctx context.Context, db *store.DB, runs int, s AuditSample) ([]QueryTiming, error) {
	const token = "bench-token"
	ts := httptest.NewUnstartedServer(nil)
	ui, err := web.New(web.Options{Store: db, Calls: db.Reader(), Holds: db.Holds(), Tools: db.Catalog(), Decider: approvals.New(db.Holds(), approvals.Options{}), Token: token,
		AllowedHosts: []string{ts.Listener.Addr().String()}})
	if err != nil {
		return nil, err
	}
	ts.Config.Handler = ui
	ts.Start()
	defer ts.Close()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string) (string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+path, nil)
		if err != nil {
			return "", err
		}
		res, err := c.Do(req)
		if err != nil {
			return "", err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err == nil && res.StatusCode >= 400 {
			err = fmt.Errorf("GET %s: %s", path, res.Status)
		}
		return string(b), err
	}
	if _, err := get("/login?token=" + token); err != nil {
		return nil, err
	}
	body, err := get("/activity")
	if err != nil {
		return nil, err
	}
	older := ""
	if i := strings.Index(body, `href="/activity?before=`); i >= 0 {
		older = body[i+len(`href="`):]
		older = strings.ReplaceAll(older[:strings.IndexByte(older, '"')], "&amp;", "&")
	}
	pages := []struct{ name, path string }{
		{"/activity", "/activity"},
		{"?server=db&decision=denied", "/activity?server=db&decision=denied"},
		{"?decided_by=" + s.Person, "/activity?decided_by=" + url.QueryEscape(s.Person)},
		{"?text=" + s.CommonWord, "/activity?text=" + url.QueryEscape(s.CommonWord)},
		{"?approval=…", "/activity?approval=" + url.QueryEscape(s.Approval)},
	}
	if older != "" {
		pages = append(pages, struct{ name, path string }{"older page", older})
	}
	var out []QueryTiming
	for _, p := range pages {
		t, err := timeRuns(runs, func() (int, error) {
			b, err := get(p.path)
			return strings.Count(b, "data-call-id="), err
		})
		if err != nil {
			return nil, err
		}
		t.Name = p.name
		out = append(out, t)
	}
	return out, nil
}
