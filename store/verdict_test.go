package store

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
	"golang.org/x/mod/sumdb/note"
)

// tamperWith runs statements on the database at path as someone with
// access to it would, its append-only triggers out of the way.
func tamperWith(t *testing.T, path string, statements ...string) {
	t.Helper()
	ctx := context.Background()
	var raw *sql.DB
	var err error
	if IsPostgres(path) {
		raw, err = sql.Open("pgx", path)
		statements = append([]string{"SET session_replication_role = replica"}, statements...)
	} else {
		raw, err = sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
		statements = append([]string{"DROP TRIGGER records_no_update", "DROP TRIGGER records_no_delete",
			"DROP TRIGGER tree_hashes_no_update", "DROP TRIGGER tree_hashes_no_delete"}, statements...)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	conn, err := raw.Conn(ctx) // the session's setting holds for its statements
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, s := range statements {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// signedLog makes a log of n records on the tests' engine, signed with
// the key at key (made), and returns where it is and its origin.
func signedLog(t *testing.T, key string, n int) (path, origin string) {
	t.Helper()
	path = testPath(t)
	db, err := Open(context.Background(), Options{Path: path, KeyPath: key, Durability: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := db.Append(rec(i, guard.KindRequest)); err != nil {
			t.Fatal(err)
		}
	}
	origin = db.signer.Verifier().Name()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return path, origin
}

// Without a key of this log, verify checks everything but signatures: a
// key of another log (a stray file where the key is looked for, or one
// pinned) is used for nothing, and the log is unverifiable, both logs
// named; a key missing likewise. What fails still fails, and that
// outweighs the rest.
func TestVerifyWithoutThisLogsKey(t *testing.T) {
	ctx := context.Background()
	keys := t.TempDir()
	own, other := filepath.Join(keys, "own", "audit.key"), filepath.Join(keys, "other", "audit.key")
	path, origin := signedLog(t, own, 6)
	if err := audit.CreateKey(other); err != nil {
		t.Fatal(err)
	}
	otherKey, err := audit.VerifierKeyOf(other)
	if err != nil {
		t.Fatal(err)
	}
	pinned, err := note.NewVerifier(otherKey)
	if err != nil {
		t.Fatal(err)
	}
	stray := pinned.Name()
	verify := func(keyPath string, o audit.VerifyOptions) audit.Report {
		t.Helper()
		ro, err := OpenReadOnly(ctx, Options{Path: path, KeyPath: keyPath, CheckpointPath: filepath.Join(filepath.Dir(own), "audit.checkpoint")})
		if err != nil {
			t.Fatal(err)
		}
		defer ro.Close()
		rep, err := ro.Verifier().VerifyWith(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	if rep := verify(own, audit.VerifyOptions{}); rep.Verdict() != audit.VerdictVerified || !rep.OK || rep.Records != 6 {
		t.Fatalf("with the log's key: %+v", rep)
	}
	for _, tc := range []struct {
		what string
		key  string
		o    audit.VerifyOptions
		want string
	}{
		{"no key", filepath.Join(keys, "none", "audit.key"), audit.VerifyOptions{},
			"there is no key for this log (none at " + filepath.Join(keys, "none", "audit.key") + ", and none given)"},
		{"a stray key", other, audit.VerifyOptions{},
			"the checkpoint key at " + other + " is another log's key: it signs as " + stray + ", and this log's checkpoints as " + origin + " (its first checkpoint, kept in the database). Nothing was checked with it"},
		{"a pinned key of another log", own, audit.VerifyOptions{Key: pinned},
			"the key given is another log's key: it signs as " + stray + ", and this log's checkpoints as " + origin},
	} {
		rep := verify(tc.key, tc.o)
		if rep.Verdict() != audit.VerdictUnverifiable || rep.OK || rep.Problem != "" || rep.Records != 6 ||
			len(rep.Unverifiable) != 1 || !strings.Contains(rep.Unverifiable[0], tc.want) {
			t.Errorf("%s: %+v, want it unverifiable, saying %q", tc.what, rep, tc.want)
		}
	}

	// A record altered: a failure, whatever the key.
	tamperWith(t, path, `UPDATE records SET tool = 'delete_all' WHERE seq = 3`)
	for _, key := range []string{own, other, filepath.Join(keys, "none", "audit.key")} {
		rep := verify(key, audit.VerifyOptions{})
		if rep.Verdict() != audit.VerdictFailed || !strings.Contains(rep.Problem, "record 3 (id ") || !strings.Contains(rep.Problem, "was altered") {
			t.Errorf("an altered record, key %s: %+v", key, rep)
		}
	}
}

// The checkpoints' sizes and roots are held against the log without a
// key: a truncation is a failure even where no signature can be checked.
func TestVerifyWithoutAKeyCatchesATruncation(t *testing.T) {
	ctx := context.Background()
	path, _ := signedLog(t, filepath.Join(t.TempDir(), "audit.key"), 8)
	// Records 7 and 8 go, with their tree hashes (tlog's index of leaf 6
	// is 6*2 - popcount(6) = 10).
	tamperWith(t, path, `DELETE FROM records WHERE seq > 6`, `DELETE FROM tree_hashes WHERE idx >= 10`)
	ro, err := OpenReadOnly(ctx, Options{Path: path, KeyPath: filepath.Join(t.TempDir(), "none.key"), CheckpointPath: filepath.Join(t.TempDir(), "none.checkpoint")})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	rep, err := ro.Verifier().Verify(ctx)
	if err != nil || rep.Verdict() != audit.VerdictFailed ||
		!strings.Contains(rep.Problem, "the log was truncated: the checkpoint of 8 records kept in the database is ahead of the log's 6") {
		t.Fatalf("verify without a key of a truncated log: %+v %v", rep, err)
	}
}

// A database that does not exist is not an empty log: it cannot be
// verified there.
func TestVerifyOfNoDatabase(t *testing.T) {
	sqliteOnly(t)
	path := filepath.Join(t.TempDir(), "none", "guard.db")
	ro, err := OpenReadOnly(context.Background(), Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	rep, err := ro.Verifier().Verify(context.Background())
	if err != nil || rep.Verdict() != audit.VerdictUnverifiable || !strings.Contains(rep.Why(), "there is no database at "+path) {
		t.Fatalf("verify of no database: %+v %v", rep, err)
	}
}
