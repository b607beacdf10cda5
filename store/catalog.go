package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	guard "github.com/guard-mcp/guard"
)

// ToolVersion is one definition of a tool, with when it was first and last
// listed.
type ToolVersion struct {
	Tool      guard.Tool
	FirstSeen time.Time
	LastSeen  time.Time
}

// RecordTools records the definitions a server listed: a new definition
// (by pin) is added to the tool's history, a known one is marked seen.
//
// Each definition not seen before also gets a review (see planReviews);
// acceptNew says whether tools that appear after the baseline are accepted
// without a person (new_tools: allow). A definition accepted that way (or
// as part of the server's baseline) is a decision of guard's: its
// tool_review record is written before the review is stored, under the
// decisions lock (see decide), and the listing is not recorded when the
// record cannot be.
func (ct Catalog) RecordTools(ctx context.Context, server string, tools []guard.Tool, seen time.Time, acceptNew bool) error {
	at := fmtTime(seen)
	plan, err := planReviews(ctx, ct.db.w, server, tools, at, acceptNew)
	if err != nil {
		return fmt.Errorf("record tool reviews: %w", err)
	}
	if len(plan) > 0 {
		// New definitions: planned again under the lock, with the
		// decisions of other processes settled.
		unlock, err := ct.db.lockDecisions(ctx)
		if err != nil {
			return fmt.Errorf("record tools: %w", err)
		}
		defer unlock()
		if plan, err = planReviews(ctx, ct.db.w, server, tools, at, acceptNew); err != nil {
			return fmt.Errorf("record tool reviews: %w", err)
		}
		var recs []*guard.Record
		for _, r := range plan {
			if r.State == guard.ReviewAccepted {
				rec := toolReviewRecord(r, guard.ReviewAccepted, r.DecidedBy, seen.UTC())
				rec.Reason = map[string]string{guard.CauseBaseline: "in the server's first listing (its baseline)",
					guard.CauseNew: "a new tool, accepted by new_tools: allow"}[r.Cause]
				rec.Detail = detail(map[string]any{"cause": r.Cause})
				recs = append(recs, rec)
			}
		}
		if len(recs) > 0 {
			if err := ct.db.Append(recs...); err != nil {
				return fmt.Errorf("record tools: %w", err)
			}
		}
	}
	tx, err := ct.db.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("record tools: %w", err)
	}
	defer tx.Rollback()
	for _, t := range tools {
		if _, err := tx.ExecContext(ctx, `INSERT INTO tools (server, name, pin, def, first_seen, last_seen)
			VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (server, name, pin) DO UPDATE SET last_seen = excluded.last_seen`,
			server, t.Name, t.Pin, string(t.Def), at, at); err != nil {
			return fmt.Errorf("record tool %s/%s: %w", server, t.Name, err)
		}
	}
	if err := insertReviews(ctx, tx, plan, at); err != nil {
		return fmt.Errorf("record tool reviews: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("record tools: %w", err)
	}
	return nil
}

// Tools returns the most recently listed definition of each tool of a
// server, or of every server when server is "".
func (ct Catalog) Tools(ctx context.Context, server string) ([]guard.Tool, error) {
	rows, err := ct.db.r.QueryContext(ctx, `SELECT server, name, pin, def FROM tools t
		WHERE (? = '' OR server = ?) AND rowid = (
			SELECT rowid FROM tools u WHERE u.server = t.server AND u.name = t.name
			ORDER BY last_seen DESC, rowid DESC LIMIT 1)
		ORDER BY server, name`, server, server)
	if err != nil {
		return nil, fmt.Errorf("tools: %w", err)
	}
	defer rows.Close()
	var out []guard.Tool
	for rows.Next() {
		t, err := scanTool(rows.Scan)
		if err != nil {
			return nil, fmt.Errorf("tools: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// ToolHistory returns every definition a server has shown for a tool,
// oldest first.
func (ct Catalog) ToolHistory(ctx context.Context, server, name string) ([]ToolVersion, error) {
	rows, err := ct.db.r.QueryContext(ctx, `SELECT server, name, pin, def, first_seen, last_seen FROM tools
		WHERE server = ? AND name = ? ORDER BY first_seen, rowid`, server, name)
	if err != nil {
		return nil, fmt.Errorf("tool history: %w", err)
	}
	defer rows.Close()
	var out []ToolVersion
	for rows.Next() {
		var first, last string
		t, err := scanTool(func(dest ...any) error { return rows.Scan(append(dest, &first, &last)...) })
		if err != nil {
			return nil, fmt.Errorf("tool history: %w", err)
		}
		out = append(out, ToolVersion{Tool: t, FirstSeen: parseTime(first), LastSeen: parseTime(last)})
	}
	return out, rows.Err()
}

func scanTool(scan func(dest ...any) error) (guard.Tool, error) {
	var t guard.Tool
	var def string
	if err := scan(&t.Server, &t.Name, &t.Pin, &def); err != nil {
		return t, err
	}
	t.Def = json.RawMessage(def)
	var head struct {
		Annotations guard.Annotations `json:"annotations"`
	}
	_ = json.Unmarshal(t.Def, &head)
	t.Annotations = head.Annotations
	return t, nil
}

// planReviews returns a review for each definition not seen before. The
// server's first listing is its baseline, accepted as it is; a tool seen
// later is new (accepted when acceptNew), a changed definition is
// pending, and so is any definition whose descriptions were flagged.
func planReviews(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}, server string, tools []guard.Tool, at string, acceptNew bool) ([]*guard.Review, error) {
	var known int
	if err := q.QueryRowContext(ctx, `SELECT COUNT(*) FROM tool_reviews WHERE server = ?`, server).Scan(&known); err != nil {
		return nil, err
	}
	var plan []*guard.Review
	planned := map[string]bool{} // name and pin, for a listing that repeats a definition
	for _, t := range tools {
		var seen, named int
		if err := q.QueryRowContext(ctx, `SELECT COUNT(*) FILTER (WHERE pin = ?), COUNT(*) FROM tool_reviews
			WHERE server = ? AND name = ?`, t.Pin, server, t.Name).Scan(&seen, &named); err != nil {
			return nil, err
		}
		if seen > 0 || planned[t.Name+"\x00"+t.Pin] {
			continue
		}
		planned[t.Name+"\x00"+t.Pin] = true
		r := &guard.Review{Server: server, Name: t.Name, Pin: t.Pin, State: guard.ReviewPending, Cause: guard.CauseChanged}
		switch {
		case known == 0:
			r.State, r.Cause, r.DecidedBy = guard.ReviewAccepted, guard.CauseBaseline, "baseline"
		case named == 0:
			r.Cause = guard.CauseNew
			if acceptNew {
				r.State, r.DecidedBy = guard.ReviewAccepted, "new_tools: allow"
			}
		}
		if len(t.Flags) > 0 {
			r.State, r.Cause, r.DecidedBy, r.Flags = guard.ReviewPending, guard.CauseFlagged, "", t.Flags
		}
		plan = append(plan, r)
	}
	return plan, nil
}

// insertReviews stores planned reviews, inside the transaction that
// records the listing.
func insertReviews(ctx context.Context, tx *sql.Tx, plan []*guard.Review, at string) error {
	for _, r := range plan {
		flags := ""
		if len(r.Flags) > 0 {
			b, _ := json.Marshal(r.Flags)
			flags = string(b)
		}
		decidedAt := ""
		if r.DecidedBy != "" {
			decidedAt = at
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO tool_reviews (server, name, pin, state, cause, flags, decided_by, decided_at, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, r.Server, r.Name, r.Pin, r.State, r.Cause, flags, r.DecidedBy, decidedAt, at); err != nil {
			return err
		}
	}
	return nil
}

const reviewColumns = `server, name, pin, state, cause, flags, decided_by, decided_at, created_at`

func scanReview(scan func(dest ...any) error) (*guard.Review, error) {
	var r guard.Review
	var flags, decidedAt, createdAt string
	if err := scan(&r.Server, &r.Name, &r.Pin, &r.State, &r.Cause, &flags, &r.DecidedBy, &decidedAt, &createdAt); err != nil {
		return nil, err
	}
	if flags != "" {
		_ = json.Unmarshal([]byte(flags), &r.Flags)
	}
	if decidedAt != "" {
		r.DecidedAt = parseTime(decidedAt)
	}
	r.CreatedAt = parseTime(createdAt)
	return &r, nil
}

// Review returns how a tool definition stands, or nil when it was never
// recorded.
func (ct Catalog) Review(ctx context.Context, server, name, pin string) (*guard.Review, error) {
	r, err := scanReview(ct.db.r.QueryRowContext(ctx, `SELECT `+reviewColumns+` FROM tool_reviews
		WHERE server = ? AND name = ? AND pin = ?`, server, name, pin).Scan)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tool review: %w", err)
	}
	return r, nil
}

// Reviews returns the reviews of every definition of a server's tools (of
// every server when server is ""), by server, name and creation.
// CountReviews counts the tool definitions in a review state.
func (ct Catalog) CountReviews(ctx context.Context, state string) (int, error) {
	var n int
	if err := ct.db.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM tool_reviews WHERE state = ?`, state).Scan(&n); err != nil {
		return 0, fmt.Errorf("count tool reviews: %w", err)
	}
	return n, nil
}

func (ct Catalog) Reviews(ctx context.Context, server string) ([]*guard.Review, error) {
	rows, err := ct.db.r.QueryContext(ctx, `SELECT `+reviewColumns+` FROM tool_reviews
		WHERE (? = '' OR server = ?) ORDER BY server, name, created_at, rowid`, server, server)
	if err != nil {
		return nil, fmt.Errorf("tool reviews: %w", err)
	}
	defer rows.Close()
	var out []*guard.Review
	for rows.Next() {
		r, err := scanReview(rows.Scan)
		if err != nil {
			return nil, fmt.Errorf("tool reviews: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// DecideTool accepts or rejects the definition of a tool with the given
// pin, or its most recently listed one when pin is "". It returns the
// review as decided.
func (ct Catalog) DecideTool(ctx context.Context, server, name, pin string, accept bool, by string) (*guard.Review, error) {
	if pin == "" {
		tools, err := ct.Tools(ctx, server)
		if err != nil {
			return nil, err
		}
		for _, t := range tools {
			if t.Name == name {
				pin = t.Pin
			}
		}
		if pin == "" {
			return nil, fmt.Errorf("%w: no tool %q on server %q", guard.ErrNotFound, name, server)
		}
	}
	state := guard.ReviewRejected
	if accept {
		state = guard.ReviewAccepted
	}
	// Recorded in the audit log before it takes effect (see decide).
	var now string
	err := ct.db.decide(ctx, func(ctx context.Context) (*guard.Record, error) {
		r, err := scanReview(ct.db.w.QueryRowContext(ctx, `SELECT `+reviewColumns+` FROM tool_reviews
			WHERE server = ? AND name = ? AND pin = ?`, server, name, pin).Scan)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("%w: no definition %s of %s/%s", guard.ErrNotFound, pin, server, name)
		}
		if err != nil {
			return nil, err
		}
		t := ct.db.opts.Now().UTC()
		now = fmtTime(t)
		return toolReviewRecord(r, state, by, t), nil
	}, func(ctx context.Context) (bool, error) {
		res, err := ct.db.w.ExecContext(ctx, `UPDATE tool_reviews SET state = ?, decided_by = ?, decided_at = ?
			WHERE server = ? AND name = ? AND pin = ?`, state, by, now, server, name, pin)
		return affected(res, err)
	})
	if err != nil {
		return nil, fmt.Errorf("decide tool: %w", err)
	}
	return ct.Review(ctx, server, name, pin)
}

// AcceptedTool returns the definition of a tool accepted most recently
// (the baseline included), or nil when none is.
func (ct Catalog) AcceptedTool(ctx context.Context, server, name string) (*guard.Tool, error) {
	t, err := scanTool(ct.db.r.QueryRowContext(ctx, `SELECT t.server, t.name, t.pin, t.def
		FROM tool_reviews r JOIN tools t ON t.server = r.server AND t.name = r.name AND t.pin = r.pin
		WHERE r.server = ? AND r.name = ? AND r.state = 'accepted'
		ORDER BY r.decided_at DESC, r.rowid DESC LIMIT 1`, server, name).Scan)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("accepted tool: %w", err)
	}
	return &t, nil
}

// ReviewedTools returns how a server's tool definitions stand: the state
// of each definition it has shown (keyed by name, a NUL, and pin), and for
// each tool the definition accepted most recently (the baseline included),
// where one was. It reads both in two queries, whatever the number of
// tools: tools/list through guard shows each tool as its last accepted
// definition.
func (ct Catalog) ReviewedTools(ctx context.Context, server string) (states map[string]string, accepted map[string]*guard.Tool, err error) {
	rows, err := ct.db.r.QueryContext(ctx, `SELECT name, pin, state FROM tool_reviews WHERE server = ?`, server)
	if err != nil {
		return nil, nil, fmt.Errorf("reviewed tools: %w", err)
	}
	defer rows.Close()
	states = map[string]string{}
	for rows.Next() {
		var name, pin, state string
		if err := rows.Scan(&name, &pin, &state); err != nil {
			return nil, nil, fmt.Errorf("reviewed tools: %w", err)
		}
		states[name+"\x00"+pin] = state
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("reviewed tools: %w", err)
	}
	rows.Close()
	rows, err = ct.db.r.QueryContext(ctx, `SELECT t.server, t.name, t.pin, t.def
		FROM tool_reviews r JOIN tools t ON t.server = r.server AND t.name = r.name AND t.pin = r.pin
		WHERE r.server = ? AND r.state = 'accepted'
		ORDER BY r.name, r.decided_at DESC, r.rowid DESC`, server)
	if err != nil {
		return nil, nil, fmt.Errorf("accepted tools: %w", err)
	}
	defer rows.Close()
	accepted = map[string]*guard.Tool{}
	for rows.Next() {
		t, err := scanTool(rows.Scan)
		if err != nil {
			return nil, nil, fmt.Errorf("accepted tools: %w", err)
		}
		if accepted[t.Name] == nil { // the first of each name is its latest
			accepted[t.Name] = &t
		}
	}
	return states, accepted, rows.Err()
}

// ReviewsStamp changes whenever a tool definition is reviewed or recorded
// for review, by any process on the database: a relaying process compares
// it to find when what its sessions' listings show may have changed.
func (ct Catalog) ReviewsStamp(ctx context.Context) (string, error) {
	var n int64
	var decided, created string
	if err := ct.db.r.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(MAX(decided_at), ''), COALESCE(MAX(created_at), '')
		FROM tool_reviews`).Scan(&n, &decided, &created); err != nil {
		return "", fmt.Errorf("reviews stamp: %w", err)
	}
	return fmt.Sprintf("%d %s %s", n, decided, created), nil
}

// ToolByPin returns one definition of a tool, or nil when it is unknown.
func (ct Catalog) ToolByPin(ctx context.Context, server, name, pin string) (*guard.Tool, error) {
	t, err := scanTool(ct.db.r.QueryRowContext(ctx, `SELECT server, name, pin, def FROM tools
		WHERE server = ? AND name = ? AND pin = ?`, server, name, pin).Scan)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tool by pin: %w", err)
	}
	return &t, nil
}

// Catalog keeps the tools' definitions as servers listed them (pinned by
// digest) and people's reviews of them; DB.Catalog returns it.
type Catalog struct{ db *DB }

// Catalog returns the store of tool definitions and their reviews.
func (db *DB) Catalog() Catalog { return Catalog{db} }
