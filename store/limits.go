package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// TakeToken takes one token from the bucket named key, shared by every
// process on this database: the bucket holds at most burst tokens and
// refills at rate tokens per second. It returns whether a token was
// taken and, when not, how long until one will be there.
func (db *DB) TakeToken(ctx context.Context, key string, rate float64, burst int, now time.Time) (bool, time.Duration, error) {
	if db.pg {
		key = pgText(key)
	}
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return false, 0, fmt.Errorf("rate limit: %w", err)
	}
	defer tx.Rollback()
	tokens := float64(burst)
	var at int64
	err = tx.QueryRowContext(ctx, `SELECT tokens, updated_at FROM rate_limits WHERE key = ?`, key).Scan(&tokens, &at)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return false, 0, fmt.Errorf("rate limit: %w", err)
	}
	us := now.UnixMicro()
	if err == nil && us > at {
		tokens += rate * float64(us-at) / 1e6
	}
	tokens = min(tokens, float64(burst)) // full, or the limit was lowered
	if tokens < 1 {
		wait := time.Duration((1 - tokens) / rate * float64(time.Second))
		return false, wait, nil
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO rate_limits (key, tokens, updated_at) VALUES (?, ?, ?)
		ON CONFLICT (key) DO UPDATE SET tokens = excluded.tokens, updated_at = excluded.updated_at`,
		key, tokens-1, max(us, at)); err != nil {
		return false, 0, fmt.Errorf("rate limit: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return false, 0, fmt.Errorf("rate limit: %w", err)
	}
	return true, 0, nil
}

// pgText makes a string PostgreSQL's text can hold, which has no NUL
// byte: a backslash is doubled and a NUL written \0, so that two strings
// stay two.
func pgText(s string) string {
	if !strings.ContainsAny(s, "\x00\\") {
		return s
	}
	return strings.NewReplacer("\\", "\\\\", "\x00", "\\0").Replace(s)
}
