package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	guard "github.com/guard-mcp/guard"
)

// ConfigChange is a change to guard's configuration that waited for a
// person, by the digest of the files.
type ConfigChange struct {
	Digest    string
	Summary   string // what changed, one line each
	State     string // ConfigPending, ConfigApplied, ConfigDismissed or ConfigSuperseded
	DecidedBy string
	DecidedAt string
	Created   string
}

// The states of a configuration change.
const (
	ConfigPending    = "pending"    // waits for a person; the policy in force stays
	ConfigApplied    = "applied"    // a person applied it: every process applies files with this digest
	ConfigDismissed  = "dismissed"  // a person dismissed it: the policy in force stays
	ConfigSuperseded = "superseded" // the files changed again before anyone decided
)

// ErrNoConfigChange: no pending configuration change has that digest.
var ErrNoConfigChange = errors.New("no pending configuration change with that digest")

// NotPendingError says why a decision on a configuration change was
// refused: the change with that digest is not the pending one (the first
// decision wins). It wraps ErrNoConfigChange.
type NotPendingError struct {
	Digest string
	Change *ConfigChange // nil when no process noted a change with that digest
}

func (e *NotPendingError) Error() string {
	c := e.Change
	switch {
	case c == nil:
		return "no running guard noted a configuration change with digest " + e.Digest
	case c.State == ConfigSuperseded:
		return "the configuration changed again after this change was noted: it was superseded by a newer one"
	case c.DecidedBy != "":
		return "this configuration change was already " + c.State + " by " + c.DecidedBy + " at " + c.DecidedAt
	}
	return "this configuration change is " + c.State + ", not pending"
}

func (e *NotPendingError) Unwrap() error { return ErrNoConfigChange }

// NoteConfigChange records a change that waits for a person, once: a
// change already decided keeps its decision. An older pending change is
// superseded (its files are no longer on disk); a superseded change whose
// files are back on disk is pending again, with the summary given (what
// it changes against the policy in force now), when there is one.
func (cs Configs) NoteConfigChange(ctx context.Context, digest, summary string) error {
	tx, err := cs.db.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("config change: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE config_changes SET state = 'superseded' WHERE state = 'pending' AND digest <> ?`, digest); err != nil {
		return fmt.Errorf("config change: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO config_changes (digest, summary, state, created_at) VALUES (?, ?, 'pending', ?)
		ON CONFLICT (digest) DO UPDATE SET state = 'pending', created_at = excluded.created_at,
			summary = CASE WHEN excluded.summary <> '' THEN excluded.summary ELSE config_changes.summary END
		WHERE config_changes.state = 'superseded'`, digest, summary, fmtTime(cs.db.opts.Now())); err != nil {
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
func (cs Configs) PendingConfigChange(ctx context.Context) (*ConfigChange, error) {
	c, err := scanConfigChange(cs.db.r.QueryRowContext(ctx, `SELECT `+configColumns+` FROM config_changes
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
func (cs Configs) ConfigChangeByDigest(ctx context.Context, digest string) (*ConfigChange, error) {
	c, err := scanConfigChange(cs.db.r.QueryRowContext(ctx, `SELECT `+configColumns+` FROM config_changes WHERE digest = ?`, digest))
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
func (cs Configs) ConfigApplied(ctx context.Context, digest string) (bool, error) {
	c, err := cs.ConfigChangeByDigest(ctx, digest)
	return c != nil && c.State == ConfigApplied, err
}

// ApplyConfig records that a person (by) applied the pending change with
// that digest, in the audit log (a config record, decision "applied")
// before the change takes effect: every process on the database then
// applies the files with that digest. It is the one way to apply a change,
// for the UI and guard policy reload alike. The first decision wins: a
// change that is not pending (decided already, superseded by a newer edit,
// never noted) is refused with a *NotPendingError. A decision whose record
// cannot be written is refused (the error wraps guard.ErrAuditWrite).
func (cs Configs) ApplyConfig(ctx context.Context, digest, by string) (*ConfigChange, error) {
	return cs.decideConfig(ctx, digest, ConfigApplied, by, "configuration change applied")
}

// DismissConfig records that a person (by) dismissed the pending change
// with that digest: it is not applied and the policy in force stays
// (a config record, decision "dismissed"). Refused like ApplyConfig when
// the change is not pending or its record cannot be written.
func (cs Configs) DismissConfig(ctx context.Context, digest, by string) (*ConfigChange, error) {
	return cs.decideConfig(ctx, digest, ConfigDismissed, by, "configuration change dismissed; the policy in force stays")
}

// decideConfig moves the pending change with that digest to state: the
// record first, then the change (see decide), so that of two people
// deciding at once only the first counts.
func (cs Configs) decideConfig(ctx context.Context, digest, state, by, reason string) (*ConfigChange, error) {
	if by == "" {
		return nil, errors.New("config change: a decision needs the name of who made it")
	}
	var now string
	err := cs.db.decide(ctx, func(ctx context.Context) (*guard.Record, error) {
		c, err := scanConfigChange(cs.db.w.QueryRowContext(ctx, `SELECT `+configColumns+` FROM config_changes WHERE digest = ?`, digest))
		if errors.Is(err, sql.ErrNoRows) {
			return nil, &NotPendingError{Digest: digest}
		}
		if err != nil {
			return nil, err
		}
		if c.State != ConfigPending {
			return nil, &NotPendingError{Digest: digest, Change: c}
		}
		t := cs.db.opts.Now().UTC()
		now = fmtTime(t)
		return &guard.Record{Kind: guard.KindConfig, Time: t, Decision: state, DecidedBy: by, Reason: reason,
			Detail: detail(map[string]any{"digest": digest, "changes": c.Summary})}, nil
	}, func(ctx context.Context) (bool, error) {
		res, err := cs.db.w.ExecContext(ctx, `UPDATE config_changes SET state = ?, decided_by = ?, decided_at = ?
			WHERE digest = ? AND state = 'pending'`, state, by, now, digest)
		return affected(res, err)
	})
	var np *NotPendingError
	if errors.As(err, &np) {
		return nil, np
	}
	if err != nil {
		return nil, fmt.Errorf("config change %s: %w", state, err)
	}
	return cs.ConfigChangeByDigest(ctx, digest)
}

// NoteRulesWritten records the digest of an approved-rules file guard
// itself is about to write: a file with that digest is applied at once.
func (cs Configs) NoteRulesWritten(ctx context.Context, digest string) error {
	if _, err := cs.db.w.ExecContext(ctx, `INSERT INTO rules_written (digest, created_at) VALUES (?, ?) ON CONFLICT (digest) DO NOTHING`,
		digest, fmtTime(cs.db.opts.Now())); err != nil {
		return fmt.Errorf("rules written: %w", err)
	}
	return nil
}

// RulesWritten reports whether guard wrote an approved-rules file with
// that digest.
func (cs Configs) RulesWritten(ctx context.Context, digest string) (bool, error) {
	var n int
	if err := cs.db.r.QueryRowContext(ctx, `SELECT count(*) FROM rules_written WHERE digest = ?`, digest).Scan(&n); err != nil {
		return false, fmt.Errorf("rules written: %w", err)
	}
	return n > 0, nil
}

// Configs keeps the configuration changes that wait for a person and the
// approved-rules files guard wrote; DB.Configs returns it.
type Configs struct{ db *DB }

// Configs returns the store of configuration changes.
func (db *DB) Configs() Configs { return Configs{db} }
