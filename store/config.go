package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	guard "github.com/guard-mcp/guard"
)

// ConfigChange is a change to guard's configuration that waited for a
// person, by the digest of the files.
type ConfigChange struct {
	Digest    string
	Summary   string // what changed, one line each
	State     string // pending | applied | dismissed | superseded
	DecidedBy string
	DecidedAt string
	Created   string
}

// ErrNoConfigChange: no pending configuration change has that digest.
var ErrNoConfigChange = errors.New("no pending configuration change with that digest")

// NoteConfigChange records a change that waits for a person, once: a
// change already decided keeps its decision. An older pending change is
// superseded (its files are no longer on disk).
func (db *DB) NoteConfigChange(ctx context.Context, digest, summary string) error {
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("config change: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE config_changes SET state = 'superseded' WHERE state = 'pending' AND digest <> ?`, digest); err != nil {
		return fmt.Errorf("config change: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO config_changes (digest, summary, state, created_at) VALUES (?, ?, 'pending', ?)
		ON CONFLICT (digest) DO NOTHING`, digest, summary, fmtTime(db.opts.Now())); err != nil {
		return fmt.Errorf("config change: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("config change: %w", err)
	}
	return nil
}

const configColumns = `digest, summary, state, decided_by, decided_at, created_at`

func scanConfigChange(row interface{ Scan(...any) error }) (*ConfigChange, error) {
	var c ConfigChange
	if err := row.Scan(&c.Digest, &c.Summary, &c.State, &c.DecidedBy, &c.DecidedAt, &c.Created); err != nil {
		return nil, err
	}
	return &c, nil
}

// PendingConfigChange returns the change that waits for a person, or nil.
func (db *DB) PendingConfigChange(ctx context.Context) (*ConfigChange, error) {
	c, err := scanConfigChange(db.r.QueryRowContext(ctx, `SELECT `+configColumns+` FROM config_changes
		WHERE state = 'pending' ORDER BY created_at DESC, rowid DESC LIMIT 1`))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("config change: %w", err)
	}
	return c, nil
}

// ConfigChangeByDigest returns the change with that digest, or nil.
func (db *DB) ConfigChangeByDigest(ctx context.Context, digest string) (*ConfigChange, error) {
	c, err := scanConfigChange(db.r.QueryRowContext(ctx, `SELECT `+configColumns+` FROM config_changes WHERE digest = ?`, digest))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("config change: %w", err)
	}
	return c, nil
}

// ConfigApplied reports whether a person applied the configuration with
// that digest: every process on the database then applies it.
func (db *DB) ConfigApplied(ctx context.Context, digest string) (bool, error) {
	c, err := db.ConfigChangeByDigest(ctx, digest)
	return c != nil && c.State == "applied", err
}

// ApplyConfig records that a person applied the configuration with that
// digest (summary says what changed, when no process noted it first), and
// records it in the audit log (event guard/config-applied).
func (db *DB) ApplyConfig(ctx context.Context, digest, summary, by string) error {
	now := fmtTime(db.opts.Now())
	if _, err := db.w.ExecContext(ctx, `INSERT INTO config_changes (digest, summary, state, decided_by, decided_at, created_at)
		VALUES (?, ?, 'applied', ?, ?, ?)
		ON CONFLICT (digest) DO UPDATE SET state = 'applied', decided_by = excluded.decided_by, decided_at = excluded.decided_at`,
		digest, summary, by, now, now); err != nil {
		return fmt.Errorf("config change: %w", err)
	}
	return db.configEvent("guard/config-applied", digest, by, "configuration change applied")
}

// DismissConfig records that a person dismissed the pending change with
// that digest: the policy in force stays (event guard/config-dismissed).
func (db *DB) DismissConfig(ctx context.Context, digest, by string) error {
	res, err := db.w.ExecContext(ctx, `UPDATE config_changes SET state = 'dismissed', decided_by = ?, decided_at = ?
		WHERE digest = ? AND state = 'pending'`, by, fmtTime(db.opts.Now()), digest)
	if err != nil {
		return fmt.Errorf("config change: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrNoConfigChange
	}
	return db.configEvent("guard/config-dismissed", digest, by, "configuration change dismissed; the policy in force stays")
}

func (db *DB) configEvent(method, digest, by, reason string) error {
	c, err := db.ConfigChangeByDigest(context.Background(), digest)
	if err != nil {
		return err
	}
	d, _ := json.Marshal(map[string]string{"digest": digest, "changes": c.Summary})
	return db.Append(&guard.Record{Kind: guard.KindEvent, Method: method, DecidedBy: by, Reason: reason, Detail: string(d)})
}

// NoteRulesWritten records the digest of an approved-rules file guard
// itself is about to write: a file with that digest is applied at once.
func (db *DB) NoteRulesWritten(ctx context.Context, digest string) error {
	if _, err := db.w.ExecContext(ctx, `INSERT INTO rules_written (digest, created_at) VALUES (?, ?) ON CONFLICT (digest) DO NOTHING`,
		digest, fmtTime(db.opts.Now())); err != nil {
		return fmt.Errorf("rules written: %w", err)
	}
	return nil
}

// RulesWritten reports whether guard wrote an approved-rules file with
// that digest.
func (db *DB) RulesWritten(ctx context.Context, digest string) (bool, error) {
	var n int
	if err := db.r.QueryRowContext(ctx, `SELECT count(*) FROM rules_written WHERE digest = ?`, digest).Scan(&n); err != nil {
		return false, fmt.Errorf("rules written: %w", err)
	}
	return n > 0, nil
}
