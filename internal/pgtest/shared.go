package pgtest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
)

// EngineEnv names the variable that chooses the database engine the
// store's and the end-to-end tests run on: "postgres" runs them on
// PostgreSQL (a cluster of the test binary's own, see Main), anything
// else on SQLite, the default.
const EngineEnv = "GUARD_TEST_DB"

// Postgres reports whether the tests run on PostgreSQL.
func Postgres() bool { return os.Getenv(EngineEnv) == "postgres" }

// shared is the cluster of a test binary: started by the first test that
// asks for a database, stopped by Main when the tests end.
type shared struct {
	once sync.Once
	c    *Cluster
	err  error
	n    atomic.Int64
}

var pkg shared // one per test binary; Main stops it

// Main runs a package's tests and then stops the cluster they shared, if
// one was started. A package whose tests call Database calls Main from its
// TestMain.
func Main(m *testing.M) {
	code := m.Run()
	StopShared()
	os.Exit(code)
}

// StopShared stops the cluster the test binary's tests shared, if one was
// started: for a TestMain of its own, after m.Run.
func StopShared() {
	if pkg.c != nil {
		if err := pkg.c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
		}
		pkg.c = nil
	}
}

// Database creates an empty database in the test binary's cluster
// (starting it on first use) and returns its URL. The test is skipped when
// PostgreSQL is not installed.
func Database(t testing.TB) string {
	t.Helper()
	bin := Bin()
	if bin == "" {
		t.Skipf("PostgreSQL is not installed (Debian's package postgresql, or %s naming its bin directory)", BinEnv)
	}
	pkg.once.Do(func() { pkg.c, pkg.err = start(bin) })
	if pkg.err != nil {
		t.Fatalf("pgtest: %v", pkg.err)
	}
	name := fmt.Sprintf("t%d_%s", pkg.n.Add(1), strings.ToLower(strings.NewReplacer("/", "_", "#", "_", " ", "_", "-", "_").Replace(t.Name())))
	if len(name) > 60 {
		name = name[:60]
	}
	url, err := pkg.c.CreateDatabase(name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return url
}

// CreateDatabase creates a database in the cluster and returns its URL.
func (c *Cluster) CreateDatabase(name string) (string, error) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.URL)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", err
	}
	return strings.Replace(c.URL, "/postgres?", "/"+name+"?", 1), nil
}
