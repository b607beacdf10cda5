package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
	"github.com/guard-mcp/guard/internal/pgtest"
	"github.com/jackc/pgx/v5"
)

// richLog makes an SQLite database at dir/guard.db with something in every
// table store copy moves: calls whose old bodies retention pruned (so
// several checkpoints, a retention record and run), held calls approved,
// denied and still pending, two servers' tools with a changed definition
// reviewed, calls and approvals of a caller the front authenticated, a
// configuration change, a rule guard wrote, a scheduled
// verification, a stream cursor and a rate-limit bucket. It is closed
// (which signs a last checkpoint).
func richLog(t *testing.T, dir string) string {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(dir, "guard.db")
	var now time.Time
	db := retentionLog(t, path, &now, 6, 3)
	if _, err := db.Pruning().Prune(ctx, RetentionOptions{Retention: 400 * 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a1", "a2", "a3"} {
		a := heldApproval(id)
		a.CreatedAt, a.ExpiresAt = now, now.Add(time.Hour)
		if id != "a2" {
			a.Caller = caller // the front authenticated the caller
		}
		if err := db.Holds().CreateApproval(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Holds().DecideApproval(ctx, "a1", true, "alice", "checked the path"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Holds().DecideApproval(ctx, "a2", false, "bob", "not on production"); err != nil {
		t.Fatal(err)
	}
	def := func(name, pin string) guard.Tool {
		return guard.Tool{Name: name, Pin: pin, Def: []byte(`{"name":"` + name + `","description":"` + pin + `"}`)}
	}
	for i, l := range []struct {
		server string
		tools  []guard.Tool
	}{
		{"files", []guard.Tool{def("read_file", "sha256:r1"), def("write_file", "sha256:w1")}},
		{"db", []guard.Tool{def("query", "sha256:q1")}},
		{"files", []guard.Tool{def("read_file", "sha256:r1"), def("write_file", "sha256:w2"), def("move", "sha256:m1")}},
	} {
		if err := db.Catalog().RecordTools(ctx, l.server, l.tools, now.Add(time.Duration(i)*time.Second), false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Catalog().DecideTool(ctx, "files", "write_file", "sha256:w2", true, "alice"); err != nil {
		t.Fatal(err)
	}
	if err := db.Configs().NoteConfigChange(ctx, "sha256:c1", "policy.default: allow -> approve"); err != nil {
		t.Fatal(err)
	}
	if err := db.Configs().NoteRulesWritten(ctx, "sha256:rules1"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Verifier().VerifyIfDue(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	if ok, err := db.Streams().Lease(ctx, "stream", "me", time.Minute); !ok || err != nil {
		t.Fatalf("lease: %v %v", ok, err)
	}
	if err := db.Streams().SetStreamCursor(ctx, "stream", "me", "syslog tcp://127.0.0.1:6514", 7); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := db.TakeToken(ctx, limitKey, 0.5, 30, now); !ok || err != nil {
		t.Fatalf("token: %v %v", ok, err)
	}
	byAlice := rec(99, guard.KindRequest) // a call of a caller the front authenticated
	byAlice.User, byAlice.UserEmail, byAlice.UserGroups = caller.Subject, caller.Email, caller.Groups
	if err := db.Append(byAlice); err != nil {
		t.Fatal(err)
	}
	if err := db.Append(rec(100, guard.KindRequest)); err != nil { // a call still under way
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// limitKey is a rate limit's bucket, named as the policy names them.
const limitKey = "tool\x00files\x00write_file\x0030/1m0s/30"

// content is what a database holds, as guard reads it.
type content struct {
	Records    []*guard.Record
	Calls      []string // the call index's rows
	Found      []string // the ids of the calls whose words hold "secret"
	Approvals  []*guard.Approval
	Tools      []ToolVersion
	Reviews    []*guard.Review
	Config     *ConfigChange
	Rules      bool
	Cursor     int64
	Verified   *Verification
	Retention  *Retention
	Checkpoint *audit.Checkpoint
}

func contentOf(t *testing.T, db *DB) content {
	t.Helper()
	ctx := context.Background()
	var c content
	var err error
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	check(db.Reader().Records(ctx, func(r *guard.Record) error { c.Records = append(c.Records, r); return nil }))
	c.Calls = callIndexRows(t, db)
	// Each engine's text index, as its own query reads it (Query
	// reads SQLite's only, so far).
	words := `SELECT c.call_id FROM call_text JOIN call_index c ON c.k = call_text.rowid WHERE call_text MATCH 'secret' ORDER BY c.k`
	if db.pg {
		words = `SELECT c.call_id FROM call_text t JOIN call_index c ON c.k = t.k WHERE t.words @@ to_tsquery('simple', 'secret') ORDER BY c.k`
	}
	rows, err := db.r.QueryContext(ctx, words)
	check(err)
	for rows.Next() {
		var id string
		check(rows.Scan(&id))
		c.Found = append(c.Found, id)
	}
	check(rows.Err())
	rows.Close()
	c.Approvals, err = db.Holds().Approvals(ctx, "")
	check(err)
	for _, tool := range [][2]string{{"files", "read_file"}, {"files", "write_file"}, {"files", "move"}, {"db", "query"}} {
		h, err := db.Catalog().ToolHistory(ctx, tool[0], tool[1])
		check(err)
		c.Tools = append(c.Tools, h...)
	}
	c.Reviews, err = db.Catalog().Reviews(ctx, "")
	check(err)
	c.Config, err = db.Configs().ConfigChangeByDigest(ctx, "sha256:c1")
	check(err)
	c.Rules, err = db.Configs().RulesWritten(ctx, "sha256:rules1")
	check(err)
	c.Cursor, err = db.Streams().StreamCursor(ctx, "syslog tcp://127.0.0.1:6514")
	check(err)
	c.Verified, err = db.Verifier().LastVerification(ctx)
	check(err)
	c.Retention, err = db.Pruning().LastRetention(ctx)
	check(err)
	c.Checkpoint, err = db.LatestCheckpoint(ctx)
	check(err)
	return c
}

// pgCount counts a table's rows in a PostgreSQL database.
func pgCount(t *testing.T, url, table string) int64 {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var n int64
	if err := c.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A database moved to PostgreSQL reads back as it was, verifies against
// the checkpoint the SQLite log had, has the learned rules it was given
// and the rate-limit bucket where PostgreSQL mode looks for it, goes on
// there (the chain, the tree, the catalog's and the other tables' row
// numbers continue), and cannot be moved into a second time.
func TestCopyToPostgres(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := richLog(t, dir)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	src, err := OpenReadOnly(ctx, Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	want := contentOf(t, src)
	src.Close()
	pruned := slices.ContainsFunc(want.Records, func(r *guard.Record) bool { return r.Pruned })
	users := slices.ContainsFunc(want.Records, func(r *guard.Record) bool { return r.User == caller.Subject && len(r.UserGroups) == 2 }) &&
		slices.ContainsFunc(want.Records, func(r *guard.Record) bool { return r.Kind == guard.KindDecision && r.UserEmail == caller.Email })
	if want.Retention == nil || !pruned || !users || len(want.Found) != 3 || len(want.Approvals) != 3 ||
		len(want.Reviews) != 5 || want.Config == nil || !want.Rules || want.Cursor != 7 || want.Verified == nil {
		t.Fatalf("the source is not as richLog meant: %+v", want)
	}

	url := pgtest.Database(t)
	learned := []LearnedRule{
		{Name: "allow-write_file", Server: "files", Tool: "write_file", Method: "tools/call", Action: "allow", Added: now},
		{Name: "allow-query", Server: "db", Tool: "query", Method: "tools/call", When: `args.sql.startsWith("SELECT")`, Action: "allow", Reason: "reads", Added: now},
	}
	rep, err := Copy(ctx, Options{Path: path, Durability: "normal"}, Options{Path: url}, CopyOptions{Learned: learned})
	if err != nil {
		t.Fatal(err)
	}
	key, cpFile := filepath.Join(dir, "audit.key"), filepath.Join(dir, "audit.checkpoint")
	if rep.KeyPath != key || rep.CheckpointPath != cpFile {
		t.Errorf("key %s, checkpoint file %s; want %s and %s", rep.KeyPath, rep.CheckpointPath, key, cpFile)
	}
	if rep.Checkpoint == nil || !slices.Equal(rep.Checkpoint.Note, want.Checkpoint.Note) {
		t.Fatalf("the checkpoint moved is not the source's latest:\n%s\nwant\n%s", rep.Checkpoint.Note, want.Checkpoint.Note)
	}
	if v := rep.Verified; !v.OK || !v.Witnessed || v.Extends != want.Checkpoint.Size || v.Records != int64(len(want.Records)) || v.Pruned == 0 {
		t.Errorf("the destination verified as %+v; want ok, extending the checkpoint of %d records, %d records", v, want.Checkpoint.Size, len(want.Records))
	}
	if b, err := os.ReadFile(cpFile); err != nil || !slices.Equal(b, want.Checkpoint.Note) {
		t.Errorf("the destination's checkpoint file: %q %v", b, err)
	}
	for table, n := range map[string]int{"records": len(want.Records), "call_index": len(want.Calls), "approvals": 3,
		"tool_reviews": 5, "tools": len(want.Tools), "config_changes": 1, "rules_written": 1, "stream_cursors": 1, "rate_limits": 1} {
		if got := rep.Count(table); got != int64(n) {
			t.Errorf("%d rows of %s moved, want %d", got, table, n)
		}
	}
	for _, table := range copyTables {
		if got := pgCount(t, url, table); table != "learned_rules" && got != rep.Count(table) {
			t.Errorf("%s holds %d rows, the copy says it moved %d", table, got, rep.Count(table))
		}
	}
	if n := pgCount(t, url, "learned_rules"); rep.Learned != 2 || n != 2 {
		t.Errorf("%d learned rules added (%d in the table), want 2", rep.Learned, n)
	}

	// What guard audit verify does: a read-only open, with the key,
	// which finds the checkpoint file beside it.
	ro, err := OpenReadOnly(ctx, Options{Path: url, KeyPath: key})
	if err != nil {
		t.Fatal(err)
	}
	v, err := ro.Verifier().VerifyWith(ctx, audit.VerifyOptions{Kept: []audit.KeptCheckpoint{{Name: "the source's", Note: want.Checkpoint.Note}}})
	if err != nil || !v.OK || !v.Witnessed || v.Records != int64(len(want.Records)) || v.Extends != want.Checkpoint.Size {
		t.Errorf("read-only verify: %+v %v", v, err)
	}
	if err := ro.Append(rec(102, guard.KindRequest)); err == nil {
		t.Error("a read-only open appended")
	}
	ro.Close()

	dst, err := Open(ctx, Options{Path: url, KeyPath: key})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	got := contentOf(t, dst)
	if !reflect.DeepEqual(got, want) {
		gv, wv := reflect.ValueOf(got), reflect.ValueOf(want)
		for i := range gv.NumField() {
			if !reflect.DeepEqual(gv.Field(i).Interface(), wv.Field(i).Interface()) {
				t.Errorf("%s read back otherwise:\n%s\nwant\n%s", gv.Type().Field(i).Name, dump(gv.Field(i).Interface()), dump(wv.Field(i).Interface()))
			}
		}
	}

	rules, _, err := dst.Learned().LearnedRules(ctx)
	if err != nil || !reflect.DeepEqual(rules, learned) {
		t.Errorf("learned rules read back: %+v %v\nwant %+v", rules, err, learned)
	}
	// The rate-limit bucket is the one PostgreSQL mode takes its tokens
	// from (its key written as TakeToken writes it there).
	if ok, _, err := dst.TakeToken(ctx, limitKey, 0.5, 30, time.Now()); !ok || err != nil {
		t.Errorf("token: %v %v", ok, err)
	}
	if n := pgCount(t, url, "rate_limits"); n != 1 {
		t.Errorf("%d rate-limit buckets after a token was taken from the one moved, want 1", n)
	}

	// Moving into it again is refused, and changes nothing.
	if _, err := Copy(ctx, Options{Path: path, Durability: "normal"}, Options{Path: url}, CopyOptions{}); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("a second copy: %v, want ErrNotEmpty", err)
	}
	if n := pgCount(t, url, "records"); n != int64(len(want.Records)) {
		t.Fatalf("%d records after the refused copy, want %d", n, len(want.Records))
	}

	// guard goes on on PostgreSQL.
	if err := dst.Append(rec(101, guard.KindRequest), rec(101, guard.KindOutcome)); err != nil {
		t.Fatal(err)
	}
	if err := dst.Configs().NoteConfigChange(ctx, "sha256:c2", "another"); err != nil {
		t.Fatal(err)
	}
	// A row numbered by PostgreSQL takes the number after those moved
	// (one moved again would break the column's uniqueness).
	for _, q := range []string{
		`INSERT INTO tools (server, name, pin, def, first_seen, last_seen) VALUES ('db', 'query', 'sha256:q2', '{}', '', '')`,
		`INSERT INTO tool_reviews (server, name, pin, state, cause, created_at) VALUES ('db', 'query', 'sha256:q2', 'pending', 'changed', '')`,
		`INSERT INTO audit_verifications (time, ok) VALUES ('', 1)`,
		`INSERT INTO retention_runs (time) VALUES ('')`,
	} {
		if _, err := dst.w.ExecContext(ctx, q); err != nil {
			t.Errorf("%s: %v", q, err)
		}
	}
	dst.ing.caughtUp(ctx)
	if err := dst.ckpt.writeCheckpoint(); err != nil {
		t.Fatal(err)
	}
	v, err = dst.Verifier().VerifyWith(ctx, audit.VerifyOptions{Kept: []audit.KeptCheckpoint{{Name: "the source's", Note: want.Checkpoint.Note}}})
	if err != nil || !v.OK || v.Records != int64(len(want.Records))+2 || v.Extends != want.Checkpoint.Size {
		t.Fatalf("verify after appending on PostgreSQL: %+v %v", v, err)
	}
}

func dump(v any) string {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice {
		return fmt.Sprintf("%+v", v)
	}
	var b strings.Builder
	for i := range rv.Len() {
		fmt.Fprintf(&b, "%+v\n", rv.Index(i).Interface())
	}
	return b.String()
}

// A row PostgreSQL refuses (text that is not UTF-8, which SQLite keeps as
// it came) fails the move, saying where, with nothing moved: not even the
// tables before it.
func TestCopyIsAllOrNothing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := richLog(t, dir)
	db, err := Open(ctx, Options{Path: path, Durability: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Configs().NoteConfigChange(ctx, "sha256:c9", "not UTF-8: \xff\xfe"); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	url := pgtest.Database(t)
	_, err = Copy(ctx, Options{Path: path, Durability: "normal"}, Options{Path: url}, CopyOptions{})
	if err == nil || !strings.Contains(err.Error(), "config_changes") || !strings.Contains(err.Error(), "line 2, column summary") {
		t.Fatalf("copy: %v, want a failure at the config change's summary", err)
	}
	for _, table := range copyTables {
		if n := pgCount(t, url, table); n != 0 {
			t.Errorf("%d rows of %s were left behind", n, table)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "audit.checkpoint")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a checkpoint file was written: %v", err)
	}
}

// A checkpoint file at the destination's path that is not one of this
// log's (here: of another log signed with the same key) is refused
// before anything is written: guard on PostgreSQL would hold the log to
// it.
func TestCopyRefusesAnotherLogsCheckpointFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := richLog(t, dir)
	other := filepath.Join(t.TempDir(), "other.db")
	db, err := Open(ctx, Options{Path: other, Durability: "normal", KeyPath: filepath.Join(dir, "audit.key")})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Append(rec(1, guard.KindRequest)); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(other + ".checkpoint")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "audit.checkpoint"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	url := pgtest.Database(t)
	_, err = Copy(ctx, Options{Path: path, Durability: "normal"}, Options{Path: url}, CopyOptions{})
	if err == nil || !strings.Contains(err.Error(), "the source does not verify") || !strings.Contains(err.Error(), "the destination's checkpoint file") {
		t.Fatalf("copy: %v, want the checkpoint file refused", err)
	}
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var made bool
	if err := c.QueryRow(ctx, "SELECT to_regclass('records') IS NOT NULL").Scan(&made); err != nil || made {
		t.Fatalf("the destination's schema was made: %v %v", made, err)
	}
}

// The key the destination is given must be the log's.
func TestCopyRefusesAnotherKey(t *testing.T) {
	dir := t.TempDir()
	path := richLog(t, dir)
	_, err := Copy(context.Background(), Options{Path: path}, Options{Path: "postgres://guard@127.0.0.1:1/none", Key: strings.Repeat("ab", 32),
		CheckpointPath: filepath.Join(dir, "cp")}, CopyOptions{})
	if err == nil || !strings.Contains(err.Error(), "a log keeps its key") {
		t.Fatalf("copy: %v", err)
	}
}

// Every table of either schema is moved by Copy or named in notCopied.
func TestCopyAccountsForEveryTable(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	lite := openDB(t, filepath.Join(dir, "guard.db"))
	defer lite.Close()
	pg, err := Open(ctx, Options{Path: pgtest.Database(t), KeyPath: filepath.Join(dir, "audit.key")})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	for _, s := range []struct {
		db *DB
		q  string
	}{
		{lite, `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE 'call_text_%'`},
		{pg, `SELECT tablename FROM pg_catalog.pg_tables WHERE schemaname = current_schema()`},
	} {
		rows, err := s.db.r.QueryContext(ctx, s.q)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				t.Fatal(err)
			}
			n++
			if _, skip := notCopied[name]; !skip && !slices.Contains(copyTables, name) {
				t.Errorf("table %s (pg %v) is neither moved by Copy nor in notCopied", name, s.db.pg)
			}
		}
		rows.Close()
		if n < len(copyTables) {
			t.Errorf("only %d tables (pg %v)", n, s.db.pg)
		}
	}
}
