package pgtest

import (
	"context"
	"net"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
)

// A cluster is the test's own: its data directory is the one it made, it
// takes connections on its port, and it is gone once stopped.
func TestAThrowawayClusterOfItsOwn(t *testing.T) {
	if Bin() == "" {
		t.Skip("PostgreSQL is not installed")
	}
	c, err := start(Bin())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.URL)
	if err != nil {
		c.Stop()
		t.Fatal(err)
	}
	var dataDir, user string
	err = conn.QueryRow(ctx, `SELECT current_setting('data_directory'), current_user`).Scan(&dataDir, &user)
	conn.Close(ctx)
	if err != nil || dataDir != filepath.Join(c.Dir, "data") || user != "guard" {
		c.Stop()
		t.Fatalf("data directory %q, user %q (%v); want %q and guard", dataDir, user, err, filepath.Join(c.Dir, "data"))
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if nc, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(c.Port)); err == nil {
		nc.Close()
		t.Fatalf("something still listens on port %d after the cluster stopped", c.Port)
	}
}
