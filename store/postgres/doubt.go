package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// CommittedAt reports whether record id is at seq in the chain, asked
// on aw, the audit writer's pool, under the audit lock, once every
// transaction that held it has ended: the question asked about a batch
// whose COMMIT was sent but not answered.
func CommittedAt(ctx context.Context, aw *sql.DB, seq int64, id string) (bool, error) {
	tx, err := aw.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", LockAudit); err != nil {
		return false, fmt.Errorf("audit lock: %w", err)
	}
	var got string
	switch err := tx.QueryRowContext(ctx, "SELECT id FROM records WHERE seq = $1", seq).Scan(&got); {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("record %d: %w", seq, err)
	}
	return got == id, nil
}
