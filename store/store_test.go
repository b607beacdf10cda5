package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store/sqlite"
)

func openDB(t testing.TB, path string) *DB {
	t.Helper()
	db, err := testOpen(context.Background(), Options{Path: path, Durability: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func rec(i int, kind string) *guard.Record {
	return &guard.Record{CallID: fmt.Sprintf("call-%d", i), Kind: kind, Server: "files", Method: "tools/call",
		Tool: "write_file", Arguments: `{"path":"/tmp/` + strconv.Itoa(i) + `"}`, Decision: guard.DecisionAllowed}
}

// rawDB opens the file as an attacker would, without guard.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	r, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if _, err := r.Exec(`DROP TRIGGER records_no_update; DROP TRIGGER records_no_delete`); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestGroupCommitKeepsTheChain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.db")
	db := openDB(t, path)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				if err := db.Append(rec(g*100+i, guard.KindRequest), rec(g*100+i, guard.KindOutcome)); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openDB(t, path)
	defer db.Close()
	rep, err := db.Verifier().Verify(context.Background())
	if err != nil || !rep.OK || rep.Records != 1600 {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	// The two records of one call are adjacent: committed together, in order.
	var prev *guard.Record
	_ = db.Reader().Records(context.Background(), func(r *guard.Record) error {
		if r.Kind == guard.KindOutcome && (prev == nil || prev.CallID != r.CallID) {
			t.Fatalf("outcome %d is not right after its request", r.Seq)
		}
		prev = r
		return nil
	})
	n := 0
	_ = db.Reader().Query(context.Background(), Filter{}, func(c *Call) error { n++; return nil })
	if n != 800 {
		t.Fatalf("calls view has %d rows, want 800", n)
	}
}

func TestRecordsAreAppendOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.db")
	db := openDB(t, path)
	defer db.Close()
	if err := db.Append(rec(1, guard.KindRequest)); err != nil {
		t.Fatal(err)
	}
	db.ing.caughtUp(context.Background())
	r, _ := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)") // the ingester may be writing a checkpoint
	defer r.Close()
	if _, err := r.Exec(`UPDATE records SET tool = 'x' WHERE seq = 1`); err == nil || !strings.Contains(err.Error(), "append-only") {
		t.Fatalf("update: %v", err)
	}
	if _, err := r.Exec(`DELETE FROM records`); err == nil {
		t.Fatal("delete succeeded")
	}
}

func TestVerifyCatchesTampering(t *testing.T) {
	for _, tc := range []struct {
		name, sql, want string
	}{
		{"altered", `UPDATE records SET arguments = '{"path":"/etc/passwd"}' WHERE seq = 5`, "record 5 (id"},
		{"deleted", `DELETE FROM records WHERE seq = 5`, "records 5 to 5 were removed"},
		{"reordered", `UPDATE records SET seq = seq + 1000 WHERE seq IN (5, 6); UPDATE records SET seq = 5 WHERE seq = 1006; UPDATE records SET seq = 6 WHERE seq = 1005`, "reordered"},
		{"truncated", `DELETE FROM records WHERE seq > 8`, "truncated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "g.db")
			db := openDB(t, path)
			for i := range 10 {
				if err := db.Append(rec(i, guard.KindRequest)); err != nil {
					t.Fatal(err)
				}
			}
			db.Close()
			if _, err := rawDB(t, path).Exec(tc.sql); err != nil {
				t.Fatal(err)
			}
			db = openDB(t, path)
			defer db.Close()
			rep, err := db.Verifier().Verify(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK || !strings.Contains(rep.Problem, tc.want) {
				t.Fatalf("verify after %s: %+v", tc.name, rep)
			}
		})
	}
}

func TestVerifyCatchesAForgedCheckpoint(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.db")
	db := openDB(t, path)
	for i := range 3 {
		_ = db.Append(rec(i, guard.KindRequest))
	}
	db.Close()
	b, _ := os.ReadFile(path + ".checkpoint")
	forged := strings.Replace(string(b), "\n3\n", "\n2\n", 1)
	if forged == string(b) {
		t.Fatalf("no size to forge in %q", b)
	}
	if err := os.WriteFile(path+".checkpoint", []byte(forged), 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := OpenReadOnly(context.Background(), Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rep, _ := db.Verifier().Verify(context.Background())
	if rep.OK || !strings.Contains(rep.Problem, "signature does not verify") {
		t.Fatalf("verify with a forged checkpoint: %+v", rep)
	}
}

// A read-only open of a database guard never opened says so
// (ErrNotGuardDatabase), on either engine: a new PostgreSQL database, an
// empty SQLite file; a server that cannot be reached is another error.
func TestAReadOnlyOpenOfADatabaseGuardNeverOpened(t *testing.T) {
	ctx := context.Background()
	p := testPath(t)
	if !IsPostgres(p) {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	key := filepath.Join(t.TempDir(), "audit.key")
	if _, err := OpenReadOnly(ctx, Options{Path: p, KeyPath: key}); !errors.Is(err, ErrNotGuardDatabase) {
		t.Fatalf("a database guard never opened: %v", err)
	}
	unreachable := "postgres://guard@127.0.0.1:1/guard?sslmode=disable&connect_timeout=5"
	if _, err := OpenReadOnly(ctx, Options{Path: unreachable, KeyPath: key}); err == nil || errors.Is(err, ErrNotGuardDatabase) {
		t.Fatalf("a server that cannot be reached: %v", err)
	}
}

// TestHelperAppender is a child process of TestSeveralProcessesShareOneLog.
func TestHelperAppender(t *testing.T) {
	path := os.Getenv("GUARD_STORE_CHILD_DB")
	if path == "" {
		t.Skip("run as a child process only")
	}
	db := openDB(t, path)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				if err := db.Append(rec(g*1000+i, guard.KindRequest)); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestSeveralProcessesShareOneLog(t *testing.T) {
	// The children create the database together: the schema and the
	// checkpoint key must come out whole.
	path := filepath.Join(t.TempDir(), "g.db")
	var cmds []*exec.Cmd
	for range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperAppender$")
		cmd.Env = append(os.Environ(), "GUARD_STORE_CHILD_DB="+path)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
		t.Cleanup(func() {
			if t.Failed() {
				t.Log(out.String())
			}
		})
	}
	for _, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("child: %v", err)
		}
	}
	db := openDB(t, path)
	defer db.Close()
	rep, err := db.Verifier().Verify(context.Background())
	if err != nil || !rep.OK || rep.Records != 1200 {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}

// A process killed after its appends were acknowledged loses none of them:
// the next Open moves what its journal holds into the database, once, and
// removes the journal.
func TestAcknowledgedRecordsSurviveACrash(t *testing.T) {
	for _, durability := range []string{"normal", "full"} {
		t.Run(durability, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "g.db")
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperCrasher$")
			cmd.Env = append(os.Environ(), "GUARD_STORE_CRASH_DB="+path, "GUARD_STORE_CRASH_DURABILITY="+durability)
			out, err := cmd.CombinedOutput()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
				t.Fatalf("child: %v\n%s", err, out)
			}
			if left, _ := sqlite.Segments(sqlite.JournalsDir(path)); len(left) != 1 {
				t.Fatalf("the crashed process left %d journals, want its own", len(left))
			}
			db := openDB(t, path)
			defer db.Close()
			rep, err := db.Verifier().Verify(context.Background())
			if err != nil || !rep.OK || rep.Records != 50 {
				t.Fatalf("after a crash: %+v %v", rep, err)
			}
			if left, _ := sqlite.Segments(sqlite.JournalsDir(path)); len(left) != 1 {
				t.Fatalf("%d journals after the next Open, want its own only", len(left))
			}
		})
	}
}

// TestHelperCrasher appends records and exits without closing the database,
// as a process that is killed does.
func TestHelperCrasher(t *testing.T) {
	path := os.Getenv("GUARD_STORE_CRASH_DB")
	if path == "" {
		t.Skip("run as a child process only")
	}
	db, err := Open(context.Background(), Options{Path: path, Durability: os.Getenv("GUARD_STORE_CRASH_DURABILITY"),
		KeyPath: os.Getenv("GUARD_STORE_CRASH_KEY")})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if err := db.Append(rec(i, guard.KindRequest)); err != nil {
			t.Fatal(err)
		}
		if i == 24 {
			// A checkpoint trails the commits: the crash comes after one
			// was written and before the next, so the records it does not
			// cover must be found intact beyond it. The records before
			// it are in the database and still in the journal.
			waitFor(t, "the first checkpoint", func() bool { _, err := os.Stat(path + ".checkpoint"); return err == nil })
		}
	}
	if os.Getenv("GUARD_STORE_CRASH_MORE") != "" {
		// The records so far in the database, past the checkpoint, and
		// five more in the journal alone.
		db.ing.caughtUp(context.Background())
		for i := 50; i < 55; i++ {
			if err := db.Append(rec(i, guard.KindRequest)); err != nil {
				t.Fatal(err)
			}
		}
	}
	os.Exit(3) // no Close
}

func newApproval(id string) *guard.Approval {
	now := time.Now().UTC()
	return &guard.Approval{ID: id, Server: "files", Tool: "write_file", Arguments: `{"path":"/x"}`,
		Digest: "sha256:d", Pin: "sha256:p", PolicyVersion: "v1", State: guard.ApprovalPending,
		CreatedAt: now, ExpiresAt: now.Add(time.Minute)}
}

// ApprovalsByID reads the approvals it is given, with their reviews, and
// leaves out the ids none has.
func TestApprovalsByID(t *testing.T) {
	db := openDB(t, testPath(t))
	defer db.Close()
	ctx := context.Background()
	for _, id := range []string{"a1", "a2", "a3"} {
		a := newApproval(id)
		a.Digest = "sha256:" + id
		if err := db.Holds().CreateApproval(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Holds().DecideApproval(ctx, "a3", false, "bob", "not now"); err != nil {
		t.Fatal(err)
	}
	got, err := db.Holds().ApprovalsByID(ctx, []string{"a3", "nope", "a1"})
	if err != nil || len(got) != 2 || got[0].ID != "a1" || got[1].ID != "a3" {
		t.Fatalf("approvals by id: %+v %v", got, err)
	}
	if a := got[1]; a.State != guard.ApprovalDenied || a.DecidedBy != "bob" || len(a.Reviews) != 1 || a.Reviews[0].Reason != "not now" {
		t.Fatalf("a3: %+v", a)
	}
	if got, err := db.Holds().ApprovalsByID(ctx, nil); err != nil || len(got) != 0 {
		t.Fatalf("no ids: %v %v", got, err)
	}
}

func TestFirstDecisionWins(t *testing.T) {
	db := openDB(t, testPath(t))
	defer db.Close()
	ctx := context.Background()
	if err := db.Holds().CreateApproval(ctx, newApproval("a1")); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins, refusals := 0, 0
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := db.Holds().DecideApproval(ctx, "a1", i%2 == 0, fmt.Sprintf("person%d", i), "r")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, guard.ErrAlreadyDecided) && strings.Contains(err.Error(), " by person"):
				refusals++
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if wins != 1 || refusals != 7 {
		t.Fatalf("wins %d refusals %d", wins, refusals)
	}
	a, _ := db.Holds().Approval(ctx, "a1")
	if a.Arguments != "" {
		t.Fatal("complete arguments kept after the decision")
	}
}

func TestConsumeIsSingleUseAndBound(t *testing.T) {
	db := openDB(t, testPath(t))
	defer db.Close()
	ctx := context.Background()
	_ = db.Holds().CreateApproval(ctx, newApproval("a1"))
	now := time.Now()
	if _, err := db.Holds().ConsumeApproval(ctx, "files", "write_file", "sha256:d", "sha256:p", "v1", "", now); !errors.Is(err, guard.ErrNotFound) {
		t.Fatalf("a pending approval was consumed: %v", err)
	}
	if _, err := db.Holds().DecideApproval(ctx, "a1", true, "alice", ""); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][3]string{{"sha256:other", "sha256:p", "v1"}, {"sha256:d", "sha256:newpin", "v1"}, {"sha256:d", "sha256:p", "v2"}} {
		if _, err := db.Holds().ConsumeApproval(ctx, "files", "write_file", bad[0], bad[1], bad[2], "", now); !errors.Is(err, guard.ErrNotFound) {
			t.Fatalf("consumed for %v: %v", bad, err)
		}
	}
	if _, err := db.Holds().ConsumeApproval(ctx, "files", "write_file", "sha256:d", "sha256:p", "v1", "", now.Add(2*time.Minute)); !errors.Is(err, guard.ErrNotFound) {
		t.Fatal("an expired approval was consumed")
	}
	if a, err := db.Holds().ConsumeApproval(ctx, "files", "write_file", "sha256:d", "sha256:p", "v1", "", now); err != nil || a.DecidedBy != "alice" {
		t.Fatalf("consume: %v %v", a, err)
	}
	if _, err := db.Holds().ConsumeApproval(ctx, "files", "write_file", "sha256:d", "sha256:p", "v1", "", now); !errors.Is(err, guard.ErrNotFound) {
		t.Fatal("an approval was used twice")
	}
}

func TestWaitSeesAnotherConnectionsDecision(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.db")
	db := openDB(t, path)
	defer db.Close()
	other := openDB(t, path)
	defer other.Close()
	ctx := context.Background()
	_ = db.Holds().CreateApproval(ctx, newApproval("a1"))
	decided := make(chan time.Time, 1)
	go func() {
		time.Sleep(100 * time.Millisecond)
		if _, err := other.Holds().DecideApproval(ctx, "a1", true, "bob", ""); err != nil {
			t.Error(err)
		}
		decided <- time.Now()
	}()
	a, err := db.Holds().WaitApproval(ctx, "a1")
	seen := time.Now()
	if err != nil || a.State != guard.ApprovalApproved {
		t.Fatalf("wait: %v %v", a, err)
	}
	t.Logf("decision seen after %v (a figure: about a poll of the store)", seen.Sub(<-decided))
}

func TestCatalogHistory(t *testing.T) {
	db := openDB(t, testPath(t))
	defer db.Close()
	ctx := context.Background()
	v1 := guard.Tool{Name: "rm", Pin: "sha256:1", Def: []byte(`{"name":"rm","annotations":{"destructiveHint":true}}`)}
	v2 := guard.Tool{Name: "rm", Pin: "sha256:2", Def: []byte(`{"name":"rm","annotations":{"destructiveHint":false}}`)}
	t0 := time.Now()
	_ = db.Catalog().RecordTools(ctx, "files", []guard.Tool{v1}, t0, false)
	_ = db.Catalog().RecordTools(ctx, "files", []guard.Tool{v2}, t0.Add(time.Second), false)
	_ = db.Catalog().RecordTools(ctx, "files", []guard.Tool{v2}, t0.Add(2*time.Second), false)
	h, err := db.Catalog().ToolHistory(ctx, "files", "rm")
	if err != nil || len(h) != 2 || h[0].Tool.Pin != "sha256:1" || !h[1].LastSeen.After(h[1].FirstSeen) {
		t.Fatalf("history: %+v %v", h, err)
	}
	cur, _ := db.Catalog().Tools(ctx, "files")
	if len(cur) != 1 || cur[0].Pin != "sha256:2" || *cur[0].Annotations.DestructiveHint {
		t.Fatalf("current: %+v", cur)
	}
}

func FuzzChain(f *testing.F) {
	f.Add("a", "{\"k\":\"\xff\"}", "\x00\n\"\\", int64(3), "")
	f.Add("b", "{}", "", int64(0), "sre\xff\",]")
	path := filepath.Join(f.TempDir(), "fuzz.db")
	db := openDB(f, path)
	f.Cleanup(func() { db.Close() })
	f.Fuzz(func(t *testing.T, tool, args, result string, size int64, group string) {
		r := &guard.Record{Kind: guard.KindRequest, Tool: tool, Arguments: args, Result: result, RequestSize: size,
			DurationMS: -size, Time: time.UnixMilli(size).UTC()}
		if group != "" { // a caller the front authenticated
			r.User, r.UserGroups = tool, []string{group, args}
		}
		// An earlier version's journal frame gives the record back
		// exactly, and says where it ends.
		frame := appendFrame([]byte("x"), r)
		back, n, err := sqlite.ReadFrame(frame[1:])
		if err != nil || n != len(frame)-1 || !reflect.DeepEqual(back, r) {
			t.Fatalf("frame round trip: %v %d/%d %+v", err, n, len(frame)-1, back)
		}
		if _, _, err := sqlite.ReadFrame(frame[1 : len(frame)-1]); !errors.Is(err, sqlite.ErrTorn) {
			t.Fatal("a frame cut short was read")
		}
		// This release's sealed frame gives it back with the key, and
		// is forged under any other.
		key := []byte("the journal key")
		seg, _ := journalBytes([]*guard.Record{r}, key)
		if sc, err := sqlite.ScanJournal(seg, key); err != nil || len(sc.Frames) != 1 || len(sc.Damage) != 0 || !reflect.DeepEqual(sc.Frames[0].Rec, r) {
			t.Fatalf("sealed frame round trip: %v %+v", err, sc)
		}
		if sc, err := sqlite.ScanJournal(seg, []byte("another key")); err != nil || len(sc.Frames) != 0 || len(sc.Forged) != 1 {
			t.Fatalf("a sealed frame read with another key: %v %+v", err, sc)
		}
		if err := db.Append(r); err != nil {
			t.Fatal(err)
		}
		var got *guard.Record
		_ = db.Reader().Records(context.Background(), func(x *guard.Record) error {
			if x.ID == r.ID {
				got = x
			}
			return nil
		})
		if got == nil || HashRecord(got) != got.Hash || got.Tool != r.Tool || got.Arguments != r.Arguments || got.Result != r.Result ||
			!slices.Equal(got.UserGroups, r.UserGroups) {
			t.Fatalf("the stored record is not the appended one: %+v", got)
		}
	})
}

// BenchmarkAppend reports, besides the time of an append, the CPU the
// process spent per append (cpu-ns/op: user and system, every goroutine).
// "lone" is one caller appending one record at a time, as a single
// client's calls are; the numbered cases run GOMAXPROCS times that many
// callers at once.
func BenchmarkAppend(b *testing.B) {
	for _, d := range []string{"normal", "full"} {
		b.Run(d+"/lone", func(b *testing.B) {
			db, err := Open(context.Background(), Options{Path: filepath.Join(b.TempDir(), "b.db"), Durability: d})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			defer reportCPU(b, db)()
			for b.Loop() {
				if err := db.Append(rec(1, guard.KindRequest)); err != nil {
					b.Fatal(err)
				}
			}
		})
		for _, n := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/%d", d, n), func(b *testing.B) {
				db, err := Open(context.Background(), Options{Path: filepath.Join(b.TempDir(), "b.db"), Durability: d})
				if err != nil {
					b.Fatal(err)
				}
				defer db.Close()
				defer reportCPU(b, db)()
				b.SetParallelism(n)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := db.Append(rec(1, guard.KindRequest)); err != nil {
							b.Fatal(err)
						}
					}
				})
			})
		}
	}
}

// reportCPU reports the CPU time per op of the whole process, the
// ingester's work for the records appended included.
func reportCPU(b *testing.B, db *DB) func() {
	b.Helper()
	start := cpuTime(b)
	return func() {
		db.ing.caughtUp(context.Background())
		b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
	}
}

func TestFilesAreOwnerOnly(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("Windows keeps access in ACLs, not modes: guard's files are the user's as their directory is (%LOCALAPPDATA%)")
	}
	dir := filepath.Join(t.TempDir(), "data")
	path := filepath.Join(dir, "g.db")
	db := openDB(t, path)
	if err := db.Append(rec(1, guard.KindRequest)); err != nil {
		t.Fatal(err)
	}
	db.Close()
	for _, f := range []string{dir, path, path + ".checkpoint", filepath.Join(dir, "audit.key"), path + "-wal", path + "-shm"} {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s is %v: others can read it", f, st.Mode().Perm())
		}
	}
}

// CountApprovals' count and newest change when an approval joins the state
// or leaves it; CountReviews counts the definitions in a review state.
func TestCounts(t *testing.T) {
	db := openDB(t, testPath(t))
	defer db.Close()
	ctx := context.Background()
	count := func() (int, string) {
		t.Helper()
		n, newest, err := db.Holds().CountApprovals(ctx, guard.ApprovalPending)
		if err != nil {
			t.Fatal(err)
		}
		return n, newest
	}
	if n, newest := count(); n != 0 || newest != "" {
		t.Fatalf("empty: %d %q", n, newest)
	}
	for _, id := range []string{"a1", "a2"} {
		a := newApproval(id)
		a.Digest = "sha256:" + id
		if err := db.Holds().CreateApproval(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	n, before := count()
	if n != 2 || !strings.HasSuffix(before, " a2") {
		t.Fatalf("two pending: %d %q", n, before)
	}
	if _, err := db.Holds().DecideApproval(ctx, "a1", true, "alice", ""); err != nil {
		t.Fatal(err)
	}
	if n, newest := count(); n != 1 || newest != before {
		t.Fatalf("one decided: %d %q", n, newest)
	}
	if err := db.Catalog().RecordTools(ctx, "files", []guard.Tool{{Name: "a", Pin: "p1", Def: []byte(`{"name":"a"}`)}}, time.Now(), false); err != nil {
		t.Fatal(err)
	}
	if err := db.Catalog().RecordTools(ctx, "files", []guard.Tool{{Name: "a", Pin: "p2", Def: []byte(`{"name":"a","description":"x"}`)}}, time.Now(), false); err != nil {
		t.Fatal(err)
	}
	for state, want := range map[string]int{guard.ReviewAccepted: 1, guard.ReviewPending: 1, guard.ReviewRejected: 0} {
		if n, err := db.Catalog().CountReviews(ctx, state); err != nil || n != want {
			t.Errorf("%s reviews: %d %v, want %d", state, n, err, want)
		}
	}
}
