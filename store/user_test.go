package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"hash/crc32"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
	"github.com/guard-mcp/guard/migrations"
	"github.com/guard-mcp/guard/store/sqlite"
)

// dropUserColumns is the SQL that takes an SQLite database opened with
// rawDB (its triggers dropped) back to the schema of the release before
// the user migration: its view and columns as they were, the migration
// not applied (nor those after it: dropProcessColumns).
func dropUserColumns(t testing.TB) string {
	t.Helper()
	b, err := fs.ReadFile(migrations.SQLite(), "0018_record_user.sql")
	if err != nil {
		t.Fatal(err)
	}
	body := string(b)
	view := body[strings.Index(body, "DROP VIEW IF EXISTS calls;"):strings.Index(body, "-- Retention")]
	view = strings.Replace(view, ",\n    q.user_subject,\n    q.user_email,\n    q.user_groups", "", 1)
	if strings.Contains(view, "user_") {
		t.Fatal("the view of the release before still names a user column")
	}
	return dropProcessColumns + `DROP VIEW calls;
		DROP INDEX call_index_user_subject; DROP INDEX call_index_user_email;
		ALTER TABLE call_index DROP COLUMN user_subject; ALTER TABLE call_index DROP COLUMN user_email;
		ALTER TABLE records DROP COLUMN user_subject; ALTER TABLE records DROP COLUMN user_email;
		ALTER TABLE records DROP COLUMN user_groups;
		DELETE FROM schema_migrations WHERE version = 18;
		` + view
}

// caller is alice, as the front authenticated her.
var caller = guard.Identity{Subject: "user-7f3a", Email: "alice@example.com", Groups: []string{"sre", `on-call "eu"`}}

// A record that names a user is hashed in version 3's canonical form:
// user, user_email and user_groups (an array of strings, in the order
// recorded) where RFC 8785 sorts them, and "v":3. Its form is what an
// RFC 8785 serialiser makes of it (for these ASCII members and integers,
// encoding/json's sorted, unescaped form), each user member is covered,
// and a record without a user keeps the form it had.
func TestUserCanonicalForm(t *testing.T) {
	r := &guard.Record{ID: "r1", CallID: "c1", Kind: guard.KindRequest, Time: time.Date(2026, 11, 27, 9, 30, 0, 0, time.UTC),
		Session: "s1", Client: "mcp-remote/0.1", Server: "files", Direction: "client", Method: "tools/call", Tool: "read_file",
		RequestSize: 42, User: caller.Subject, UserEmail: caller.Email, UserGroups: caller.Groups}
	want := `{"arguments":"","call_id":"c1","client":"mcp-remote/0.1","decided_by":"","decision":"","detail":"",` +
		`"direction":"client","duration_ms":0,"id":"r1","kind":"request","method":"tools/call","outcome":"","pin":"",` +
		`"prev_hash":"","protocol":"","reason":"","request_size":42,"response_size":0,"result":"","server":"files",` +
		`"session":"s1","time":"2026-11-27T09:30:00.000Z","tool":"read_file","user":"user-7f3a",` +
		`"user_email":"alice@example.com","user_groups":["sre","on-call \"eu\""],"v":3}`
	if got := string(audit.AppendCanonical(nil, r)); got != want {
		t.Fatalf("canonical form\n%s\nwant\n%s", got, want)
	}
	if sum := sha256.Sum256([]byte(want)); HashRecord(r) != hex.EncodeToString(sum[:]) {
		t.Fatal("the hash is not the SHA-256 of the canonical form")
	}
	canonicalAsJCS(t, r)

	// Each member is covered; the groups' order too.
	h := HashRecord(r)
	for name, change := range map[string]func(*guard.Record){
		"user":               func(r *guard.Record) { r.User = "user-0000" },
		"user_email":         func(r *guard.Record) { r.UserEmail = "mallory@example.com" },
		"user_groups":        func(r *guard.Record) { r.UserGroups = []string{"sre"} },
		"user_groups' order": func(r *guard.Record) { r.UserGroups = []string{caller.Groups[1], caller.Groups[0]} },
	} {
		c := *r
		change(&c)
		if HashRecord(&c) == h {
			t.Errorf("a change of %s keeps the hash", name)
		}
	}

	// Any one user member makes the form version 3, with all three; the
	// approval stays where version 2 put it.
	for _, c := range []*guard.Record{
		{Kind: guard.KindEvent, UserEmail: "bob@example.com"},
		{Kind: guard.KindEvent, UserGroups: []string{"ops"}},
		{Kind: guard.KindDecision, User: "bob", Approval: "ap-1"},
	} {
		form := string(audit.AppendCanonical(nil, c))
		if !strings.HasSuffix(form, `"v":3}`) || !strings.Contains(form, `,"user":`) ||
			!strings.Contains(form, `,"user_email":`) || !strings.Contains(form, `,"user_groups":[`) {
			t.Errorf("%+v: form %s", c, form)
		}
		if c.Approval != "" && !strings.HasPrefix(form, `{"approval":"ap-1",`) {
			t.Errorf("the approval left its place: %s", form)
		}
		canonicalAsJCS(t, c)
	}

	// Without a user, the form (and so the hash) is the one before.
	r.User, r.UserEmail, r.UserGroups = "", "", []string{}
	if form := string(audit.AppendCanonical(nil, r)); strings.Contains(form, "user") || !strings.HasSuffix(form, `"tool":"read_file","v":1}`) {
		t.Fatalf("a record without a user: %s", form)
	}
}

// canonicalAsJCS checks a record's canonical form against an RFC 8785
// serialisation of its own members: encoding/json sorts a map's keys and,
// without HTML escaping, writes these strings and integers as RFC 8785
// does.
func canonicalAsJCS(t *testing.T, r *guard.Record) {
	t.Helper()
	form := audit.AppendCanonical(nil, r)
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(form))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		t.Fatalf("the canonical form is not JSON: %v\n%s", err, form)
	}
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(m); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSuffix(b.String(), "\n"); got != string(form) {
		t.Errorf("the canonical form is not in RFC 8785's order:\n%s\nwant\n%s", form, got)
	}
}

// userLog appends calls of alice (one of them held and decided), a call
// no one authenticated, and an event of alice's session.
func userLog(t *testing.T, db *DB) {
	t.Helper()
	ctx := context.Background()
	at := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	as := func(r *guard.Record, who guard.Identity) *guard.Record {
		r.User, r.UserEmail, r.UserGroups = who.Subject, who.Email, who.Groups
		r.Time, r.Session = at, "s-"+who.Subject
		return r
	}
	for i := range 4 {
		who := caller
		if i == 3 {
			who = guard.Identity{}
		}
		req, out := as(rec(i, guard.KindRequest), who), as(rec(i, guard.KindOutcome), who)
		req.CallID, out.CallID = "u"+req.CallID, "u"+out.CallID // not the ids of queryLog's calls or of a fixture's
		out.Outcome = guard.OutcomeOK
		if err := db.Append(req, out); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Append(as(&guard.Record{CallID: "ev-1", Kind: guard.KindEvent, Method: "guard/server_exit",
		Detail: `{"status":0}`}, caller)); err != nil {
		t.Fatal(err)
	}
	a := heldApproval("alice-held")
	a.Caller = caller
	if err := db.Holds().CreateApproval(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := db.Append(as(&guard.Record{CallID: a.CallID, Kind: guard.KindRequest, Method: "tools/call", Tool: "write_file",
		Server: "files", Decision: guard.DecisionHeld, Approval: a.ID}, caller)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Holds().DecideApproval(ctx, a.ID, false, "bob", "not today"); err != nil {
		t.Fatal(err)
	}
}

// The user's fields are kept on either engine: read back, on the
// decision of a held call, in the calls a query finds by subject or by
// email, in exports that check offline, and the log verifies.
func TestUserFieldsAreKeptQueriedAndExported(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, testPath(t))
	defer db.Close()
	userLog(t, db)
	named := map[string]int{}
	err := db.Reader().Records(ctx, func(r *guard.Record) error {
		switch {
		case r.User == "" && r.UserEmail == "" && r.UserGroups == nil:
			named[""]++
		case r.User == caller.Subject && r.UserEmail == caller.Email && slices.Equal(r.UserGroups, caller.Groups):
			named[r.Kind]++
		default:
			t.Errorf("record %d came back as %q %q %q", r.Seq, r.User, r.UserEmail, r.UserGroups)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"": 2, guard.KindRequest: 4, guard.KindOutcome: 3, guard.KindEvent: 1, guard.KindDecision: 1}; !maps.Equal(named, want) {
		t.Errorf("records by user: %v, want %v", named, want)
	}
	verifyOK(t, db)

	for _, tc := range []struct {
		f    Filter
		want []string
	}{
		{Filter{User: caller.Subject}, []string{"call-alice-held", "ucall-2", "ucall-1", "ucall-0"}},
		{Filter{User: caller.Email}, []string{"call-alice-held", "ucall-2", "ucall-1", "ucall-0"}},
		{Filter{User: caller.Email, Tool: "write_file", Decision: guard.ApprovalDenied}, []string{"call-alice-held"}},
		{Filter{User: "bob@example.com"}, nil},
	} {
		var got []string
		err := db.Reader().Query(ctx, tc.f, func(c *Call) error {
			got = append(got, c.ID)
			if c.User != caller.Subject || c.UserEmail != caller.Email || !slices.Equal(c.UserGroups, caller.Groups) {
				t.Errorf("call %s shows %q %q %q", c.ID, c.User, c.UserEmail, c.UserGroups)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		slices.Sort(tc.want)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%+v: calls %v, want %v", tc.f, got, tc.want)
		}
	}
	var anon *Call
	if err := db.Reader().Query(ctx, Filter{ID: "ucall-3"}, func(c *Call) error { anon = c; return nil }); err != nil || anon == nil {
		t.Fatalf("the call no one authenticated: %v", err)
	}
	if anon.User != "" || anon.UserEmail != "" || anon.UserGroups == nil || len(anon.UserGroups) != 0 {
		t.Errorf("the call no one authenticated shows %q %q %#v", anon.User, anon.UserEmail, anon.UserGroups)
	}
	var kinds []string
	if err := db.Reader().QueryRecords(ctx, guard.KindEvent, Filter{User: caller.Email}, func(r *guard.Record) error {
		kinds = append(kinds, r.Kind+" "+r.User)
		return nil
	}); err != nil || !slices.Equal(kinds, []string{"event " + caller.Subject}) {
		t.Errorf("events of alice: %v %v", kinds, err)
	}

	for _, format := range []string{"jsonl", "csv"} {
		var b bytes.Buffer
		if err := db.Reader().Export(ctx, &b, ExportOptions{Format: format}); err != nil {
			t.Fatal(err)
		}
		if _, err := checkFiles(db.signer.Verifier(), []audit.File{{Name: format, Data: b.Bytes()}}); err != nil {
			t.Fatalf("%s export does not check: %v", format, err)
		}
		e, err := audit.NewExportReader(b.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for {
			cell, err := e.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			r, _, _, err := audit.FromRow(cell)
			if err != nil {
				t.Fatal(err)
			}
			if r.User == caller.Subject && r.UserEmail == caller.Email && slices.Equal(r.UserGroups, caller.Groups) {
				n++
			}
		}
		if n != 9 {
			t.Errorf("%s export: %d records of alice's, want 9", format, n)
		}
		if format == "jsonl" && !strings.Contains(b.String(), `"user":"user-7f3a","user_email":"alice@example.com","user_groups":["sre","on-call \"eu\""]`) {
			t.Errorf("the JSONL export does not name alice as the record does:\n%s", b.String())
		}
	}
}

// A user field altered in the database, as whoever holds the file could,
// is caught by verify; so is a user added to a record that had none.
func TestVerifyCatchesAnAlteredUser(t *testing.T) {
	for _, tc := range []struct{ name, sql string }{
		{"subject", `UPDATE records SET user_subject = 'user-0000' WHERE seq = 3`},
		{"email", `UPDATE records SET user_email = 'mallory@example.com' WHERE seq = 3`},
		{"groups", `UPDATE records SET user_groups = '["sre","admins"]' WHERE seq = 3`},
		{"groups that are not an array", `UPDATE records SET user_groups = 'sre' WHERE seq = 3`},
		{"a user added", `UPDATE records SET user_email = 'alice@example.com' WHERE seq = 7`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "g.db")
			db := openDB(t, path)
			userLog(t, db)
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
			seq := tc.sql[strings.LastIndex(tc.sql, " ")+1:]
			if rep.OK || !strings.Contains(rep.Problem, "record "+seq+" (id") {
				t.Fatalf("verify after the %s was altered: %+v", tc.name, rep)
			}
		})
	}
}

// A log the release before wrote (no user columns, its records hashed in
// the forms before) is read as it is by a read-only open, and after the
// migration verifies with every hash unchanged; calls of users recorded
// then extend the same chain and its checkpoint.
func TestALogOfTheReleaseBeforeVerifiesAfterTheMigration(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "g.db")
	db := openDB(t, path)
	queryLog(t, db, 12) // allowed, denied and held calls, some with an approval (version 2)
	if err := db.Holds().CreateApproval(ctx, heldApproval("pending-1")); err != nil {
		t.Fatal(err)
	}
	db.Close()
	raw := rawDB(t, path)
	if _, err := raw.Exec(dropUserColumns(t)); err != nil {
		t.Fatal(err)
	}
	hashes := func() []string {
		var hs []string
		rows, err := raw.Query(`SELECT hash FROM records ORDER BY seq`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var h string
			if err := rows.Scan(&h); err != nil {
				t.Fatal(err)
			}
			hs = append(hs, h)
		}
		return hs
	}
	before := hashes()
	cp, err := os.ReadFile(path + ".checkpoint")
	if err != nil {
		t.Fatal(err)
	}

	// The release before's schema, read by this one.
	ro, err := OpenReadOnly(ctx, Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := ro.Verifier().Verify(ctx); err != nil || !rep.OK || rep.Records != int64(len(before)) {
		t.Fatalf("read-only verify of the release before's log: %+v %v", rep, err)
	}
	if ids := queryIDs(t, ro, Filter{}); len(ids) != 12 {
		t.Errorf("read-only query: %d calls, want 12", len(ids))
	}
	if ids := queryIDs(t, ro, Filter{User: "alice@example.com"}); len(ids) != 0 {
		t.Errorf("a query by user of a log that names none: %v", ids)
	}
	if err := ro.Reader().QueryRecords(ctx, guard.KindDecision, Filter{User: "x"}, func(*guard.Record) error { return nil }); err != nil {
		t.Errorf("records by user: %v", err)
	}
	if as, err := ro.Holds().Approvals(ctx, ""); err != nil || len(as) != 1 {
		t.Errorf("approvals: %d %v", len(as), err)
	}
	var export bytes.Buffer
	if err := ro.Reader().Export(ctx, &export, ExportOptions{}); err != nil || strings.Contains(export.String(), `"user`) {
		t.Fatalf("export: %v\n%s", err, export.String())
	}
	ro.Close()

	// Migrated: the same hashes, verified against the checkpoint the
	// release before signed; then alice's calls.
	db = openDB(t, path)
	defer db.Close()
	verifyOK(t, db)
	if after := hashes(); !slices.Equal(after[:len(before)], before) {
		t.Fatal("the migration changed records' hashes")
	}
	userLog(t, db)
	db.ing.caughtUp(ctx)
	if err := db.ckpt.writeCheckpoint(); err != nil {
		t.Fatal(err)
	}
	rep, err := db.Verifier().VerifyWith(ctx, audit.VerifyOptions{Kept: []audit.KeptCheckpoint{{Name: "the release before's", Note: cp}}})
	if err != nil || !rep.OK || rep.Extends == 0 {
		t.Fatalf("verify after alice's calls: %+v %v", rep, err)
	}
	if ids := queryIDs(t, db, Filter{User: caller.Subject}); len(ids) != 4 {
		t.Errorf("alice's calls after the migration: %v", ids)
	}
}

// frameBeforeUsers is a record's journal frame as the release before
// wrote it: the approval the only field after the numbers.
func frameBeforeUsers(b []byte, r *guard.Record) []byte {
	var body []byte
	for _, f := range sqlite.FrameText(r) {
		body = binary.AppendUvarint(body, uint64(len(*f)))
		body = append(body, *f...)
	}
	for _, v := range []int64{r.Time.UnixMilli(), r.RequestSize, r.ResponseSize, r.DurationMS} {
		body = binary.AppendVarint(body, v)
	}
	if r.Approval != "" {
		body = binary.AppendUvarint(body, uint64(len(r.Approval)))
		body = append(body, r.Approval...)
	}
	b = binary.AppendUvarint(b, uint64(len(body)))
	b = append(b, body...)
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(body))
}

// A journal left by a process of the release before (its frames without
// the user's fields) is moved in by this release's first open of the log
// that release wrote, before the log's MACs begin, its records without a
// user and hashed as before; a journal of this release with both kinds of
// frame is moved in after.
func TestAJournalOfTheReleaseBeforeIsIngested(t *testing.T) {
	sqliteOnly(t) // SQLite's journal
	ctx := context.Background()
	path := logBeforeUsers(t) // 14 records
	if err := os.MkdirAll(sqlite.JournalsDir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	old1, old2 := rec(1, guard.KindRequest), rec(1, guard.KindOutcome)
	old2.Approval, old2.Outcome, old2.Result = "ap-1", guard.OutcomeOK, "\x00\n\"ü"
	mine := rec(2, guard.KindRequest)
	mine.User, mine.UserEmail, mine.UserGroups = caller.Subject, caller.Email, caller.Groups
	var recs []*guard.Record
	for i, r := range []*guard.Record{old1, old2, mine} {
		r.ID, r.Time = guard.NewID(), at.Add(time.Duration(i)*time.Millisecond)
		recs = append(recs, r)
	}
	journal := func(b []byte) {
		if err := os.WriteFile(filepath.Join(sqlite.JournalsDir(path), guard.NewID()+".log"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	h := make([]byte, sqlite.JournalHeader)
	copy(h, sqlite.JournalMagic)
	binary.LittleEndian.PutUint64(h[sqlite.IngestedAt:], sqlite.JournalHeader)
	journal(frameBeforeUsers(frameBeforeUsers(h, old1), old2))
	if f := appendFrame(nil, old2); !bytes.Equal(f, frameBeforeUsers(nil, old2)) {
		t.Fatal("a record without a user has another frame than the release before's")
	}

	db := openDB(t, path)
	var got []*guard.Record
	if err := db.Reader().Records(ctx, func(r *guard.Record) error { got = append(got, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 17 || got[14].ID != old1.ID || got[15].ID != old2.ID || got[15].Approval != "ap-1" || got[15].Result != old2.Result ||
		got[15].User != "" || got[15].UserGroups != nil || got[16].Decision != audit.LifecycleMACs {
		t.Fatalf("the old journal's records came in as %+v", got[14:])
	}
	if v := string(audit.AppendCanonical(nil, got[15])); !strings.HasSuffix(v, `"v":2}`) {
		t.Errorf("an old frame's record with an approval is hashed as %s", v)
	}
	db.Close()

	// This release's journal: a frame with a user after one without.
	old3 := rec(3, guard.KindRequest)
	old3.ID, old3.Time = guard.NewID(), at.Add(time.Second)
	b, _ := journalBytes([]*guard.Record{old3, mine}, journalKeyOf(t, filepath.Join(filepath.Dir(path), "audit.key")))
	journal(b)
	db = openDB(t, path)
	defer db.Close()
	got = got[:0]
	if err := db.Reader().Records(ctx, func(r *guard.Record) error { got = append(got, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 19 || got[17].ID != old3.ID || got[17].User != "" || got[18].ID != mine.ID ||
		got[18].User != caller.Subject || got[18].UserEmail != caller.Email || !slices.Equal(got[18].UserGroups, caller.Groups) {
		t.Fatalf("this release's journal came in as %+v", got[17:])
	}
	verifyOK(t, db)
}

// Retention removes the user with the rest of a record's body, and keeps
// it in the archive, which checks offline; on PostgreSQL the update
// trigger removes it itself when the release before's retention, which
// knows nothing of the user, blanks a body.
func TestRetentionRemovesTheUser(t *testing.T) {
	ctx := context.Background()
	var now time.Time
	db := retentionLog(t, testPath(t), &now, 4, 2)
	got, err := db.Pruning().Prune(ctx, RetentionOptions{Retention: 400 * 24 * time.Hour, ArchiveDir: t.TempDir()})
	if err != nil || len(got) != 1 {
		t.Fatalf("prune: %+v %v", got, err)
	}
	b, err := os.ReadFile(got[0].Archive)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), `"user":"user-7f3a","user_email":"alice@example.com"`); n != 4 {
		t.Errorf("the archive names alice on %d records, want 4", n)
	}
	if _, err := checkFiles(db.signer.Verifier(), []audit.File{{Name: "archive", Data: b}}); err != nil {
		t.Fatalf("the archive does not check: %v", err)
	}
	kept := 0
	if err := db.Reader().Records(ctx, func(r *guard.Record) error {
		switch {
		case r.Pruned && (r.User != "" || r.UserEmail != "" || r.UserGroups != nil):
			t.Errorf("pruned record %d still names %q %q %q", r.Seq, r.User, r.UserEmail, r.UserGroups)
		case !r.Pruned && r.User == caller.Subject:
			kept++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if kept != 2 {
		t.Errorf("%d young records name alice, want 2", kept)
	}
	verifyOK(t, db)
	if ids := queryIDs(t, db, Filter{User: caller.Email}); !slices.Equal(ids, []string{"call-5"}) {
		t.Errorf("alice's calls after pruning: %v", ids)
	}
	// The release before's statement, under a grant, on a young record of
	// alice's: on SQLite it is refused (the user would stay); on
	// PostgreSQL the trigger blanks the user.
	before := strings.Replace(blankBody, "\n user_subject = '', user_email = '', user_groups = '',", "", 1)
	if strings.Contains(before, "user") {
		t.Fatalf("not the release before's statement: %s", before)
	}
	w := db.w
	if !db.pg {
		w = rawConn(t, db.Path())
	}
	tx, err := w.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var seq int64
	if err := tx.QueryRowContext(ctx, `SELECT max(seq) FROM records WHERE user_subject <> ''`).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO retention_grant (id, first_seq, last_seq) VALUES (1, ?, ?)`, seq, seq); err != nil {
		t.Fatal(err)
	}
	_, err = tx.ExecContext(ctx, before, seq)
	if !db.pg {
		if err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Fatalf("a blanking that leaves the user: %v", err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	var user, email, groups string
	if err := tx.QueryRowContext(ctx, `SELECT user_subject, user_email, user_groups FROM records WHERE seq = ?`, seq).Scan(&user, &email, &groups); err != nil {
		t.Fatal(err)
	}
	if user != "" || email != "" || groups != "" {
		t.Errorf("the release before's blanking left %q %q %q", user, email, groups)
	}
}

// A query by user reads the index of the one column that holds the value
// (a subject, or an email) from its newest end, with no sort of the
// user's calls; only a value that is both someone's subject and someone's
// email needs both indexes, and a sort.
func TestAUserQueryReadsItsIndexInOrder(t *testing.T) {
	sqliteOnly(t) // SQLite's query plans
	db := openDB(t, testPath(t))
	defer db.Close()
	plan := func(users []string) string {
		q, args, err := queryTextFor(Filter{User: "alice@example.com", Limit: 100}, false, users)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := db.r.Query("EXPLAIN QUERY PLAN "+q, args...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var steps []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			steps = append(steps, detail)
		}
		return strings.Join(steps, "; ")
	}
	for _, col := range userColumns {
		p := plan([]string{col})
		if !strings.Contains(p, "SEARCH c USING INDEX call_index_"+col) || strings.Contains(p, "TEMP B-TREE") {
			t.Errorf("a query by %s: %s", col, p)
		}
	}
	if p := plan(userColumns); !strings.Contains(p, "call_index_user_subject") || !strings.Contains(p, "call_index_user_email") {
		t.Errorf("a query by both: %s", p)
	}
}

// A value that is one caller's subject and another's email finds the
// calls of both.
func TestAUserFilterMatchesSubjectAndEmail(t *testing.T) {
	db := openDB(t, testPath(t))
	defer db.Close()
	for i, who := range []guard.Identity{{Subject: "ops@example.com"}, {Subject: "u-2", Email: "ops@example.com"}, {Subject: "u-3"}} {
		r := rec(i, guard.KindRequest)
		r.User, r.UserEmail = who.Subject, who.Email
		if err := db.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	if got := queryIDs(t, db, Filter{User: "ops@example.com"}); !slices.Equal(got, []string{"call-1", "call-0"}) {
		t.Errorf("calls %v, want call-1 and call-0", got)
	}
	if got := queryIDs(t, db, Filter{User: "u-3"}); !slices.Equal(got, []string{"call-2"}) {
		t.Errorf("calls %v, want call-2", got)
	}
	if got := queryIDs(t, db, Filter{User: "nobody"}); len(got) != 0 {
		t.Errorf("calls of nobody: %v", got)
	}
}

// A log the release before wrote (testdata/before-users: its schema, its
// records, its tree, its signed checkpoint) verifies as it is, read-only,
// and after this release's migration with the same hashes; this
// release's records of a user then extend its chain and its checkpoint.
func TestALogWrittenBeforeUsersVerifies(t *testing.T) {
	ctx := context.Background()
	path := logBeforeUsers(t)
	cp, _ := os.ReadFile(path + ".checkpoint")

	ro, err := OpenReadOnly(ctx, Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if !ro.schema.noUser {
		t.Fatal("the fixture has the user migration: it is not the release before's")
	}
	rep, err := ro.Verifier().Verify(ctx)
	if err != nil || !rep.OK || rep.Records != 14 {
		t.Fatalf("read-only verify of the release before's log: %+v %v", rep, err)
	}
	var before []string
	if err := ro.Reader().Records(ctx, func(r *guard.Record) error { before = append(before, r.Hash); return nil }); err != nil {
		t.Fatal(err)
	}
	ro.Close()

	db := openDB(t, path)
	defer db.Close()
	rep, err = db.Verifier().VerifyWith(ctx, audit.VerifyOptions{Kept: []audit.KeptCheckpoint{{Name: "the release before's", Note: cp}}})
	if err != nil || !rep.OK || rep.Extends != 14 {
		t.Fatalf("verify after the migration: %+v %v", rep, err)
	}
	var after []*guard.Record
	if err := db.Reader().Records(ctx, func(r *guard.Record) error { after = append(after, r); return nil }); err != nil {
		t.Fatal(err)
	}
	for i, r := range after[:len(before)] {
		if r.Hash != before[i] || HashRecord(r) != r.Hash || r.User != "" || r.UserGroups != nil {
			t.Fatalf("record %d after the migration: %+v", r.Seq, r)
		}
	}
	if a, err := db.Holds().Approval(ctx, "held-1"); err != nil || a.DecidedBy != "bob" || !a.Caller.IsZero() {
		t.Fatalf("the approval of the release before: %+v %v", a, err)
	}
	userLog(t, db)
	db.ing.caughtUp(ctx)
	if err := db.ckpt.writeCheckpoint(); err != nil {
		t.Fatal(err)
	}
	rep, err = db.Verifier().VerifyWith(ctx, audit.VerifyOptions{Kept: []audit.KeptCheckpoint{{Name: "the release before's", Note: cp}}})
	if err != nil || !rep.OK || rep.Extends != 14 || rep.Records <= 14 {
		t.Fatalf("verify after alice's calls: %+v %v", rep, err)
	}
	if ids := queryIDs(t, db, Filter{User: caller.Email}); len(ids) != 4 {
		t.Errorf("alice's calls: %v", ids)
	}
	if ids := queryIDs(t, db, Filter{Client: "claude-ai/0.1.0"}); len(ids) != 6 {
		t.Errorf("the release before's calls: %v", ids)
	}
}

// logBeforeUsers makes the log of testdata/before-users, written by the
// release before users, in a directory of its own with its key and its
// checkpoint, and returns its path.
func logBeforeUsers(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "guard.db")
	dump, err := os.ReadFile("testdata/before-users/guard.sql")
	if err != nil {
		t.Fatal(err)
	}
	raw := rawConn(t, path)
	if _, err := raw.Exec(string(dump)); err != nil {
		t.Fatalf("the dump: %v", err)
	}
	raw.Close()
	for _, f := range []string{"audit.key", "guard.db.checkpoint"} {
		b, err := os.ReadFile(filepath.Join("testdata/before-users", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// A user's groups come back from their column, and from a journal frame,
// byte for byte, whatever they hold (as every text field of a record is
// hashed as its bytes); text that is not the array written is one group.
func TestGroupsRoundTrip(t *testing.T) {
	for _, gs := range [][]string{
		{"sre"},
		{"", "a,b", `q"uote`, `back\slash`, "\x00\x01\x1f\b\f\n\r\t", "é 日本", "\xff\xfe", "]", "[", `\u0041`},
	} {
		text := audit.GroupsText(gs)
		if got := audit.ParseGroups(text); !slices.Equal(got, gs) {
			t.Errorf("%q came back as %q (column %q)", gs, got, text)
		}
		r := &guard.Record{Kind: guard.KindEvent, UserGroups: gs}
		back, _, err := sqlite.ReadFrame(appendFrame(nil, r))
		if err != nil || !slices.Equal(back.UserGroups, gs) {
			t.Errorf("%q came back from a frame as %q, %v", gs, back.UserGroups, err)
		}
	}
	for _, text := range []string{"sre", "[]", `["a"`, `["a",]`, `["a"]x`, `["a" "b"]`, `["\x"]`, `["\u00"]`} {
		if got := audit.ParseGroups(text); !slices.Equal(got, []string{text}) {
			t.Errorf("%q read as %q, want it as one group", text, got)
		}
	}
}
