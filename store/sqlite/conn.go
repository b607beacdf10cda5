package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/guard-mcp/guard/audit"
	"github.com/guard-mcp/guard/migrations"
	sqlitedriver "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Migrate applies the migrations not yet applied but version skip (0:
// all), each in a transaction. Several processes may open a new database
// at once: the IMMEDIATE transaction serialises them, and each checks
// again inside it.
func Migrate(ctx context.Context, w *sql.DB, skip int) error {
	if _, err := w.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied TEXT NOT NULL)`); err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	return migrations.Apply(migrations.SQLite(), func(m migrations.Migration, body string) error {
		if m.Version == skip {
			return nil
		}
		return applyOne(ctx, w, m.Version, m.Name, body)
	})
}

// applyOne applies migration v, named name, whose SQL is body, in a
// transaction of w, unless it is applied already.
func applyOne(ctx context.Context, w *sql.DB, v int, name, body string) error {
	tx, err := w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migration %s: %w", name, err)
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations WHERE version = ?`, v).Scan(&n); err != nil {
		return fmt.Errorf("migration %s: %w", name, err)
	}
	if n > 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, body); err != nil {
		return fmt.Errorf("migration %s: %w", name, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied) VALUES (?, ?, ?)`, v, name, audit.FormatTime(time.Now())); err != nil {
		return fmt.Errorf("migration %s: %w", name, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migration %s: %w", name, err)
	}
	return nil
}

// LatestMigration is the version of the last embedded migration.
func LatestMigration() int64 { return migrations.Latest(migrations.SQLite()) }

// IsBusy reports whether err is SQLite's "busy" or "locked": another
// connection holds a lock, which goes away.
func IsBusy(err error) bool {
	c := sqliteCode(err)
	return c == sqlite3.SQLITE_BUSY || c == sqlite3.SQLITE_LOCKED
}

// DataVersion is SQLite's data version of the main database on the
// driver's connection dc (SQLITE_FCNTL_DATA_VERSION): it changes with
// every commit the connection has seen, its own and those of others.
func DataVersion(dc any) (uint32, error) {
	fc, ok := dc.(sqlitedriver.FileControl)
	if !ok {
		return 0, errors.New("data version: the driver has no file control")
	}
	v, err := fc.FileControlDataVersion("main")
	if err != nil {
		return 0, fmt.Errorf("data version: %w", err)
	}
	return v, nil
}

// PersistWAL keeps the -wal and -shm files when the last connection
// closes, so that a reader opening the database read-only (on a full disk,
// say) finds them and creates nothing.
func PersistWAL(ctx context.Context, conn *sql.Conn) error {
	return conn.Raw(func(dc any) error {
		fc, ok := dc.(sqlitedriver.FileControl)
		if !ok {
			return nil
		}
		if _, err := fc.FileControlPersistWAL("main", 1); err != nil {
			return fmt.Errorf("persist WAL: %w", err)
		}
		return nil
	})
}

// Damaged reports whether err is SQLite's word that the database file is
// corrupt, or not a database: a log that cannot be read because it was
// damaged fails verification, while one that cannot be reached (a
// refused connection) cannot be verified here.
func Damaged(err error) bool {
	c := sqliteCode(err)
	return c == sqlite3.SQLITE_CORRUPT || c == sqlite3.SQLITE_NOTADB
}

// sqliteCode is the primary result code of an SQLite error, -1 for any
// other error.
func sqliteCode(err error) int {
	var se *sqlitedriver.Error
	if !errors.As(err, &se) {
		return -1
	}
	return se.Code() & 0xff
}
