package store

import (
	"context"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
)

// dropRequiredVia is the SQL that takes an SQLite database opened with
// rawDB back to the schema before the required_via migration.
const dropRequiredVia = dropMACColumns + `ALTER TABLE approvals DROP COLUMN required_via;
		DELETE FROM schema_migrations WHERE version = 20;
		`

// dropProcessColumns is the SQL that takes an SQLite database opened with
// rawDB back to the schema before the process migration (and the ones
// after it).
const dropProcessColumns = dropRequiredVia + `ALTER TABLE approvals DROP COLUMN process;
		ALTER TABLE replicas DROP COLUMN awake_since; ALTER TABLE replicas DROP COLUMN lapse_ms;
		DELETE FROM schema_migrations WHERE version = 19;
		`

// beats drives the heartbeats of processes on one database, on a clock
// of the test's own: each process's beat says the time it is.
type beats struct {
	t   *testing.T
	db  *DB
	now time.Time
}

// beat has each process named beat now, with a lapse of a second.
func (b *beats) beat(ids ...string) {
	b.t.Helper()
	for _, id := range ids {
		r := Replica{ID: id, Host: "laptop", PID: 42, Process: "guard run", Version: "test", Started: b.now, Seen: b.now, Lapse: time.Second}
		if err := b.db.Replicas().Heartbeat(context.Background(), r); err != nil {
			b.t.Fatal(err)
		}
	}
}

// pass moves the clock on by d in steps of a beat, each process named
// beating at each step.
func (b *beats) pass(d time.Duration, ids ...string) {
	b.t.Helper()
	const every = 200 * time.Millisecond
	for end := b.now.Add(d); b.now.Before(end); {
		b.now = b.now.Add(every)
		b.beat(ids...)
	}
}

// gone is what GoneProcesses says.
func (b *beats) gone() map[string]string {
	b.t.Helper()
	g, err := b.db.Holds().GoneProcesses(context.Background())
	if err != nil {
		b.t.Fatal(err)
	}
	return g
}

// holdOf stores a pending approval that process holds.
func holdOf(t *testing.T, db *DB, id, process string) {
	t.Helper()
	a := newApproval(id)
	a.Process = process
	if err := db.Holds().CreateApproval(context.Background(), a); err != nil {
		t.Fatal(err)
	}
}

// A process that stops beating is found gone once another has beaten
// unbroken for its lapse after its last beat, and named as its row last
// said; one that goes on beating is not; one no longer on the database is
// gone once another has beaten for the default lapse; a process no
// pending approval names is not asked about.
func TestAProcessThatStopsBeatingIsFoundGone(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, testPath(t))
	defer db.Close()
	holdOf(t, db, "h-killed", "killed")
	holdOf(t, db, "h-alive", "alive")
	holdOf(t, db, "h-left", "left")
	holdOf(t, db, "h-none", "")
	if a, err := db.Holds().Approval(ctx, "h-killed"); err != nil || a.Process != "killed" {
		t.Fatalf("the approval's process: %+v %v", a, err)
	}
	b := &beats{t: t, db: db, now: time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC)}
	b.beat("killed", "alive", "unnamed")
	killedAt := b.now

	b.pass(800*time.Millisecond, "alive", "unnamed")
	if g := b.gone(); len(g) != 0 {
		t.Fatalf("gone before a lapse went by: %v", g)
	}
	b.pass(200*time.Millisecond, "alive", "unnamed")
	g := b.gone()
	want := "guard run (pid 42 on laptop), last heard of at " + fmtTime(killedAt)
	if len(g) != 1 || g["killed"] != want {
		t.Fatalf("gone after a lapse: %v, want killed: %q", g, want)
	}
	b.pass(DefaultLapse, "alive", "unnamed")
	if g := b.gone(); len(g) != 2 || g["left"] == "" || g["alive"] != "" || g["unnamed"] != "" {
		t.Fatalf("gone after the default lapse: %v, want killed and left", g)
	}
	if _, err := db.Holds().EndApproval(ctx, "h-killed", guard.ApprovalWithdrawn, "gone"); err != nil {
		t.Fatal(err)
	}
	if g := b.gone(); len(g) != 1 || g["left"] == "" {
		t.Fatalf("gone once the killed process's hold was withdrawn: %v, want left alone", g)
	}
}

// Every process stops beating while the machine sleeps: the first to
// wake finds the others' beats lapsed, and takes none of them for gone
// until it has beaten unbroken for their lapse since it woke, by which
// time those that run have beaten too. Its own run before the sleep is
// no evidence.
func TestAProcessThatJustWokeJudgesNoOne(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, testPath(t))
	defer db.Close()
	holdOf(t, db, "h", "sleeper")
	b := &beats{t: t, db: db, now: time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC)}
	b.beat("waker", "sleeper")
	b.pass(5*time.Second, "waker", "sleeper")

	b.now = b.now.Add(time.Hour) // the lid is closed, then opened
	b.beat("waker")
	if g := b.gone(); len(g) != 0 {
		t.Fatalf("gone at the first beat after a sleep: %v", g)
	}
	list, err := db.Replicas().Replicas(ctx, b.now.Add(-time.Second))
	if err != nil || len(list) != 1 || !list[0].AwakeSince.Equal(b.now) || list[0].Lapse != time.Second {
		t.Fatalf("the waker's row: %+v %v, want a run begun now", list, err)
	}
	b.pass(600*time.Millisecond, "waker")
	b.beat("sleeper") // it woke a moment later
	b.pass(800*time.Millisecond, "waker", "sleeper")
	if g := b.gone(); len(g) != 0 {
		t.Fatalf("gone though it beats again: %v", g)
	}
	b.pass(time.Second, "waker")
	if g := b.gone(); len(g) != 1 || g["sleeper"] == "" {
		t.Fatalf("gone once it stopped beating for good: %v, want sleeper", g)
	}
}
