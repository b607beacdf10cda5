package store

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/guard-mcp/guard/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// pgKeys holds the checkpoint key file of each PostgreSQL database a test
// made (testPath), so that every open of it signs with one key, as
// replicas do.
var pgKeys sync.Map

// testPath is where a test's database lives: a file in a directory of
// its own, or, when the tests run on PostgreSQL (pgtest.EngineEnv), a new
// database's URL.
func testPath(t testing.TB) string {
	t.Helper()
	if !pgtest.Postgres() {
		return filepath.Join(t.TempDir(), "g.db")
	}
	url := pgtest.Database(t)
	pgKeys.Store(url, filepath.Join(t.TempDir(), "audit.key"))
	return url
}

// testOpen is Open with, on PostgreSQL, the test database's key file.
func testOpen(ctx context.Context, o Options) (*DB, error) {
	if IsPostgres(o.Path) && o.KeyPath == "" {
		if k, ok := pgKeys.Load(o.Path); ok {
			o.KeyPath = k.(string)
		}
	}
	return Open(ctx, o)
}

// sqliteOnly skips a test of what only SQLite has (its files, its
// journal) when the tests run on PostgreSQL.
func sqliteOnly(t testing.TB) {
	t.Helper()
	if pgtest.Postgres() {
		t.Skip("SQLite's files only")
	}
}

// replicas opens n DBs on one new PostgreSQL database, as n replicas of
// guard serve would.
func replicas(t testing.TB, n int) []*DB {
	t.Helper()
	url := pgtest.Database(t)
	key := filepath.Join(t.TempDir(), "audit.key")
	var dbs []*DB
	for range n {
		db, err := Open(context.Background(), Options{Path: url, KeyPath: key, Durability: "normal"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		dbs = append(dbs, db)
	}
	return dbs
}
