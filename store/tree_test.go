package store

import (
	"bytes"
	"context"
	"database/sql"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
	"golang.org/x/mod/sumdb/tlog"
)

// storedTree reads every stored tree hash.
func storedTree(t *testing.T, db *DB) map[int64]tlog.Hash {
	t.Helper()
	rows, err := db.r.Query(`SELECT idx, hash FROM tree_hashes ORDER BY idx`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int64]tlog.Hash{}
	for rows.Next() {
		var idx int64
		var b []byte
		if err := rows.Scan(&idx, &b); err != nil {
			t.Fatal(err)
		}
		var h tlog.Hash
		copy(h[:], b)
		out[idx] = h
	}
	return out
}

// The stored tree is the one tlog builds from the records' canonical
// forms, whichever writer appended them and however they were batched,
// and the latest checkpoint signs its root.
func TestTheTreeIsTlogsTreeOfTheRecords(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "g.db")
	a := openDB(t, path)
	b := openDB(t, path)
	var wg sync.WaitGroup
	for g, db := range []*DB{a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				if err := db.Append(rec(g*100+i, guard.KindRequest), rec(g*100+i, guard.KindOutcome)); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	b.Close()
	a.Close()
	db := openDB(t, path)
	defer db.Close()

	want := map[int64]tlog.Hash{}
	reader := tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		for i, x := range idx {
			out[i] = want[x]
		}
		return out, nil
	})
	var n int64
	_ = db.Reader().Records(ctx, func(r *guard.Record) error {
		hs, err := tlog.StoredHashes(n, audit.AppendCanonical(nil, r), reader)
		if err != nil {
			t.Fatal(err)
		}
		for j, h := range hs {
			want[tlog.StoredHashIndex(0, n)+int64(j)] = h
		}
		n++
		return nil
	})
	got := storedTree(t, db)
	if n != 200 || len(got) != len(want) || int64(len(want)) != tlog.StoredHashCount(n) {
		t.Fatalf("%d records, %d stored hashes, want %d", n, len(got), len(want))
	}
	for idx, h := range want {
		if got[idx] != h {
			t.Fatalf("stored hash %d differs from tlog's", idx)
		}
	}
	root, err := tlog.TreeHash(n, reader)
	if err != nil {
		t.Fatal(err)
	}
	c, err := db.LatestCheckpoint(ctx)
	if err != nil || c.Size != n || c.Root != root {
		t.Fatalf("latest checkpoint %+v %v, want size %d root %s", c, err, n, root)
	}
	// Every checkpoint was kept, in order, each extending the one before.
	rows, err := db.r.Query(`SELECT size, note FROM checkpoints ORDER BY size`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var prev *audit.Checkpoint
	for rows.Next() {
		var size int64
		var text string
		if err := rows.Scan(&size, &text); err != nil {
			t.Fatal(err)
		}
		c, err := audit.OpenCheckpoint([]byte(text), db.signer.Verifier())
		if err != nil || c.Size != size {
			t.Fatalf("checkpoint %d: %+v %v", size, c, err)
		}
		if prev != nil {
			p, err := tlog.ProveTree(c.Size, prev.Size, reader)
			if err == nil {
				err = tlog.CheckTree(p, c.Size, c.Root, prev.Size, prev.Root)
			}
			if err != nil {
				t.Fatalf("checkpoint %d does not extend %d: %v", c.Size, prev.Size, err)
			}
		}
		prev = c
	}
	if rep, err := db.Verifier().Verify(ctx); err != nil || !rep.OK || rep.Records != 200 || rep.Witnessed {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}

func TestTheTreeAndCheckpointsAreAppendOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.db")
	db := openDB(t, path)
	if err := db.Append(rec(1, guard.KindRequest)); err != nil {
		t.Fatal(err)
	}
	db.Close()
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	for _, q := range []string{`UPDATE tree_hashes SET hash = x'00'`, `DELETE FROM tree_hashes`,
		`UPDATE checkpoints SET size = 7`, `DELETE FROM checkpoints`} {
		if _, err := raw.Exec(q); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: %v", q, err)
		}
	}
}

// captureLog is a logger whose records a test reads.
type captureLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (c *captureLog) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.Write(p)
}

func (c *captureLog) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.String()
}

// Truncating the log and appending again gets no checkpoint: the new tree
// does not extend the last one. The refusal is logged and counted, and
// neither the table nor the file takes a checkpoint of the rewritten log.
func TestNoCheckpointForALogThatDoesNotExtendTheLast(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "g.db")
	db := openDB(t, path)
	for i := range 10 {
		if err := db.Append(rec(i, guard.KindRequest)); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	before, _ := os.ReadFile(path + ".checkpoint")
	// Records 7 to 10 and their tree hashes go (leaf 6 is at index 10).
	if _, err := rawDB(t, path).Exec(`DROP TRIGGER tree_hashes_no_delete;
		DELETE FROM records WHERE seq > 6; DELETE FROM tree_hashes WHERE idx >= 10`); err != nil {
		t.Fatal(err)
	}
	var logs captureLog
	db, err := Open(ctx, Options{Path: path, Durability: "normal", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		if err := db.Append(rec(100+i, guard.KindRequest)); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.ckpt.writeCheckpoint(); err == nil || !strings.Contains(err.Error(), "truncated or rewritten") {
		t.Fatalf("checkpoint of a rewritten log: %v", err)
	}
	if n := db.Integrity().CheckpointRefusals(); n < 2 { // at Open, and now
		t.Fatalf("refusals counted: %d", n)
	}
	db.Close()
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "does not extend the last checkpoint") {
		t.Fatalf("the refusal was not logged: %s", logs.String())
	}
	after, _ := os.ReadFile(path + ".checkpoint")
	if !bytes.Equal(before, after) {
		t.Fatalf("the checkpoint file was replaced: %s", after)
	}
	ro, err := OpenReadOnly(ctx, Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var max int64
	_ = ro.r.QueryRow(`SELECT max(size) FROM checkpoints`).Scan(&max)
	if max != 10 {
		t.Fatalf("the latest checkpoint kept is of %d records, want 10", max)
	}
	rep, err := ro.Verifier().Verify(ctx)
	if err != nil || rep.OK || !strings.Contains(rep.Problem, "the checkpoint of 10 records kept in the database does not match the log") {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}

// Records without their part of the tree (as a version of guard without
// the tree appends them) get it when a writable guard opens the log; a
// tree hash altered, or a leaf that is not its record's, fails verify.
func TestTheTreeIsCompletedAndItsHashesVerified(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "g.db")
	db := openDB(t, path)
	for i := range 10 {
		if err := db.Append(rec(i, guard.KindRequest)); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	raw := rawDB(t, path)
	if _, err := raw.Exec(`DROP TRIGGER tree_hashes_no_delete; DROP TRIGGER tree_hashes_no_update;
		DELETE FROM tree_hashes WHERE idx >= 7`); err != nil { // leaves 5 to 10
		t.Fatal(err)
	}
	db = openDB(t, path)
	if err := db.Append(rec(10, guard.KindRequest)); err != nil {
		t.Fatal(err)
	}
	db.Close()
	verify := func() audit.Report {
		t.Helper()
		ro, err := OpenReadOnly(ctx, Options{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		defer ro.Close()
		rep, err := ro.Verifier().Verify(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	if rep := verify(); !rep.OK || rep.Records != 11 {
		t.Fatalf("verify after the tree was completed: %+v", rep)
	}
	// Leaf 3 (index 3) replaced by leaf 4's hash; then an inner node.
	if _, err := raw.Exec(`UPDATE tree_hashes SET hash = (SELECT hash FROM tree_hashes WHERE idx = 4) WHERE idx = 3`); err != nil {
		t.Fatal(err)
	}
	if rep := verify(); rep.OK || !strings.Contains(rep.Problem, "the tree's leaf of record 3 does not match the record") {
		t.Fatalf("verify with a wrong leaf: %+v", rep)
	}
}

// Each new checkpoint reaches the witnesses: a file it is appended to, a
// directory with a file per checkpoint, an HTTP endpoint and the local
// syslog socket. A witness that fails is counted and logged; one that
// hangs does not hold up appends or checkpoints.
func TestWitnessesGetEachCheckpoint(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the local syslog is a Unix datagram socket, which Windows has not")
	}
	ctx := context.Background()
	dir := t.TempDir()
	var mu sync.Mutex
	var posted [][]byte
	got := make(chan struct{}, 100)
	okSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		posted = append(posted, b)
		mu.Unlock()
		got <- struct{}{}
	}))
	defer okSrv.Close()
	failSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusServiceUnavailable)
	}))
	defer failSrv.Close()
	sock := filepath.Join(dir, "log.sock")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	appended := filepath.Join(dir, "checkpoints.txt")
	perFile := filepath.Join(dir, "witness")
	if err := os.Mkdir(perFile, 0o700); err != nil {
		t.Fatal(err)
	}
	var logs captureLog
	path := filepath.Join(dir, "g.db")
	db, err := Open(ctx, Options{Path: path, Durability: "normal", SyslogSocket: sock,
		Logger:    slog.New(slog.NewTextHandler(&logs, nil)),
		Witnesses: []string{fileURL(appended), fileURL(perFile), okSrv.URL, "syslog", failSrv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		if err := db.Append(rec(round, guard.KindRequest)); err != nil {
			t.Fatal(err)
		}
		db.ing.caughtUp(ctx)
		db.ckpt.dirty.Store(true)
		if err := db.ckpt.writeCheckpoint(); err != nil {
			t.Fatal(err)
		}
	}
	db.Close() // delivers what is queued
	v := db.signer.Verifier()
	if len(got) < 2 {
		t.Fatalf("the HTTP witness got %d checkpoints", len(got))
	}
	mu.Lock()
	for i, b := range posted {
		if c, err := audit.OpenCheckpoint(b, v); err != nil || c.Size != int64(i+1) {
			t.Fatalf("posted checkpoint %d: %+v %v", i, c, err)
		}
	}
	mu.Unlock()
	b, _ := os.ReadFile(appended)
	notes := strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n\n")
	// A note is its text, a blank line and its signature: two parts each.
	if len(notes) != 4 {
		t.Fatalf("appended witness file: %q", b)
	}
	if c, err := audit.OpenCheckpoint([]byte(notes[2]+"\n\n"+notes[3]+"\n"), v); err != nil || c.Size != 2 {
		t.Fatalf("last appended checkpoint: %+v %v", c, err)
	}
	for _, name := range []string{"00000000000000000001.checkpoint", "00000000000000000002.checkpoint"} {
		b, err := os.ReadFile(filepath.Join(perFile, name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := audit.OpenCheckpoint(b, v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	buf := make([]byte, 4096)
	_ = ln.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := ln.Read(buf)
	if err != nil {
		t.Fatalf("syslog: %v", err)
	}
	msg := string(buf[:n])
	i := strings.Index(msg, "audit checkpoint ")
	if i < 0 {
		t.Fatalf("syslog message: %q", msg)
	}
	text := strings.ReplaceAll(strings.TrimSpace(msg[i+len("audit checkpoint "):]), `\n`, "\n") + "\n"
	if c, err := audit.OpenCheckpoint([]byte(text), v); err != nil || c.Size != 1 {
		t.Fatalf("checkpoint from syslog %q: %+v %v", text, c, err)
	}
	if n := db.Integrity().WitnessFailures(); n != 2 {
		t.Fatalf("witness failures: %d, want 2 (the failing endpoint, twice)", n)
	}
	if !strings.Contains(logs.String(), "503 Service Unavailable") {
		t.Fatalf("the failure was not logged: %s", logs.String())
	}
}

// A witness that does not answer holds up neither appends nor
// checkpoints.
func TestAHangingWitnessDoesNotBlock(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hang.Close()
	path := filepath.Join(t.TempDir(), "g.db")
	db, err := Open(ctx, Options{Path: path, Durability: "normal", Witnesses: []string{hang.URL}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range audit.WitnessQueue + 10 {
		if err := db.Append(rec(i, guard.KindRequest)); err != nil {
			t.Fatal(err)
		}
		db.ing.caughtUp(ctx)
		db.ckpt.dirty.Store(true)
		if err := db.ckpt.writeCheckpoint(); err != nil {
			t.Fatal(err)
		}
	}
	// The queue filled up behind the hanging one: the rest were dropped
	// and counted.
	if n := db.Integrity().WitnessFailures(); n < 9 {
		t.Fatalf("witness failures: %d", n)
	}
	c, err := db.LatestCheckpoint(ctx)
	if err != nil || c.Size != audit.WitnessQueue+10 {
		t.Fatalf("latest checkpoint: %+v %v", c, err)
	}
	close(release) // the witness answers: Close delivers what is queued
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestVerifyTime builds a log of GUARD_VERIFY_RECORDS records through the
// append path (the journal and the ingester), then times a verification
// of the whole of it. It is skipped unless the variable is set:
//
//	GUARD_VERIFY_RECORDS=2000000 go test ./store/ -run TestVerifyTime -v -timeout 30m
func TestVerifyTime(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("GUARD_VERIFY_RECORDS"))
	if n <= 0 {
		t.Skip("set GUARD_VERIFY_RECORDS to the number of records")
	}
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "g.db")
	db := openDB(t, path)
	start := time.Now()
	const per = 1000
	var last <-chan error
	for i := 0; i < n; i += per {
		recs := make([]*guard.Record, 0, per)
		for j := i; j < min(i+per, n); j++ {
			kind := guard.KindRequest
			if j%2 == 1 {
				kind = guard.KindOutcome
			}
			recs = append(recs, rec(j/2, kind))
		}
		last = db.AppendAsync(recs...)
	}
	if err := <-last; err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("built %d records in %v", n, time.Since(start).Round(time.Millisecond))
	ro, err := OpenReadOnly(ctx, Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start = time.Now()
	rep, err := ro.Verifier().Verify(ctx)
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	if err != nil || !rep.OK || rep.Records != int64(n) {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	t.Logf("verified %d records in %v (%.2f µs a record; %d MB allocated in all, %d MB heap after)", n, took.Round(time.Millisecond),
		float64(took.Microseconds())/float64(n), (after.TotalAlloc-before.TotalAlloc)>>20, after.HeapInuse>>20)
}

// A database an earlier version wrote, not yet opened by a writable
// guard, has no tree: verify says it cannot verify it yet rather than
// pass it.
func TestVerifyOfALogWithoutATree(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.db")
	db := openDB(t, path)
	if err := db.Append(rec(1, guard.KindRequest)); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := rawDB(t, path).Exec(`DROP TABLE tree_hashes; DROP TABLE checkpoints; DELETE FROM schema_migrations WHERE version = 7`); err != nil {
		t.Fatal(err)
	}
	ro, err := OpenReadOnly(context.Background(), Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	rep, err := ro.Verifier().Verify(context.Background())
	if err != nil || rep.Verdict() != audit.VerdictUnverifiable || !strings.Contains(rep.Why(), "no Merkle tree yet") {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	// A writable open builds it over the records there.
	db = openDB(t, path)
	db.Close()
	ro2, err := OpenReadOnly(context.Background(), Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer ro2.Close()
	if rep, err := ro2.Verifier().Verify(context.Background()); err != nil || !rep.OK || rep.Records != 1 {
		t.Fatalf("verify once the tree is built: %+v %v", rep, err)
	}
}
