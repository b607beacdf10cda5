package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/internal/tmpfs"
	"github.com/guard-mcp/guard/store/sqlite"
)

// waitFor polls a condition the writer reaches by itself (no event to wait
// on from outside the package's goroutine), failing after a generous time.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// lockDB takes the database's write lock from another connection, as
// another guard process committing does; the returned func releases it.
func lockDB(t *testing.T, path string) func() {
	t.Helper()
	c, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := c.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
			conn.Close()
			c.Close()
		})
	}
	t.Cleanup(release)
	return release
}

// verifyAll closes db (which writes the last checkpoint), then checks the
// chain and that every acknowledged record is there.
func verifyAll(t *testing.T, db *DB, acked []*guard.Record) {
	t.Helper()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := OpenReadOnly(context.Background(), Options{Path: db.Path()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rep, err := db.Verifier().Verify(context.Background())
	if err != nil || !rep.OK {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	have := map[string]bool{}
	_ = db.Reader().Records(context.Background(), func(r *guard.Record) error { have[r.ID] = true; return nil })
	for _, r := range acked {
		if !have[r.ID] {
			t.Fatalf("acknowledged record %s is not in the log", r.ID)
		}
	}
}

// Many goroutines appending at once, each keeping several appends in
// flight, make one complete chain.
func TestConcurrentAppendersMakeOneChain(t *testing.T) {
	for _, durability := range []string{"normal", "full"} {
		t.Run(durability, func(t *testing.T) { concurrentAppenders(t, durability) })
	}
}

func concurrentAppenders(t *testing.T, durability string) {
	db, err := Open(context.Background(), Options{Path: filepath.Join(t.TempDir(), "g.db"), Durability: durability})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const goroutines, each = 64, 100
	var wg sync.WaitGroup
	var mu sync.Mutex
	var acked []*guard.Record
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var chans []<-chan error
			var recs []*guard.Record
			for i := range each {
				r := rec(g*each+i, guard.KindRequest)
				recs = append(recs, r)
				chans = append(chans, db.AppendAsync(r))
			}
			for i, ch := range chans {
				if err := <-ch; err != nil {
					t.Error(err)
					continue
				}
				mu.Lock()
				acked = append(acked, recs[i])
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(acked) != goroutines*each {
		t.Fatalf("%d of %d appends acknowledged", len(acked), goroutines*each)
	}
	db.ing.caughtUp(context.Background())
	if db.Writing().Backlog() != 0 || db.Writing().PeakBacklog() < 1 {
		t.Fatalf("backlog %d, peak %d", db.Writing().Backlog(), db.Writing().PeakBacklog())
	}
	verifyAll(t, db, acked)
}

// poison makes the database at path refuse records of the tool "poison"
// (as a full disk refuses a write), with a trigger of the test's own; the
// returned func drops it.
func poison(t *testing.T, path string) (cure func()) {
	t.Helper()
	raw, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	if _, err := raw.Exec(`CREATE TRIGGER poison BEFORE INSERT ON records WHEN NEW.tool = 'poison'
		BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`); err != nil {
		t.Fatal(err)
	}
	return func() {
		if _, err := raw.Exec(`DROP TRIGGER poison`); err != nil {
			t.Fatal(err)
		}
	}
}

// A record the database will not take is kept, not lost: it was
// acknowledged once in the journal, new appends are refused while the
// ingester cannot commit, and once the cause goes away it reaches the
// log with everything appended before and after it.
func TestARecordTheDatabaseRefusesIsKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.db")
	db := openDB(t, path)
	defer db.Close()
	cure := poison(t, path)
	before := rec(1, guard.KindRequest)
	if err := db.Append(before); err != nil {
		t.Fatal(err)
	}
	db.ing.caughtUp(context.Background())
	bad := rec(2, guard.KindRequest)
	bad.Tool = "poison"
	if err := db.Append(bad); err != nil {
		t.Fatalf("an append is durable in the journal before the database takes it: %v", err)
	}
	waitFor(t, "the ingester to fail", func() bool { return db.ing.failed() != nil })
	if err := db.Append(rec(3, guard.KindRequest)); !errors.Is(err, guard.ErrAuditWrite) {
		t.Fatalf("an append while the database refuses records: %v", err)
	}
	cure()
	waitFor(t, "the ingester to recover", func() bool { return db.ing.failed() == nil })
	after := rec(4, guard.KindRequest)
	if err := db.Append(after); err != nil {
		t.Fatalf("an append once the database takes records again: %v", err)
	}
	var n int
	db.ing.caughtUp(context.Background())
	if err := db.r.QueryRow(`SELECT count(*) FROM records`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("%d records, want 3 (%v)", n, err)
	}
	verifyAll(t, db, []*guard.Record{before, bad, after})
}

// Another process holding the write lock makes the ingester wait, not
// fail: appends go on into the journal. Past BusyWait new appends are
// refused; once the lock is gone, every acknowledged record is in the
// log.
func TestAnotherProcessesLockIsWaitedFor(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.db")
	db, err := Open(context.Background(), Options{Path: path, Durability: "normal", BusyWait: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	release := lockDB(t, path)
	first := rec(1, guard.KindRequest)
	if err := db.Append(first); err != nil {
		t.Fatalf("append while the database is locked: %v", err)
	}
	waitFor(t, "the ingester to give up on the lock", func() bool { return db.ing.failed() != nil })
	if err := db.Append(rec(2, guard.KindRequest)); !errors.Is(err, guard.ErrAuditWrite) {
		t.Fatalf("append while locked past BusyWait: %v", err)
	}
	release()
	waitFor(t, "the ingester to commit again", func() bool { return db.ing.failed() == nil })
	r := rec(3, guard.KindRequest)
	if err := db.Append(r); err != nil {
		t.Fatalf("append once the lock is gone: %v", err)
	}
	verifyAll(t, db, []*guard.Record{first, r})

	// Within BusyWait, the ingester waits for the lock and commits.
	db2 := openDB(t, filepath.Join(t.TempDir(), "h.db"))
	defer db2.Close()
	release = lockDB(t, db2.Path())
	r = rec(4, guard.KindRequest)
	if err := db2.Append(r); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the commit to begin", func() bool { return db2.stats.attempts.Load() > 0 })
	release()
	verifyAll(t, db2, []*guard.Record{r})
}

// A full backlog blocks AppendAsync until the ingester makes room;
// nothing is refused.
func TestAFullBacklogBlocksAndDoesNotRefuse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.db")
	db := openDB(t, path)
	defer db.Close()
	release := lockDB(t, path)
	var acked []*guard.Record
	var chans []<-chan error
	for i := range maxBacklog {
		r := rec(i, guard.KindRequest)
		acked = append(acked, r)
		chans = append(chans, db.AppendAsync(r)) // none of these block
	}
	extra := rec(maxBacklog, guard.KindRequest)
	acked = append(acked, extra)
	returned := make(chan (<-chan error), 1)
	go func() { returned <- db.AppendAsync(extra) }()
	waitFor(t, "the extra append to wait for room", func() bool { return db.stats.waits.Load() > 0 })
	select {
	case <-returned:
		t.Fatal("AppendAsync returned while the backlog was full")
	default:
	}
	release()
	chans = append(chans, <-returned)
	for i, ch := range chans {
		if err := <-ch; err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	if db.Writing().PeakBacklog() != maxBacklog {
		t.Fatalf("peak backlog %d, want %d", db.Writing().PeakBacklog(), maxBacklog)
	}
	verifyAll(t, db, acked)
}

// fillDisk writes a file until the disk is full and returns its path.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := bytes.Repeat([]byte{1}, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			break
		}
	}
	for _, n := range []int{4096, 512, 1} { // the last blocks
		for {
			if _, err := f.Write(chunk[:n]); err != nil {
				break
			}
		}
	}
	return path
}

// On a disk that fills, appends are refused while it is full and succeed
// again, without reopening, once there is room; every record acknowledged
// before, during and after is in the log, and the chain verifies.
func TestADiskThatFillsAndEmpties(t *testing.T) {
	dir := t.TempDir()
	tmpfs.Mount(t, dir, "4m")
	path := filepath.Join(dir, "g.db")
	db := openDB(t, path)
	defer db.Close()
	var acked []*guard.Record
	for i := range 20 {
		r := rec(i, guard.KindRequest)
		if err := db.Append(r); err != nil {
			t.Fatal(err)
		}
		acked = append(acked, r)
	}
	filler := fillDisk(t, dir)
	// The WAL may still have room: appends go on until it has none.
	big := string(bytes.Repeat([]byte("x"), 32<<10))
	var refused error
	for i := 100; refused == nil; i++ {
		if i > 10000 {
			t.Fatal("appends never failed on a full disk")
		}
		r := rec(i, guard.KindRequest)
		r.Result = big
		if err := db.Append(r); err != nil {
			refused = err
		} else {
			acked = append(acked, r)
		}
	}
	if !errors.Is(refused, guard.ErrAuditWrite) {
		t.Fatalf("append on a full disk: %v", refused)
	}
	t.Logf("refused on a full disk: %v", refused)
	second := rec(20000, guard.KindRequest)
	second.Result = big
	if err := db.Append(second); !errors.Is(err, guard.ErrAuditWrite) {
		t.Fatalf("a second append on the full disk: %v", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// The ingester tries again by itself: appends are taken again once
	// it has committed what waited.
	waitFor(t, "the ingester to commit again", func() bool { return db.ing.failed() == nil })
	for i := range 20 {
		r := rec(30000+i, guard.KindRequest)
		if err := db.Append(r); err != nil {
			t.Fatalf("append once the disk has room again: %v", err)
		}
		acked = append(acked, r)
	}
	verifyAll(t, db, acked)
}

// A database opened read-only on a full disk is read, verified and
// queried, and no file appears in its directory.
func TestReadOnlyOnAFullDisk(t *testing.T) {
	dir := t.TempDir()
	tmpfs.Mount(t, dir, "4m")
	path := filepath.Join(dir, "g.db")
	db := openDB(t, path)
	for i := range 10 {
		if err := db.Append(rec(i, guard.KindRequest), rec(i, guard.KindOutcome)); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Holds().CreateApproval(context.Background(), newApproval("a1")); err != nil {
		t.Fatal(err)
	}
	db.Close()
	filler := fillDisk(t, dir)
	defer os.Remove(filler)
	before := listDir(t, dir)
	ro, err := OpenReadOnly(context.Background(), Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := ro.Verifier().Verify(context.Background())
	if err != nil || !rep.OK || rep.Records != 20 {
		t.Fatalf("verify read-only: %+v %v", rep, err)
	}
	n := 0
	if err := ro.Reader().Query(context.Background(), Filter{}, func(*Call) error { n++; return nil }); err != nil || n != 10 {
		t.Fatalf("query read-only: %d %v", n, err)
	}
	if list, err := ro.Holds().Approvals(context.Background(), ""); err != nil || len(list) != 1 {
		t.Fatalf("approvals read-only: %v %v", list, err)
	}
	if err := ro.Append(rec(99, guard.KindRequest)); !errors.Is(err, guard.ErrAuditWrite) {
		t.Fatalf("append to a read-only database: %v", err)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	if after := listDir(t, dir); after != before {
		t.Fatalf("files changed:\nbefore %s\nafter  %s", before, after)
	}
}

func listDir(t *testing.T, dir string) string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, e := range es {
		b.WriteString(e.Name() + " ")
	}
	return b.String()
}

// tailReads is how many times db's writer has read the chain's tail from
// the table.
func tailReads(db *DB) int64 {
	db.ing.commitMu.Lock()
	defer db.ing.commitMu.Unlock()
	if db.ing.wc == nil {
		return 0
	}
	return db.ing.wc.tailReads
}

// Two writers on one database (as two guard processes are) take turns: each
// finds the tail the other committed, and reads it from the table only when
// something else was committed since its own last commit.
func TestTheTailFollowsAnotherWriter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.db")
	a := openDB(t, path)
	defer a.Close()
	b := openDB(t, path)
	defer b.Close()
	ctx := context.Background()
	var acked []*guard.Record
	appendTo := func(db *DB, i int) {
		t.Helper()
		r := rec(i, guard.KindRequest)
		if err := db.Append(r); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		db.ing.caughtUp(ctx) // in the database before the next append
		acked = append(acked, r)
	}
	appendTo(a, 0)
	before := tailReads(a)
	for i := 1; i <= 5; i++ {
		appendTo(a, i)
	}
	if n := tailReads(a) - before; n != 0 {
		t.Fatalf("the tail was read %d times while no one else wrote", n)
	}
	// Strict turns, then a run of the other writer.
	for i := 10; i < 30; i++ {
		if i < 20 && i%2 == 0 {
			appendTo(a, i)
		} else {
			appendTo(b, i)
		}
	}
	// A write to another table is a commit by someone else too.
	for i := 30; i < 40; i++ {
		before := tailReads(a)
		want := int64(0)
		if i%3 == 0 { // and i == 30, after b's run
			want = 1
			if err := b.Holds().CreateApproval(ctx, newApproval(fmt.Sprintf("ap%d", i))); err != nil {
				t.Fatal(err)
			}
		}
		appendTo(a, i)
		if n := tailReads(a) - before; n != want {
			t.Fatalf("append %d read the tail %d times, want %d", i, n, want)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	verifyAll(t, a, acked)
}

// Text the writer binds as NULL (the empty string) is stored as empty
// text, as any other text is stored as text.
func TestEmptyTextIsStoredAsText(t *testing.T) {
	sqliteOnly(t) // SQLite's typeof
	db := openDB(t, testPath(t))
	defer db.Close()
	empty := &guard.Record{Kind: guard.KindEvent}
	full := rec(1, guard.KindOutcome)
	full.Session, full.Client, full.Protocol, full.Direction, full.Pin = "s", "c", "p", "d", "pin"
	full.DecidedBy, full.Reason, full.Outcome, full.Result, full.Detail = "by", "why", "ok", "{}", "{}"
	if err := db.Append(empty, full); err != nil {
		t.Fatal(err)
	}
	db.ing.caughtUp(context.Background())
	cols := []string{"id", "call_id", "kind", "time", "session", "client", "protocol", "server", "direction",
		"method", "tool", "arguments", "pin", "decision", "decided_by", "reason", "outcome", "result", "detail",
		"prev_hash", "hash"}
	for _, r := range []*guard.Record{empty, full} {
		for _, col := range cols {
			var typ, v string
			if err := db.r.QueryRow(`SELECT typeof(`+col+`), `+col+` FROM records WHERE seq = ?`, r.Seq).Scan(&typ, &v); err != nil {
				t.Fatal(err)
			}
			if typ != "text" {
				t.Errorf("record %d: %s is stored as %s %q", r.Seq, col, typ, v)
			}
		}
	}
	var n int
	if err := db.r.QueryRow(`SELECT count(*) FROM records WHERE session = '' AND client = '' AND prev_hash = '' AND seq = 1`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the empty record's text is not empty: %d %v", n, err)
	}
	verifyAll(t, db, []*guard.Record{empty, full})
}

// A reader in another process sees every record acknowledged before it
// began, though the writer has not moved it into the database yet: it
// waits for the writer's journal to show that it has.
func TestAReaderWaitsForAnotherProcessesJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.db")
	db := openDB(t, path)
	defer db.Close()
	release := lockDB(t, path) // the writer cannot commit
	r := rec(1, guard.KindRequest)
	if err := db.Append(r); err != nil {
		t.Fatal(err)
	}
	reader, err := OpenReadOnly(context.Background(), Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	found := make(chan bool, 1)
	go func() {
		seen := false
		_ = reader.Reader().Query(context.Background(), Filter{}, func(c *Call) error { seen = seen || c.ID == r.CallID; return nil })
		found <- seen
	}()
	release()
	if !<-found {
		t.Fatal("a reader missed a record acknowledged before it began")
	}
}

// Journal segments are replaced once large and removed once their
// records are in the database; Close removes the last.
func TestJournalSegmentsAreReplacedAndRemoved(t *testing.T) {
	for _, durability := range []string{"normal", "full"} {
		t.Run(durability, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "g.db")
			db, err := Open(context.Background(), Options{Path: path, Durability: durability})
			if err != nil {
				t.Fatal(err)
			}
			first, _ := sqlite.Segments(sqlite.JournalsDir(path))
			big := string(bytes.Repeat([]byte("x"), 64<<10))
			var acked []*guard.Record
			for i := 0; i*len(big) < 2*sqlite.SegmentSize; i++ {
				r := rec(i, guard.KindRequest)
				r.Result = big
				if err := db.Append(r); err != nil {
					t.Fatal(err)
				}
				acked = append(acked, r)
			}
			db.ing.caughtUp(context.Background())
			waitFor(t, "the full segments to go", func() bool {
				now, _ := sqlite.Segments(sqlite.JournalsDir(path))
				return len(now) == 1 && now[0] != first[0]
			})
			verifyAll(t, db, acked)
			if left, _ := sqlite.Segments(sqlite.JournalsDir(path)); len(left) != 0 {
				t.Fatalf("%d journals after Close", len(left))
			}
		})
	}
}

// A journal that cannot be synced (a disk that fails: its descriptor is
// made invalid, as no real disk here can be made to fail an fdatasync)
// refuses the appends it was to hold, is replaced by a new journal, and
// leaves nothing in the backlog; appends are taken again at once.
func TestAJournalThatCannotBeSyncedIsReplaced(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.db")
	db, err := Open(context.Background(), Options{Path: path, Durability: "full"})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	before := rec(1, guard.KindRequest)
	if err := db.Append(before); err != nil {
		t.Fatal(err)
	}
	db.ing.jmu.Lock()
	broken := db.ing.seg
	broken.FD = ^uintptr(0)
	db.ing.jmu.Unlock()
	if err := db.Append(rec(2, guard.KindRequest)); !errors.Is(err, guard.ErrAuditWrite) {
		t.Fatalf("an append whose journal could not be synced: %v", err)
	}
	var after *guard.Record
	waitFor(t, "a new journal", func() bool {
		r := rec(3, guard.KindRequest)
		if db.Append(r) != nil {
			return false
		}
		after = r
		return true
	})
	db.ing.caughtUp(context.Background())
	if b := db.Writing().Backlog(); b != 0 {
		t.Fatalf("backlog %d after a refused append, want 0", b)
	}
	db.ing.jmu.Lock()
	replaced := db.ing.seg != broken
	db.ing.jmu.Unlock()
	if !replaced {
		t.Fatal("the journal that could not be synced is still in use")
	}
	verifyAll(t, db, []*guard.Record{before, after})
}

// A reader does not wait for this process's own journal while the
// ingester cannot commit: it reads what the database holds, at once.
func TestReadersDoNotWaitWhileTheIngesterFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.db")
	db := openDB(t, path)
	defer db.Close()
	cure := poison(t, path)
	bad := rec(1, guard.KindRequest)
	bad.Tool = "poison"
	if err := db.Append(bad); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the ingester to fail", func() bool { return db.ing.failed() != nil })
	start := time.Now()
	if err := db.Reader().Query(context.Background(), Filter{}, func(*Call) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > caughtUpWait/2 {
		t.Fatalf("a query waited %v for a journal its own ingester cannot move in", d)
	}
	cure()
	waitFor(t, "the ingester to recover", func() bool { return db.ing.failed() == nil })
	verifyAll(t, db, []*guard.Record{bad})
}

// A file in the journal directory that is not a journal is not read as
// one: Open goes on, says so in its log, and leaves the file where it is,
// while a dead process's journal beside it is moved in.
func TestAFileThatIsNotAJournalIsLeftAlone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperCrasher$")
	cmd.Env = append(os.Environ(), "GUARD_STORE_CRASH_DB="+path, "GUARD_STORE_CRASH_DURABILITY=normal")
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Fatalf("the child did not crash:\n%s", out)
	}
	stray := filepath.Join(sqlite.JournalsDir(path), "stray.log")
	if err := os.WriteFile(stray, []byte("not a journal at all, and long enough to have a header of sorts......"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	db, err := Open(context.Background(), Options{Path: path, Durability: "normal", Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatalf("Open beside a file that is not a journal: %v", err)
	}
	defer db.Close()
	if !strings.Contains(logged.String(), "stray.log: not a guard journal") {
		t.Fatalf("the log does not name the file:\n%s", logged.String())
	}
	if _, err := os.Stat(stray); err != nil {
		t.Fatalf("the file that is not a journal went: %v", err)
	}
	rep, err := db.Verifier().Verify(context.Background())
	if err != nil || !rep.OK || rep.Records != 50 {
		t.Fatalf("the dead process's records: %+v %v", rep, err)
	}
}
