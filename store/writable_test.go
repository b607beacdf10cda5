package store

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/internal/pgtest"
)

// The log is unwritable from the first write that fails, a probe's
// included, until an append succeeds: a probe that passes once the cause
// is gone writes nothing, and leaves that to an append. On SQLite another
// process holds the write lock past BusyWait; on PostgreSQL the server is
// stopped.
func TestWriteFailureLastsUntilAnAppendSucceeds(t *testing.T) {
	ctx := context.Background()
	var db *DB
	var cause string
	var breakIt, mendIt func()
	if pgtest.Postgres() {
		c := pgtest.Start(t) // a cluster of this test's own, to stop
		var err error
		if db, err = Open(ctx, Options{Path: c.URL, KeyPath: filepath.Join(t.TempDir(), "audit.key")}); err != nil {
			t.Fatal(err)
		}
		cause = "connection refused"
		breakIt = func() {
			if err := c.Halt(); err != nil {
				t.Fatal(err)
			}
		}
		mendIt = func() {
			if err := c.Resume(); err != nil {
				t.Fatal(err)
			}
		}
	} else {
		path := filepath.Join(t.TempDir(), "g.db")
		var err error
		if db, err = Open(ctx, Options{Path: path, Durability: "normal", BusyWait: 200 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		cause = "database is locked"
		var release func()
		breakIt = func() { release = lockDB(t, path) }
		mendIt = func() { release() }
	}
	defer db.Close()
	if err := db.Append(rec(1, guard.KindRequest)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Writing().WriteFailure(); err != nil || db.Writing().ProbeWrite(ctx) != nil {
		t.Fatalf("a writable log: %v", err)
	}
	writes := db.Writing().Writes()
	changed := db.Writing().WritesChanged()
	breakIt()
	if err := db.Writing().ProbeWrite(ctx); err == nil {
		t.Fatal("a probe passed while the log cannot be written")
	}
	<-changed
	if _, err := db.Writing().WriteFailure(); err == nil {
		t.Fatal("a failed probe left the log writable")
	}
	if db.Writing().Writes() != writes {
		t.Fatal("a failed probe counts as a write")
	}
	// Appends fail too (on SQLite, once the ingester gives up on the
	// lock: the journal takes them until then), and a failure that goes
	// on keeps its start.
	waitFor(t, "an append to fail", func() bool { return db.Append(rec(2, guard.KindRequest)) != nil })
	since, err := db.Writing().WriteFailure()
	if err == nil || !strings.Contains(err.Error(), cause) || since.IsZero() {
		t.Fatalf("after a failed append: %v since %v, want %q", err, since, cause)
	}
	if err := db.Writing().ProbeWrite(ctx); err == nil {
		t.Fatal("a probe passed while the log cannot be written")
	}
	if s, err := db.Writing().WriteFailure(); err == nil || !s.Equal(since) {
		t.Fatalf("after another failure: %v since %v, want since %v", err, s, since)
	}
	mendIt()
	waitFor(t, "a probe to pass", func() bool { return db.Writing().ProbeWrite(ctx) == nil })
	if _, err := db.Writing().WriteFailure(); err == nil {
		t.Fatal("a probe that passed made the log writable: nothing was written")
	}
	changed = db.Writing().WritesChanged()
	// The ingester may still be retrying its batch on SQLite: an append
	// goes in once it has.
	waitFor(t, "an append to succeed", func() bool { return db.Append(rec(3, guard.KindRequest)) == nil })
	<-changed
	if _, err := db.Writing().WriteFailure(); err != nil || db.Writing().Writes() == writes {
		t.Fatalf("after an append succeeded: %v", err)
	}
}
