package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/approvals"
	"github.com/guard-mcp/guard/config/read"
	"github.com/guard-mcp/guard/store"
)

// pageData is what every full page carries.
type pageData struct {
	Title string
	Page  string // pending, changes, activity, tools, call, name
	Name  string // the approver's name, "" until given
	Via   string // how the approver's identity was verified, "" for a typed name
	// Passkey says that every decision needs the approver's passkey.
	Passkey bool
	CSRF    string
	Flash   string
	Nav     navData
	// Verify is the last scheduled verification of the audit log when it
	// failed (a banner on every page), else nil.
	Verify *store.Verification
}

// navData is the navigation bar with its counts.
type navData struct {
	Page    string
	Pending int
	Changes int
	Config  int // 1 when a configuration change waits for a person
}

// hintView is one annotation of a tool, as pinned.
type hintView struct {
	Name string // readOnlyHint, ...
	On   bool   // its value, defaults filled in
	Set  bool   // declared by the server (else the specification's default)
	// NA: the hint means nothing for this tool. The specification gives
	// destructiveHint and idempotentHint meaning only when readOnlyHint
	// is false: a read-only tool neither destroys nor repeats anything.
	NA bool
}

func (h hintView) Text() string {
	v := "false"
	if h.On {
		v = "true"
	}
	if h.NA {
		if h.Set {
			return h.Name + ": " + v + ", ignored (read-only)"
		}
		return h.Name + ": does not apply (read-only)"
	}
	s := h.Name + ": " + v
	if !h.Set {
		s += " (default)"
	}
	return s
}

func hints(a guard.Annotations) []hintView {
	ro, de, id, ow := a.Effective()
	return []hintView{
		{"readOnlyHint", ro, a.ReadOnlyHint != nil, false},
		{"destructiveHint", de, a.DestructiveHint != nil, ro},
		{"idempotentHint", id, a.IdempotentHint != nil, ro},
		{"openWorldHint", ow, a.OpenWorldHint != nil, false},
	}
}

// cardView is one pending call.
type cardView struct {
	ID, Server, Tool, Client string
	Rule, HeldReason         string
	Args                     string // pretty-printed, complete
	Pin                      string
	Hints                    []hintView
	ToolKnown                bool
	PinChanged               bool // the tool's latest definition is not the one the call was held on
	ToolReview               bool // held for a review of the tool's definition
	// Kept, for a call held for a review, says that the definition was
	// accepted without releasing it (approvals.KeptAfterReview): it
	// needs its own decision.
	Kept             string
	Created, Expires time.Time
	Left             string
	Rules            rulesView
	// Caller is where the call's client stands: CallerWaiting (its call
	// blocks, for at most approval.wait), CallerRetry (it was told to
	// retry at Told; the hold stays open until Expires, approval.timeout)
	// or CallerGone (its session ended at Told).
	Caller string
	Told   time.Time
	Scope  string // which repeated call an approval lets through
	// Gone says, near the buttons, that approving a hold whose client
	// has gone does not run the call (approvals.ClientGoneText).
	Gone string
}

// Where a held call's client stands, as the pending page says it.
const (
	CallerWaiting = "waiting"
	CallerRetry   = "told-to-retry"
	CallerGone    = "gone"
)

// views reads from the store what the pages and fragments show, apart
// from serving them (the Server's handlers) and from the live updates.
type views struct {
	opts     *Options  // the Server's
	passkeys *passkeys // nil without passkeys: decisions then need none
}

// pendingView is the pending page's list.
type pendingView struct {
	Cards       []cardView
	CSRF        string
	Named       bool
	AllowAlways bool
	// Undelivered says which receivers of the announcements of new holds
	// are failing (the page alone shows it, not its live fragment).
	Undelivered []string
}

func (s *views) pendingView(ctx context.Context, sess session) (pendingView, error) {
	list, err := s.opts.Holds.Approvals(ctx, guard.ApprovalPending)
	if err != nil {
		return pendingView{}, fmt.Errorf("pending approvals: %w", err)
	}
	tools := map[string]map[string]guard.Tool{}
	now := s.opts.Now()
	v := pendingView{Cards: make([]cardView, 0, len(list)), CSRF: sess.csrf, Named: sess.named(),
		AllowAlways: s.opts.AllowAlways != nil}
	calls, err := s.heldCalls(ctx, list)
	if err != nil {
		return pendingView{}, err
	}
	reviews, err := s.reviewsOf(ctx, list)
	if err != nil {
		return pendingView{}, err
	}
	for _, a := range list {
		byName, ok := tools[a.Server]
		if !ok {
			ts, err := s.opts.Tools.Tools(ctx, a.Server)
			if err != nil {
				return pendingView{}, fmt.Errorf("tools of %s: %w", a.Server, err)
			}
			byName = make(map[string]guard.Tool, len(ts))
			for _, t := range ts {
				byName[t.Name] = t
			}
			tools[a.Server] = byName
		}
		c := cardView{ID: a.ID, Server: a.Server, Tool: a.Tool, Client: a.Client, Rule: a.Rule,
			HeldReason: a.HeldReason, Args: prettyJSON(a.Arguments), Pin: a.Pin,
			ToolReview: a.Rule == guard.ToolReviewRule, Created: a.CreatedAt, Expires: a.ExpiresAt,
			Left: timeLeft(a.ExpiresAt.Sub(now)), Rules: rulesOf(a, sess, s.passkeys != nil), Scope: a.Scope, Gone: approvals.ClientGoneText(a, fmtTime)}
		callerOf(a, calls, &c)
		if c.ToolReview {
			c.Kept = approvals.KeptAfterReview(a, reviews[[3]string{a.Server, a.Tool, a.Pin}], fmtTime)
		}
		if t, ok := byName[a.Tool]; ok {
			c.ToolKnown = true
			c.Hints = hints(t.Annotations)
			c.PinChanged = a.Pin != "" && t.Pin != a.Pin
		}
		v.Cards = append(v.Cards, c)
	}
	return v, nil
}

// heldCalls reads the calls of pending approvals whose client did not go,
// by id, in one query (a query per card made a page of many slow).
func (s *views) heldCalls(ctx context.Context, list []*guard.Approval) (map[string]*store.Call, error) {
	calls := map[string]*store.Call{}
	var ids []string
	for _, a := range list {
		if a.SessionEnded.IsZero() {
			ids = append(ids, heldCallID(a))
		}
	}
	err := inChunks(ids, func(ids []string) error {
		return s.opts.Calls.Query(ctx, store.Filter{IDs: ids}, func(c *store.Call) error {
			calls[c.ID] = c
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("held calls: %w", err)
	}
	return calls, nil
}

// inChunks calls fn with the ids a thousand at a time: a query that
// takes ids takes at most that many, and a page may name more.
func inChunks(ids []string, fn func([]string) error) error {
	for len(ids) > 0 {
		n := min(len(ids), 1000)
		if err := fn(ids[:n]); err != nil {
			return err
		}
		ids = ids[n:]
	}
	return nil
}

// reviewsOf reads the reviews of tool definitions by server, name and pin,
// in one query, when a call among list is held for one.
func (s *views) reviewsOf(ctx context.Context, list []*guard.Approval) (map[[3]string]*guard.Review, error) {
	if !slices.ContainsFunc(list, func(a *guard.Approval) bool { return a.Rule == guard.ToolReviewRule }) {
		return nil, nil
	}
	return s.reviewsByPin(ctx)
}

// reviewsByPin reads every review of a tool definition, by server, name
// and pin.
func (s *views) reviewsByPin(ctx context.Context) (map[[3]string]*guard.Review, error) {
	rs, err := s.opts.Tools.Reviews(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("tool reviews: %w", err)
	}
	byPin := make(map[[3]string]*guard.Review, len(rs))
	for _, r := range rs {
		byPin[[3]string{r.Server, r.Name, r.Pin}] = r
	}
	return byPin, nil
}

// heldCallID is the id of an approval's held call.
func heldCallID(a *guard.Approval) string {
	if a.CallID == "" {
		return a.ID
	}
	return a.CallID
}

// callerOf finds where a held call's client stands: a call answered
// "retry" (approval.wait passed) has its outcome recorded, awaiting
// approval; one still blocking has none yet. calls are the held calls
// by id (heldCalls).
func callerOf(a *guard.Approval, calls map[string]*store.Call, c *cardView) {
	if !a.SessionEnded.IsZero() {
		c.Caller, c.Told = CallerGone, a.SessionEnded
		return
	}
	c.Caller = CallerWaiting
	if told, ok := toldAt(calls[heldCallID(a)]); ok {
		c.Caller, c.Told = CallerRetry, told
	}
}

// timeLeft writes the time until an expiry.
func timeLeft(d time.Duration) string {
	if d <= 0 {
		return "expired"
	}
	return guard.HumanDuration(d.Truncate(time.Second)) + " left"
}

// prettyJSON indents JSON text for people; text that is not JSON is shown
// as it is.
func prettyJSON(s string) string {
	if strings.TrimSpace(s) == "" {
		return ""
	}
	var b bytes.Buffer
	if err := json.Indent(&b, []byte(s), "", "  "); err != nil {
		return s
	}
	return b.String()
}

// reviewView is one tool definition waiting for a person.
type reviewView struct {
	Server, Name, Pin, Cause string
	Created                  time.Time
	Current                  bool // the server's latest definition of the tool
	Flags                    []guard.Flag
	Changes                  []guard.Change
	Diff                     []diffLine
	OldPin                   string
	Def                      string // the definition, indented
	HeldCalls                int
	// Releases says whether accepting releases the held calls to the
	// rules (approvals.ReleasesHeld); KeptWhy, when it does not, why.
	Releases bool
	KeptWhy  string
}

// AcceptText says, before the Accept button, what accepting does with the
// calls held for the definition.
func (r reviewView) AcceptText() string {
	switch {
	case r.HeldCalls == 0:
		return "No call is held for it: accepting lets later calls of it go on to the rules, which judge them by this definition."
	case r.Releases:
		return "Accepting releases " + heldCallsText(r.HeldCalls) + " to the rules."
	}
	return "Accepting does not release " + heldCallsText(r.HeldCalls) + ": " + r.KeptWhy +
		"; each needs its own decision on the Pending page."
}

// heldCallsText names the calls held for a definition.
func heldCallsText(n int) string {
	if n == 1 {
		return "the call held for it"
	}
	return "the " + itoa(n) + " calls held for it"
}

// diffLine is one line of a line diff: Op is "+", "-" or " ".
type diffLine struct {
	Op   string
	Text string
}

func (d diffLine) Class() string {
	switch d.Op {
	case "+":
		return "add"
	case "-":
		return "del"
	}
	return "same"
}

type changesView struct {
	Reviews []reviewView
	CSRF    string
	Named   bool
}

func (s *views) changesView(ctx context.Context, sess session) (changesView, error) {
	v := changesView{CSRF: sess.csrf, Named: sess.name != ""}
	reviews, err := s.opts.Tools.Reviews(ctx, "")
	if err != nil {
		return v, fmt.Errorf("tool reviews: %w", err)
	}
	var pending []*guard.Review
	servers := map[string]bool{}
	for _, r := range reviews {
		if r.State == guard.ReviewPending {
			pending = append(pending, r)
			servers[r.Server] = true
		}
	}
	if len(pending) == 0 {
		return v, nil
	}
	latest := map[[2]string]string{} // server, name → pin of the latest definition
	for srv := range servers {
		ts, err := s.opts.Tools.Tools(ctx, srv)
		if err != nil {
			return v, fmt.Errorf("tools of %s: %w", srv, err)
		}
		for _, t := range ts {
			latest[[2]string{t.Server, t.Name}] = t.Pin
		}
	}
	held, err := s.opts.Holds.Approvals(ctx, guard.ApprovalPending)
	if err != nil {
		return v, fmt.Errorf("pending approvals: %w", err)
	}
	for _, r := range pending {
		rv := reviewView{Server: r.Server, Name: r.Name, Pin: r.Pin, Cause: r.Cause, Created: r.CreatedAt,
			Flags: r.Flags, Current: latest[[2]string{r.Server, r.Name}] == r.Pin}
		for _, a := range held {
			if approvals.HeldForReview(a, r.Server, r.Name, r.Pin) {
				rv.HeldCalls++
			}
		}
		cur, err := s.opts.Tools.ToolByPin(ctx, r.Server, r.Name, r.Pin)
		if err != nil {
			return v, fmt.Errorf("definition of %s/%s: %w", r.Server, r.Name, err)
		}
		old, err := s.opts.Tools.AcceptedTool(ctx, r.Server, r.Name)
		if err != nil {
			return v, fmt.Errorf("accepted definition of %s/%s: %w", r.Server, r.Name, err)
		}
		if cur != nil {
			rv.Def = prettyJSON(string(cur.Def))
			if old != nil && old.Pin != cur.Pin {
				rv.OldPin = old.Pin
				rv.Changes = guard.DiffTools(old.Def, cur.Def)
				rv.Diff = parseDiff(guard.LineDiff(old.Def, cur.Def))
			}
		}
		rv.Releases, rv.KeptWhy = approvals.ReleasesHeld(rv.Changes, r)
		v.Reviews = append(v.Reviews, rv)
	}
	return v, nil
}

// parseDiff splits guard.LineDiff's text into lines.
func parseDiff(text string) []diffLine {
	var out []diffLine
	for _, l := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if l == "" {
			continue
		}
		op, rest := " ", l
		if len(l) >= 2 {
			op, rest = l[:1], l[2:]
		}
		out = append(out, diffLine{Op: op, Text: rest})
	}
	return out
}

// configView is the configuration change page: the change that waits
// for a person, if any.
type configView struct {
	Change  *store.ConfigChange // nil when none waits
	Lines   []string            // what changed, one line each
	CSRF    string
	Named   bool
	Problem string // why a decision was refused
}

func (s *views) configView(ctx context.Context, sess session) (configView, error) {
	v := configView{CSRF: sess.csrf, Named: sess.name != ""}
	c, err := s.opts.Store.Configs().PendingConfigChange(ctx)
	if err != nil {
		return v, fmt.Errorf("pending configuration change: %w", err)
	}
	v.Change = c
	if c != nil && c.Summary != "" {
		v.Lines = strings.Split(c.Summary, "\n")
	}
	return v, nil
}

// toolView is one tool of a server, as the catalog holds it.
type toolView struct {
	Name, Pin   string
	Hints       []hintView
	State       string // review state of the latest definition, "" when never reviewed
	Cause       string
	DecidedBy   string
	Flags       []guard.Flag
	Description string
	Policy      string // what the policy does with a call to it
}

type serverView struct {
	Name  string
	Tools []toolView
}

func (s *views) toolsView(ctx context.Context) ([]serverView, error) {
	tools, err := s.opts.Tools.Tools(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("tools: %w", err)
	}
	byPin, err := s.reviewsByPin(ctx)
	if err != nil {
		return nil, err
	}
	var out []serverView
	for _, t := range tools {
		if len(out) == 0 || out[len(out)-1].Name != t.Server {
			out = append(out, serverView{Name: t.Server})
		}
		tv := toolView{Name: t.Name, Pin: t.Pin, Hints: hints(t.Annotations), Description: description(t.Def)}
		r := byPin[[3]string{t.Server, t.Name, t.Pin}]
		if r != nil {
			tv.State, tv.Cause, tv.DecidedBy, tv.Flags = r.State, r.Cause, r.DecidedBy, r.Flags
		}
		if s.opts.Explain != nil {
			tv.Policy = s.opts.Explain(t, r)
		}
		sv := &out[len(out)-1]
		sv.Tools = append(sv.Tools, tv)
	}
	return out, nil
}

func description(def json.RawMessage) string {
	var d struct {
		Title       string `json:"title"`
		Description string `json:"description"`
	}
	_ = json.Unmarshal(def, &d)
	if d.Title != "" && d.Description != "" {
		return d.Title + ": " + d.Description
	}
	return d.Title + d.Description
}

// activityFilter is the activity page's query, as typed: every value is
// shown back in the form and carried in the paging links.
type activityFilter struct {
	Server, Tool, Decision, Outcome, Since, Until, Limit string
	Client, User, Session, DecidedBy, Approval, Text     string
	Before, After                                        string // paging: a call's key
	Err                                                  string // a filter that could not be read
	Bad                                                  bool   // one that cannot be ignored: nothing is shown
}

// activityParams are the query parameters of the activity filter, in the
// order its links carry them.
var activityParams = []string{"server", "tool", "client", "user", "session", "decision", "decided_by", "outcome",
	"approval", "text", "since", "until", "limit"}

// readFilter reads the activity filter from a query, into a store.Filter.
func (s *views) readFilter(q url.Values) (activityFilter, store.Filter) {
	get := func(k string) string { return strings.TrimSpace(q.Get(k)) }
	af := activityFilter{Server: get("server"), Tool: get("tool"), Decision: get("decision"), Outcome: get("outcome"),
		Since: get("since"), Until: get("until"), Limit: get("limit"), Client: get("client"), User: get("user"), Session: get("session"),
		DecidedBy: get("decided_by"), Approval: get("approval"), Text: get("text"), Before: get("before"), After: get("after")}
	f := store.Filter{Server: af.Server, Tool: af.Tool, Decision: af.Decision, Outcome: af.Outcome, Client: af.Client,
		User: af.User, Session: af.Session, DecidedBy: af.DecidedBy, Approval: af.Approval, Text: af.Text, Limit: s.opts.ActivityLimit}
	var errs []string
	for _, e := range []struct {
		name, v string
		allowed []string
	}{{"decision", af.Decision, decisions()}, {"outcome", af.Outcome, outcomes()}} {
		if e.v != "" && !slices.Contains(e.allowed, e.v) {
			errs = append(errs, fmt.Sprintf("%s %q: want one of %s", e.name, e.v, strings.Join(e.allowed, ", ")))
			af.Bad = true
		}
	}
	if af.Text != "" {
		if _, err := store.MatchExpr(af.Text); err != nil {
			errs = append(errs, fmt.Sprintf("text %q: %v", af.Text, err))
			af.Bad = true
		}
	}
	for _, t := range []struct {
		name, v string
		to      *time.Time
	}{{"since", af.Since, &f.Since}, {"until", af.Until, &f.Until}} {
		if t.v == "" {
			continue
		}
		v, err := read.ParseSince(t.v, s.opts.Now())
		if err != nil {
			// Without the bound the page would show calls outside the
			// period asked for: nothing is shown.
			errs = append(errs, t.name+" "+err.Error())
			af.Bad = true
			continue
		}
		*t.to = v
	}
	if af.Limit != "" {
		n, err := strconv.Atoi(af.Limit)
		if err != nil || n <= 0 || n > 10000 {
			errs = append(errs, fmt.Sprintf("limit %q: want a number from 1 to 10000", af.Limit))
		} else {
			f.Limit = n
		}
	}
	for _, c := range []struct {
		name, v string
		to      *int64
	}{{"before", af.Before, &f.Before}, {"after", af.After, &f.After}} {
		if c.v == "" {
			continue
		}
		n, err := strconv.ParseInt(c.v, 10, 64)
		if err != nil || n <= 0 {
			errs = append(errs, fmt.Sprintf("%s %q: not a page of this log", c.name, c.v))
			continue
		}
		*c.to = n
	}
	af.Err = strings.Join(errs, "; ")
	return af, f
}

// link is the activity page with this filter and a page of it (before or
// after a call's key; none for the newest).
func (af activityFilter) link(cursor string, key int64) string {
	v := url.Values{}
	for i, x := range []string{af.Server, af.Tool, af.Client, af.User, af.Session, af.Decision, af.DecidedBy, af.Outcome,
		af.Approval, af.Text, af.Since, af.Until, af.Limit} {
		if x != "" {
			v.Set(activityParams[i], x)
		}
	}
	if cursor != "" {
		v.Set(cursor, strconv.FormatInt(key, 10))
	}
	if len(v) == 0 {
		return "/activity"
	}
	return "/activity?" + v.Encode()
}

type activityView struct {
	Filter activityFilter
	Calls  []*store.Call
	// Approvals are the approvals the calls name, each with every call
	// that names it, by id: what became of each held call.
	Approvals map[string]approvalCalls
	Now       time.Time
	Limit     int
	// Newer and Older are the links to the next pages ("" when there is
	// none).
	Newer, Older string
}

func (s *views) activityView(ctx context.Context, q url.Values) (activityView, error) {
	af, f := s.readFilter(q)
	v := activityView{Filter: af, Limit: f.Limit, Now: s.opts.Now()}
	if af.Bad {
		return v, nil
	}
	// One call more than shown says whether there is another page.
	limit := f.Limit
	f.Limit++
	err := s.opts.Calls.Query(ctx, f, func(c *store.Call) error {
		v.Calls = append(v.Calls, c)
		return nil
	})
	if err != nil {
		return v, fmt.Errorf("activity: %w", err)
	}
	more := len(v.Calls) > limit
	newer := f.After != 0 && f.Before == 0 // paging towards the newest
	if more && newer {
		v.Calls = v.Calls[1:]
	} else if more {
		v.Calls = v.Calls[:limit]
	}
	switch {
	case len(v.Calls) == 0:
		if f.Before != 0 {
			v.Newer = af.link("after", f.Before-1)
		}
		if f.After != 0 {
			v.Older = af.link("before", f.After+1)
		}
	case newer:
		// The page came from older calls.
		v.Older = af.link("before", v.Calls[len(v.Calls)-1].Key)
		if more {
			v.Newer = af.link("after", v.Calls[0].Key)
		}
	default:
		if f.Before != 0 {
			v.Newer = af.link("after", v.Calls[0].Key)
		}
		if more {
			v.Older = af.link("before", v.Calls[len(v.Calls)-1].Key)
		}
	}
	err = s.approvalsOf(ctx, &v)
	return v, err
}

// approvalsOf reads the approvals that the calls shown name, and every
// call that names them (the held call, the one an approval let through),
// in one query each whatever the number of rows.
func (s *views) approvalsOf(ctx context.Context, v *activityView) error {
	v.Approvals = map[string]approvalCalls{}
	var ids []string
	seen := map[string]bool{}
	for _, c := range v.Calls {
		if c.Approval != "" && !seen[c.Approval] {
			seen[c.Approval] = true
			ids = append(ids, c.Approval)
		}
	}
	err := inChunks(ids, func(ids []string) error {
		list, err := s.opts.Holds.ApprovalsByID(ctx, ids)
		if err != nil {
			return err
		}
		for _, a := range list {
			v.Approvals[a.ID] = approvalCalls{a: a}
		}
		return s.opts.Calls.Query(ctx, store.Filter{Approvals: ids}, func(c *store.Call) error {
			if ac, ok := v.Approvals[c.Approval]; ok {
				ac.calls = append(ac.calls, c)
				v.Approvals[c.Approval] = ac
			}
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("activity: approvals: %w", err)
	}
	return nil
}

// story tells, in one line, what became of a call that names an
// approval; it has no steps for a call that names none known here.
func (v activityView) story(c *store.Call) callStory {
	ac, ok := v.Approvals[c.Approval]
	if !ok {
		return callStory{}
	}
	return storyOf(c, ac, v.Now, false)
}

// approvalState is an approval's decision: an approval used by the call
// it let through was approved.
func approvalState(a *guard.Approval) string {
	if a.State == guard.ApprovalUsed {
		return guard.ApprovalApproved
	}
	return a.State
}

// scopeText says which repeated call an approval lets through.
func scopeText(scope string) string {
	if scope == guard.ScopeAny {
		return "one repeated call of it from any session (approval.scope: any)"
	}
	return "one repeated call of it from the same session only (approval.scope: session)"
}

// callView is one recorded invocation, with its approval when it was held.
type callView struct {
	Call     *store.Call
	Approval *guard.Approval
	Rules    rulesView // the approval's rules and reviews
	Story    callStory // what became of the call, in full
}

// callView reads a call's approval, if it names one (the call held for
// it, the call it let through, or one made again while it was open; a
// call held before approvals were named in its records has its own id),
// and the calls that name it, to tell what became of the call.
func (s *views) callView(ctx context.Context, c *store.Call) (callView, error) {
	v := callView{Call: c}
	id := c.ID
	if c.Approval != "" {
		id = c.Approval
	}
	a, err := s.opts.Holds.Approval(ctx, id)
	if errors.Is(err, guard.ErrNotFound) {
		return v, nil
	}
	if err != nil {
		return v, err
	}
	ac := approvalCalls{a: a}
	err = s.opts.Calls.Query(ctx, store.Filter{Approval: a.ID}, func(c *store.Call) error {
		ac.calls = append(ac.calls, c)
		return nil
	})
	if err != nil {
		return v, fmt.Errorf("the calls of approval %s: %w", a.ID, err)
	}
	v.Approval, v.Rules, v.Story = a, rulesOf(a, sessionOf(ctx), s.passkeys != nil), storyOf(c, ac, s.opts.Now(), true)
	return v, nil
}

// findCall looks up one invocation by its id.
func (s *views) findCall(ctx context.Context, id string) (*store.Call, error) {
	var found *store.Call
	err := s.opts.Calls.Query(ctx, store.Filter{ID: id, Limit: 1}, func(c *store.Call) error {
		found = c
		return nil
	})
	if err != nil {
		return nil, err
	}
	if found == nil {
		return nil, guard.ErrNotFound
	}
	return found, nil
}

// counts are the navigation bar's numbers.
func (s *views) counts(ctx context.Context, pending int) (navData, error) {
	var n navData
	var err error
	if pending < 0 {
		if pending, _, err = s.opts.Holds.CountApprovals(ctx, guard.ApprovalPending); err != nil {
			return n, err
		}
	}
	n.Pending = pending
	if n.Changes, err = s.opts.Tools.CountReviews(ctx, guard.ReviewPending); err != nil {
		return n, err
	}
	c, err := s.opts.Store.Configs().PendingConfigChange(ctx)
	if c != nil {
		n.Config = 1
	}
	return n, err
}

// Formatting helpers for the templates.

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

func isoTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// callTime shows a recorded call's time (RFC 3339 text) for people.
func callTime(s string) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

func shortPin(pin string) string {
	p := strings.TrimPrefix(pin, "sha256:")
	if len(p) > 12 {
		p = p[:12] + "…"
	}
	if p == "" {
		return "-"
	}
	return p
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func itoa(n int) string       { return strconv.Itoa(n) }
func boolText(b bool) string  { return strconv.FormatBool(b) }
func i64toa(n int64) string   { return strconv.FormatInt(n, 10) }
func pathID(id string) string { return url.PathEscape(id) }

// callLabel is what a call was: its tool, else its method.
// callUser names the caller the front authenticated for a call: its
// email where the token had one, else its subject ("" for no one).
func callUser(c *store.Call) string {
	if c.UserEmail != "" {
		return c.UserEmail
	}
	return c.User
}

// userGroups lists the groups of a call's caller, for people.
func userGroups(c *store.Call) string { return strings.Join(c.UserGroups, ", ") }

// anyUser reports whether a call among calls names the caller the front
// authenticated: the activity table then has a column for it.
func anyUser(calls []*store.Call) bool {
	return slices.ContainsFunc(calls, func(c *store.Call) bool { return callUser(c) != "" })
}

func callLabel(c *store.Call) string {
	if c.Tool != "" {
		return c.Tool
	}
	return c.Method
}

// sortedFlags keeps flags in a stable order for display.
func sortedFlags(fs []guard.Flag) []guard.Flag {
	out := append([]guard.Flag(nil), fs...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Where < out[j].Where })
	return out
}

// Known decisions and outcomes, for the activity filter's choices. A
// call decided after its client stopped waiting shows the person's
// decision record's: approved (or denied), expired or withdrawn.
func decisions() []string {
	return []string{guard.DecisionAllowed, guard.DecisionDenied, guard.DecisionHeld,
		guard.ApprovalApproved, guard.ApprovalExpired, guard.ApprovalWithdrawn}
}

func outcomes() []string {
	return []string{guard.OutcomeOK, guard.OutcomeToolError, guard.OutcomeProtocolError, guard.OutcomeDenied,
		guard.OutcomeExpired, guard.OutcomeCancelled, guard.OutcomeInvalid, guard.OutcomeUpstreamFailed,
		guard.OutcomeInputRequired, guard.OutcomeAwaitingApproval}
}

// rulesView is what a held call's approval rules show: who made the call
// (when the front authenticated them), what the approval needs, who has
// approved so far, who still may, and whether this session's person may
// decide on it, with why not.
type rulesView struct {
	Requester string       // "" where no one authenticated (stdio)
	Needs     string       // "2 approvals from members of sre"; "" without approvers
	Verified  bool         // only verified identities may decide
	Via       string       // how they must have been verified, as held: "the approver's passkey (ui.passkey: required)"; "" for any way
	Reviews   []reviewLine // oldest first
	Waiting   string       // what a pending approval still needs
	Refusal   string       // why this session's person cannot decide; "" when they can
	Own       bool         // this session's person made the call
}

// reviewLine is one person's review.
type reviewLine struct {
	Who, Via, Groups, Reason string
	Approve                  bool
	Time                     time.Time
}

// Verb is what the person did.
func (r reviewLine) Verb() string {
	if r.Approve {
		return "approved"
	}
	return "denied"
}

// Note says how guard knew who the person was, and their groups.
func (r reviewLine) Note() string {
	if r.Groups == "" {
		return r.HowVerified()
	}
	return r.HowVerified() + "; groups " + r.Groups
}

// HowVerified says how guard knew who the person was.
func (r reviewLine) HowVerified() string { return viaText(r.Via) }

// viaText says how guard knows who a person is.
func viaText(via string) string {
	switch via {
	case "":
		return "typed name, unverified"
	case guard.ViaOIDC:
		return "verified by the identity provider"
	case guard.ViaPasskey:
		return "verified with a passkey"
	}
	return "verified (" + via + ")"
}

// rulesOf is what a held call's approval needs, and why this session's
// person cannot decide on it, if they cannot. With passkeys (every
// decision in this UI is made with one), a person who typed a name is
// judged as the passkey they will decide with.
func rulesOf(a *guard.Approval, sess session, passkeys bool) rulesView {
	v := rulesView{Requester: a.Caller.Name(), Verified: a.Approvers.NeedsVerified()}
	if !a.Approvers.IsZero() {
		v.Needs = a.Approvers.String()
	}
	v.Via, _ = guard.RequiredViaText(a.RequiredVia)
	for _, r := range a.Reviews {
		v.Reviews = append(v.Reviews, reviewLine{Who: r.By.Name(), Via: r.Via, Groups: strings.Join(r.By.Groups, ", "),
			Reason: r.Reason, Approve: r.Approve, Time: r.Time})
	}
	if a.State == guard.ApprovalPending {
		v.Waiting = approvals.Waiting(a)
		v.Own = sess.user.Same(a.Caller)
		via := sess.via
		if via == "" && passkeys {
			via = guard.ViaPasskey
		}
		switch {
		case !sess.user.IsZero():
			if err := a.MayReview(sess.user, via); err != nil {
				v.Refusal = refusalText(err)
			}
		case a.RequiredVia != "" && via != a.RequiredVia:
			what, where := guard.RequiredViaText(a.RequiredVia)
			v.Refusal = "This call was held where decisions need " + what + ": " + where + "."
		case v.Verified:
			v.Refusal = "This call needs " + v.Needs + ": log in to the UI through the identity provider, or with a passkey, to decide on it. A typed name cannot."
		}
	}
	return v
}

// refusalText is a refused review's error for people: without the
// sentinel's words that lead it (the name it starts with, if it does, is
// left as written).
func refusalText(err error) string {
	t := err.Error()
	for _, p := range []string{guard.ErrNotApprover.Error() + ": ", guard.ErrAlreadyReviewed.Error() + ": "} {
		t = strings.TrimPrefix(t, p)
	}
	return t + "."
}
