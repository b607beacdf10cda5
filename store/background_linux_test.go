package store

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/internal/pgtest"
)

// The ingester of a database with a journal runs on a thread of its own
// whose nice value is backgroundNice, and only that thread is lowered. On
// PostgreSQL, whose appends wait for the ingester's commits, none is.
func TestTheIngesterYieldsToTheCalls(t *testing.T) {
	before := niceThreads(t)
	db := openDB(t, testPath(t))
	defer db.Close()
	if pgtest.Postgres() {
		// Committed, once Append returns: the ingester has run.
		if err := db.Append(rec(1, guard.KindRequest)); err != nil {
			t.Fatal(err)
		}
		if n := niceThreads(t) - before; n != 0 {
			t.Fatalf("%d threads more at nice %d, want none on PostgreSQL", n, backgroundNice)
		}
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := niceThreads(t) - before
		if n == 1 {
			break
		}
		if n > 1 || time.Now().After(deadline) {
			t.Fatalf("%d threads more at nice %d, want the ingester's alone", n, backgroundNice)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// niceThreads counts this process's threads whose nice value is
// backgroundNice.
func niceThreads(t *testing.T) int {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/stat")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // a thread that ended
		}
		// The fields after the command's closing parenthesis: state is
		// field 3, nice field 19.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 16 {
			if v, err := strconv.Atoi(f[16]); err == nil && v == backgroundNice {
				n++
			}
		}
	}
	return n
}
