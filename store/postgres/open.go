package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/guard-mcp/guard/audit"
	"github.com/guard-mcp/guard/migrations"
	"github.com/jackc/pgx/v5"
)

// UndefinedTable is PostgreSQL's error code for a table that does not
// exist (SQLSTATE 42P01).
const UndefinedTable = "42P01"

// Signer reads the checkpoint key from its file. A missing file is
// created only for a log that has no checkpoint yet (the first replica of
// a new database): a replica that made a key of its own for a log others
// sign would fork it. A key that is not the one the log's checkpoints are
// signed with is refused. keyPath is the key's file; r reads the log.
func Signer(ctx context.Context, r *sql.DB, keyPath string) (*audit.Signer, error) {
	var origin sql.NullString
	err := r.QueryRowContext(ctx, `SELECT note FROM checkpoints ORDER BY size DESC LIMIT 1`).Scan(&origin)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("checkpoints: %w", err)
	}
	var s *audit.Signer
	if origin.Valid {
		s, err = audit.ReadSigner(keyPath)
		if err != nil {
			return nil, fmt.Errorf("%w: every replica needs the key the log's checkpoints are signed with", err)
		}
	} else if s, err = audit.LoadSigner(keyPath); err != nil {
		return nil, err
	}
	if origin.Valid {
		logOrigin, _, _ := strings.Cut(origin.String, "\n")
		if mine := s.Verifier().Name(); logOrigin != mine {
			return nil, fmt.Errorf("checkpoint key %s is not the log's: its checkpoints are signed as %s, this key signs as %s (every replica needs the same key)",
				keyPath, logOrigin, mine)
		}
	}
	return s, nil
}

// CheckSessionPooling refuses a pooler that hands a client's statements
// to whichever server process is free (PgBouncer's transaction or
// statement pooling): guard's advisory locks and LISTEN belong to a
// server session. Two connections of guard's, one after the other, are
// served by two server processes in session mode; in transaction mode
// the pooler gives the second the process the first just left.
func CheckSessionPooling(ctx context.Context, cfg *pgx.ConnConfig) error {
	var pids [2]uint32
	var conns []*pgx.Conn
	defer func() {
		for _, c := range conns {
			c.Close(context.WithoutCancel(ctx))
		}
	}()
	// No prepared statement: a pooler that shares server processes would
	// hand the second connection the first one's, and fail otherwise.
	cfg = cfg.Copy()
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	for i := range pids {
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		conns = append(conns, c)
		if err := c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pids[i]); err != nil {
			return fmt.Errorf("connect: %w", err)
		}
	}
	if pids[0] == pids[1] {
		return errors.New("two connections share one server process: the database is reached through a pooler in transaction or statement mode (PgBouncer's pool_mode), which breaks the advisory locks and LISTEN guard relies on; use session pooling or connect directly")
	}
	return nil
}

// Migrate applies the PostgreSQL migrations not yet applied, each
// in a transaction, under an advisory lock that replicas starting at once
// take in turn.
func Migrate(ctx context.Context, cfg *pgx.ConnConfig) error {
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	if _, err := c.Exec(ctx, "SELECT pg_advisory_lock($1)", LockMigrate); err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	defer c.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", LockMigrate)
	if _, err := c.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied TEXT NOT NULL)`); err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	return migrations.Apply(migrations.Postgres(), func(m migrations.Migration, body string) error {
		err := pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM schema_migrations WHERE version = $1`, m.Version).Scan(&n); err != nil || n > 0 {
				return err
			}
			if _, err := tx.Exec(ctx, body); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name, applied) VALUES ($1, $2, $3)`, m.Version, m.Name, audit.FormatTime(time.Now()))
			return err
		})
		if err != nil {
			return fmt.Errorf("migration %s: %w", m.Name, err)
		}
		return nil
	})
}

// LatestMigration is the version of the last embedded PostgreSQL
// migration.
func LatestMigration() int64 { return migrations.Latest(migrations.Postgres()) }
