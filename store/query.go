package store

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
	"github.com/guard-mcp/guard/store/postgres"
)

// Filter selects invocations for Query; each field set must match.
type Filter struct {
	Since, Until                    time.Time
	Server, Tool, Decision, Outcome string
	Client, Session, DecidedBy      string
	// User selects the calls (and records) of the caller the front
	// authenticated with this subject or this email.
	User string
	// Approval selects the calls with a record that carries this approval
	// id (the request of a held call, its decision, its outcome);
	// Approvals, those with a record that carries one of these (at most
	// maxIDs; with Approval, one of them all): the calls of a page's
	// approvals in one query.
	Approval  string
	Approvals []string
	// Text selects the calls whose redacted arguments or latest result
	// hold these words, as MatchExpr reads them.
	Text string
	// ID selects one call by its id; IDs, the calls with one of these
	// ids (at most maxIDs).
	ID  string
	IDs []string
	// Before and After page through the calls by their keys (Call.Key):
	// only calls older than Before, or newer than After. With After (and
	// no Before), the Limit calls just newer than it, still newest first.
	Before, After int64
	Limit         int // 0: no limit
}

// maxIDs is the most ids Filter.IDs takes: one statement's parameters
// stay well within SQLite's and PostgreSQL's limits.
const maxIDs = 10000

// Call is one row of the calls view: one invocation.
type Call struct {
	ID      string `json:"id"`
	Time    string `json:"time"`
	Session string `json:"session"`
	Client  string `json:"client"`
	// User, UserEmail and UserGroups are the caller the front
	// authenticated for the call's session, from its request record.
	User         string   `json:"user"`
	UserEmail    string   `json:"user_email"`
	UserGroups   []string `json:"user_groups"`
	Protocol     string   `json:"protocol"`
	Server       string   `json:"server"`
	Direction    string   `json:"direction"`
	Method       string   `json:"method"`
	Tool         string   `json:"tool"`
	Arguments    string   `json:"arguments"`
	Pin          string   `json:"pin"`
	Decision     string   `json:"decision"`
	DecidedBy    string   `json:"decided_by"`
	Reason       string   `json:"reason"`
	Approval     string   `json:"approval"`
	Outcome      string   `json:"outcome"`
	Result       string   `json:"result"`
	RequestSize  int64    `json:"request_size"`
	ResponseSize int64    `json:"response_size"`
	DurationMS   int64    `json:"duration_ms"`
	Detail       string   `json:"detail"`
	Hash         string   `json:"hash"`
	// Key orders the calls (their time, then their arrival) and is the
	// cursor Filter.Before and Filter.After take.
	Key int64 `json:"-"`
}

// CallColumns are the calls view's columns, in order.
var CallColumns = []string{"id", "time", "session", "client", "user", "user_email", "user_groups", "protocol", "server", "direction", "method", "tool",
	"arguments", "pin", "decision", "decided_by", "reason", "approval", "outcome", "result", "request_size",
	"response_size", "duration_ms", "detail", "hash"}

// ErrNoWords is returned for a text filter with nothing to search for.
var ErrNoWords = errors.New("no words to search for (a word needs a letter or a digit)")

// MatchExpr turns words as a person types them into an SQLite FTS5 query
// that cannot fail or mean more than they typed: every word is matched
// as it is, FTS5's operators and syntax included (AND, OR, NOT, NEAR,
// parentheses, column filters and ^ are words like any other). A call
// matches when it has all the words, in any order, anywhere in its
// arguments or result, ignoring case and diacritics. "Quoted words"
// match as a phrase, in that order and next to each other; a word
// ending in * matches the words it begins (repo* finds repository). A
// word of several parts (/etc/passwd, user@example.com, delete_all)
// matches those parts next to each other. Characters other than letters
// and digits separate words; a word with neither is left out.
func MatchExpr(words string) (string, error) {
	ts, err := matchTerms(words)
	if err != nil {
		return "", err
	}
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = `"` + strings.ReplaceAll(t.text, `"`, `""`) + `"`
		if t.prefix {
			out[i] += "*"
		}
	}
	return strings.Join(out, " "), nil
}

// matchTerm is one term of a text filter: a word, a phrase, or a prefix.
type matchTerm struct {
	text   string
	prefix bool
}

// matchTerms reads words as MatchExpr says.
func matchTerms(words string) ([]matchTerm, error) {
	var terms []matchTerm
	add := func(term string, prefix bool) {
		if !strings.ContainsFunc(term, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) {
			return
		}
		terms = append(terms, matchTerm{term, prefix})
	}
	for s := strings.TrimSpace(words); s != ""; s = strings.TrimLeftFunc(s, unicode.IsSpace) {
		if s[0] == '"' {
			end := strings.IndexByte(s[1:], '"')
			if end < 0 {
				end = len(s) - 1 // an open quote runs to the end
			}
			add(s[1:1+end], false)
			s = s[min(len(s), end+2):]
			continue
		}
		end := strings.IndexFunc(s, unicode.IsSpace)
		if end < 0 {
			end = len(s)
		}
		w := s[:end]
		prefix := len(w) > 1 && strings.HasSuffix(w, "*")
		add(strings.TrimSuffix(w, "*"), prefix)
		s = s[end:]
	}
	if len(terms) == 0 {
		return nil, ErrNoWords
	}
	return terms, nil
}

// pgMatch is MatchExpr on PostgreSQL: a tsquery expression over the
// words of call_text, each term read as the text index reads a call's
// text (postgres.Words: the same separators, then the same parser), a phrase in
// order, a prefix as a prefix of its last word. Unlike SQLite's index,
// PostgreSQL's does not fold diacritics.
func pgMatch(words string) (string, []any, error) {
	ts, err := matchTerms(words)
	if err != nil {
		return "", nil, err
	}
	sep := regexp.MustCompile(pgSeparatorsRE)
	var parts []string
	var args []any
	phrase := "phraseto_tsquery('simple', regexp_replace(?, '" + postgres.Separators + "', ' ', 'g'))"
	for _, t := range ts {
		if !t.prefix {
			parts, args = append(parts, phrase), append(args, t.text)
			continue
		}
		// The words before the last as a phrase, then the last as a
		// prefix.
		ws := sep.Split(strings.Trim(sep.ReplaceAllString(t.text, " "), " "), -1)
		last := "to_tsquery('simple', quote_literal(?) || ':*')"
		if len(ws) == 1 {
			parts, args = append(parts, last), append(args, ws[0])
			continue
		}
		parts = append(parts, "tsquery_phrase("+phrase+", "+last+")")
		args = append(args, strings.Join(ws[:len(ws)-1], " "), ws[len(ws)-1])
	}
	return "(" + strings.Join(parts, " && ") + ")", args, nil
}

// pgSeparatorsRE is postgres.Separators in Go's words.
const pgSeparatorsRE = "[\\s!-/:-@\\[-`{-~]+"

// callSelect reads a call's row from the index and its records: q its
// first request, d the record whose decision it shows, o its latest
// outcome.
const callSelect = `SELECT c.call_id, q.time, q.session, q.client, q.protocol, q.server, q.direction, q.method, q.tool,
 q.arguments, q.pin, d.decision, d.decided_by, d.reason, c.approval, coalesce(o.outcome, ''), coalesce(o.result, ''),
 q.request_size, coalesce(o.response_size, 0), coalesce(o.duration_ms, 0), coalesce(o.detail, q.detail),
 coalesce(o.hash, q.hash), c.k, q.user_subject, q.user_email, q.user_groups FROM `

// The records an index row points to must be its call's: the index is
// not part of the chain, and a row pointed elsewhere would show another
// call's decision or outcome as this one's. CROSS JOIN keeps the index
// the outer loop: with the call_id terms, SQLite's planner would
// otherwise walk every record and look each call up by its id.
const callJoins = ` CROSS JOIN records q ON q.seq = c.req_seq AND q.call_id = c.call_id AND q.kind = 'request'
 CROSS JOIN records d ON d.seq = c.dec_seq AND d.call_id = c.call_id
 LEFT JOIN records o ON o.seq = c.out_seq AND o.call_id = c.call_id AND o.kind = 'outcome'`

// pgJoins are callJoins in PostgreSQL's words (a join with a condition is
// an inner join there; its planner picks the order by itself).
var pgJoins = strings.ReplaceAll(callJoins, "CROSS JOIN", "JOIN")

// queryText builds Query's SQL. The table that drives it is chosen so
// that the newest matching calls come first without a sort of all of
// them: the calls that carry an approval (few), else the text index in
// key order, else the call index (by the index of a column filtered on,
// whose entries for one value are in key order).
func queryText(f Filter, pg bool) (string, []any, error) {
	return queryTextFor(f, pg, userColumns)
}

// userColumns are the call index's columns a user filter matches.
var userColumns = []string{"user_subject", "user_email"}

// queryTextFor is queryText with the user filter matching only the
// columns users (those of userColumns that hold the value: see
// userMatches).
func queryTextFor(f Filter, pg bool, users []string) (string, []any, error) {
	var where []string
	var args []any
	key := "c.k"
	var from string
	join, joins := "CROSS JOIN", callJoins
	if pg {
		join, joins = "JOIN", pgJoins
	}
	match, matchArgs := "", []any(nil)
	if f.Text != "" {
		var err error
		if pg {
			match, matchArgs, err = pgMatch(f.Text)
		} else {
			match, err = MatchExpr(f.Text)
			matchArgs = []any{match}
		}
		if err != nil {
			return "", nil, err
		}
	}
	// The text filter's condition on the words of call_text t.
	textCond := "call_text MATCH ?"
	if pg {
		textCond = "t.words @@ " + match
	}
	approvals, err := f.approvals()
	if err != nil {
		return "", nil, fmt.Errorf("calls: %w", err)
	}
	switch {
	case len(approvals) > 0:
		from = `(SELECT DISTINCT call_id FROM records WHERE approval IN (` + paramMarks(len(approvals)) + `) AND approval != '') a
 ` + join + ` call_index c ON c.call_id = a.call_id`
		args = appendArgs(args, approvals)
		if match != "" {
			in := "c.k IN (SELECT rowid FROM call_text WHERE " + textCond + ")"
			if pg {
				in = "c.k IN (SELECT t.k FROM call_text t WHERE " + textCond + ")"
			}
			where, args = append(where, in), append(args, matchArgs...)
		}
	case match != "" && pg:
		from = `call_text t JOIN call_index c ON c.k = t.k`
		key = "t.k"
		where, args = append(where, textCond), append(args, matchArgs...)
	case match != "":
		from = `call_text CROSS JOIN call_index c ON c.k = call_text.rowid`
		key = "call_text.rowid"
		where, args = append(where, textCond), append(args, matchArgs...)
	default:
		from = "call_index c"
	}
	if !f.Since.IsZero() {
		where, args = append(where, key+" >= ?"), append(args, audit.KeyMillis(f.Since))
	}
	if !f.Until.IsZero() {
		where, args = append(where, key+" < ?"), append(args, audit.KeyMillis(f.Until)+1<<audit.KeyRankBits)
	}
	if f.Before != 0 {
		where, args = append(where, key+" < ?"), append(args, f.Before)
	}
	if f.After != 0 {
		where, args = append(where, key+" > ?"), append(args, f.After)
	}
	for _, c := range []struct{ col, v string }{{"call_id", f.ID}, {"server", f.Server}, {"tool", f.Tool},
		{"decision", f.Decision}, {"outcome", f.Outcome}, {"client", f.Client}, {"session", f.Session},
		{"decided_by", f.DecidedBy}} {
		if c.v != "" {
			where, args = append(where, "c."+c.col+" = ?"), append(args, c.v)
		}
	}
	if len(f.IDs) > 0 {
		if len(f.IDs) > maxIDs {
			return "", nil, fmt.Errorf("calls: %d ids, at most %d at once", len(f.IDs), maxIDs)
		}
		where = append(where, "c.call_id IN ("+paramMarks(len(f.IDs))+")")
		args = appendArgs(args, f.IDs)
	}
	if f.User != "" {
		// The user's indexes hold only calls that name one: the
		// conditions on the empty string let the planner use them.
		var or []string
		for _, col := range users {
			or, args = append(or, "c."+col+" = ? AND c."+col+" != ''"), append(args, f.User)
		}
		where = append(where, "("+strings.Join(or, " OR ")+")")
	}
	q := callSelect + from + joins
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	if ascending(f) {
		q += " ORDER BY " + key + " ASC"
	} else {
		q += " ORDER BY " + key + " DESC"
	}
	if f.Limit > 0 {
		q += " LIMIT " + strconv.Itoa(f.Limit)
	}
	return q, args, nil
}

// approvals are the approval ids the filter selects on: Approval and
// Approvals together, at most maxIDs.
func (f Filter) approvals() ([]string, error) {
	ids := f.Approvals
	if f.Approval != "" {
		ids = append([]string{f.Approval}, ids...)
	}
	if len(ids) > maxIDs {
		return nil, fmt.Errorf("%d approvals, at most %d at once", len(ids), maxIDs)
	}
	return ids, nil
}

// paramMarks are n parameters' question marks, separated by commas.
func paramMarks(n int) string { return strings.TrimSuffix(strings.Repeat("?,", n), ",") }

// appendArgs appends strings to a statement's arguments.
func appendArgs(args []any, vs []string) []any {
	for _, v := range vs {
		args = append(args, v)
	}
	return args
}

// ascending reports whether Query reads the calls oldest first (to page
// to newer ones), and turns them around before handing them on.
func ascending(f Filter) bool { return f.After != 0 && f.Before == 0 }

// Reader keeps the readers of the audit log: the calls and the records a
// filter selects, every record in order, the policy's decisions, a
// period's activity and the export; DB.Reader returns it.
type Reader struct{ db *DB }

// Reader returns the readers of the audit log.
func (db *DB) Reader() Reader { return Reader{db} }

// Query calls fn for each invocation that matches f, newest first.
func (rd Reader) Query(ctx context.Context, f Filter, fn func(*Call) error) error {
	if f.Text != "" {
		if _, err := matchTerms(f.Text); err != nil {
			return fmt.Errorf("query: %w", err)
		}
	}
	if err := rd.needCallIndex(ctx); err != nil {
		return fmt.Errorf("query: %w", err)
	}
	rd.db.ing.caughtUp(ctx)
	if err := rd.db.completeIndex(ctx, 0); err != nil {
		return fmt.Errorf("query: %w", err)
	}
	ov, err := rd.db.journals().unchainedOverlay(ctx)
	if err != nil {
		return fmt.Errorf("query: %w", err)
	}
	if ov == nil {
		return rd.queryCalls(ctx, f, fn)
	}
	defer ov.close()
	return ov.mergeCalls(ctx, f, func(f Filter, fn func(*Call) error) error { return rd.queryCalls(ctx, f, fn) }, fn)
}

// queryCalls is Query of the calls in the database alone, once it has
// caught up.
func (rd Reader) queryCalls(ctx context.Context, f Filter, fn func(*Call) error) error {
	if rd.db.schema.noUser && f.User != "" {
		return nil // a log of the release before names no user
	}
	users := userColumns
	if f.User != "" {
		var err error
		if users, err = rd.userMatches(ctx, f.User); err != nil || len(users) == 0 {
			return err
		}
	}
	q, args, err := queryTextFor(f, rd.db.pg, users)
	if err != nil {
		return fmt.Errorf("query: %w", err)
	}
	if rd.db.schema.noUser {
		q = strings.Replace(q, "q.user_subject, q.user_email, q.user_groups FROM", noUserColumns+" FROM", 1)
	}
	rows, err := rd.db.r.QueryContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("query: %w", err)
	}
	defer rows.Close()
	var held []*Call
	for rows.Next() {
		var c Call
		var groups string
		if err := rows.Scan(&c.ID, &c.Time, &c.Session, &c.Client, &c.Protocol, &c.Server, &c.Direction, &c.Method,
			&c.Tool, &c.Arguments, &c.Pin, &c.Decision, &c.DecidedBy, &c.Reason, &c.Approval, &c.Outcome, &c.Result,
			&c.RequestSize, &c.ResponseSize, &c.DurationMS, &c.Detail, &c.Hash, &c.Key, &c.User, &c.UserEmail, &groups); err != nil {
			return fmt.Errorf("query: %w", err)
		}
		c.UserGroups = audit.ParseGroups(groups)
		if c.UserGroups == nil {
			c.UserGroups = []string{} // an empty array, not null, in JSON
		}
		if ascending(f) {
			held = append(held, &c)
			continue
		}
		if err := fn(&c); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("query: %w", err)
	}
	rows.Close()
	for _, c := range slices.Backward(held) {
		if err := fn(c); err != nil {
			return err
		}
	}
	return nil
}

// userMatches returns the user columns of the call index that hold the
// value who: a subject, an email, rarely both. Filtering on one column
// reads its index in key order, newest first, where an OR of both would
// sort every call of the user.
func (rd Reader) userMatches(ctx context.Context, who string) ([]string, error) {
	var cols []string
	for _, col := range userColumns {
		var found bool
		err := rd.db.r.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM call_index WHERE `+col+` = ? AND `+col+` != '')`, who).Scan(&found)
		if err != nil {
			return nil, fmt.Errorf("query: %w", err)
		}
		if found {
			cols = append(cols, col)
		}
	}
	return cols, nil
}

// needCallIndex checks that the database has the call index: a database
// opened read-only may have been written last by an earlier version.
func (rd Reader) needCallIndex(ctx context.Context) error {
	if rd.db.writable || rd.db.hold != nil || rd.db.pg { // PostgreSQL's first schema has it
		return nil
	}
	var n int
	if err := rd.db.r.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations WHERE version = ?`, callIndexMigration).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w (it has no call index): run a command that writes to it once (guard run, guard serve) to upgrade it", ErrSchemaTooOld)
	}
	return nil
}

// callIndexMigration is the migration that adds the call index.
const callIndexMigration = 9

// RecordKinds are the kinds of record QueryRecords lists: those that are
// not a call's request or outcome.
var RecordKinds = []string{guard.KindDecision, guard.KindToolReview, guard.KindRuleAdded, guard.KindConfig,
	guard.KindLifecycle, guard.KindEvent, guard.KindRetention}

// ErrCallsOnly is returned by QueryRecords for a filter that only calls
// have (Outcome, Text, ID, paging).
var ErrCallsOnly = errors.New("this filter applies to calls only")

// QueryRecords calls fn for each record of a kind in RecordKinds that
// matches f, newest first (by time, then seq). Outcome, Text, ID, Before
// and After do not apply to them.
func (rd Reader) QueryRecords(ctx context.Context, kind string, f Filter, fn func(*guard.Record) error) error {
	if !slices.Contains(RecordKinds, kind) {
		return fmt.Errorf("records: kind %q: want one of %s", kind, strings.Join(RecordKinds, ", "))
	}
	if f.Outcome != "" || f.Text != "" || f.ID != "" || len(f.IDs) > 0 || f.Before != 0 || f.After != 0 {
		return fmt.Errorf("records: %w", ErrCallsOnly)
	}
	if _, err := f.approvals(); err != nil {
		return fmt.Errorf("records: %w", err)
	}
	if err := rd.needCallIndex(ctx); err != nil {
		return fmt.Errorf("records: %w", err)
	}
	rd.db.ing.caughtUp(ctx)
	if err := rd.db.completeIndex(ctx, 0); err != nil {
		return fmt.Errorf("records: %w", err)
	}
	ov, err := rd.db.journals().unchainedOverlay(ctx)
	if err != nil {
		return fmt.Errorf("records: %w", err)
	}
	if ov == nil {
		return rd.queryRecords(ctx, kind, f, fn)
	}
	defer ov.close()
	return ov.mergeRecords(ctx, kind, f, func(f Filter, fn func(*guard.Record) error) error { return rd.queryRecords(ctx, kind, f, fn) }, fn)
}

// queryRecords is QueryRecords of the records in the database alone, once
// it has caught up.
func (rd Reader) queryRecords(ctx context.Context, kind string, f Filter, fn func(*guard.Record) error) error {
	where := []string{"kind = ?", "kind NOT IN ('request', 'outcome')"}
	if !rd.db.schema.noPruned {
		where = append(where, "pruned = 0") // their bodies are in retention's archives
	}
	args := []any{kind}
	if !f.Since.IsZero() {
		where, args = append(where, "time >= ?"), append(args, fmtTime(f.Since))
	}
	if !f.Until.IsZero() {
		where, args = append(where, "time <= ?"), append(args, fmtTime(f.Until))
	}
	for _, c := range []struct{ col, v string }{{"server", f.Server}, {"tool", f.Tool}, {"decision", f.Decision},
		{"client", f.Client}, {"session", f.Session}, {"decided_by", f.DecidedBy}} {
		if c.v != "" {
			where, args = append(where, c.col+" = ?"), append(args, c.v)
		}
	}
	approvals, err := f.approvals()
	if err != nil {
		return fmt.Errorf("records: %w", err)
	}
	if len(approvals) > 0 {
		where, args = append(where, "approval IN ("+paramMarks(len(approvals))+")"), appendArgs(args, approvals)
	}
	if f.User != "" {
		if rd.db.schema.noUser {
			return nil // a log of the release before names no user
		}
		where, args = append(where, "(user_subject = ? OR user_email = ?)"), append(args, f.User, f.User)
	}
	q := rd.db.schema.selectRecords() + indexedBy(rd.db.pg, "records_kind") + " WHERE " + strings.Join(where, " AND ") + " ORDER BY time DESC, seq DESC"
	if f.Limit > 0 {
		q += " LIMIT " + strconv.Itoa(f.Limit)
	}
	rows, err := rd.db.r.QueryContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("records: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return fmt.Errorf("records: %w", err)
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("records: %w", err)
	}
	return nil
}
