package store

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
)

// TestJournalsOfAnEarlierVersionAreMovedIn builds what an earlier version
// leaves behind (a schema with the journals table, a journal partly
// ingested, a frame cut short at its end, zeros after it) and checks that
// the first writable Open moves the rest into the log, in order and
// chained after what was there, and removes the journal and the table.
func TestJournalsOfAnEarlierVersionAreMovedIn(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "g.db")
	db := openDB(t, path)
	for i := range 3 {
		if err := db.Append(rec(i, guard.KindRequest)); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	// The journal: records 10..19; the first 4 were ingested already.
	var buf []byte
	var ingested int
	base := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for i := 10; i < 20; i++ {
		r := rec(i, guard.KindRequest)
		r.ID = "rec-" + string(rune('a'+i-10))
		r.Time = base.Add(time.Duration(i) * time.Millisecond)
		r.Result, r.DurationMS = "\x00\n\"ü", int64(i)
		buf = appendFrame(buf, r)
		if i == 13 {
			ingested = len(buf)
		}
	}
	torn := appendFrame(nil, rec(99, guard.KindRequest))
	buf = append(buf, torn[:len(torn)-3]...)
	buf = append(buf, make([]byte, 4096)...)
	dir := path + ".journals"
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "123-abcd.jsonl"), buf, 0o600); err != nil {
		t.Fatal(err)
	}
	raw := rawDB(t, path)
	if _, err := raw.Exec(dropUserColumns(t)+`CREATE TABLE journals (name TEXT PRIMARY KEY, offset INTEGER NOT NULL);
		INSERT INTO journals VALUES ('123-abcd.jsonl', ?);
		DROP VIEW calls; DROP INDEX records_approval; DROP INDEX records_kind; DROP TABLE call_index; DROP TABLE call_text;
		ALTER TABLE records DROP COLUMN approval;
		DELETE FROM schema_migrations WHERE version IN (5, 6, 9)`, ingested); err != nil {
		t.Fatal(err)
	}
	raw.Close()

	db = openDB(t, path)
	defer db.Close()
	rep, err := db.Verifier().Verify(ctx)
	if err != nil || !rep.OK || rep.Records != 3+6 {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	var ids []string
	_ = db.Reader().Records(ctx, func(r *guard.Record) error {
		if r.Seq > 3 {
			ids = append(ids, r.ID)
			if r.Result != "\x00\n\"ü" || r.Time.UnixMilli() != base.UnixMilli()+r.DurationMS {
				t.Errorf("record %d came back changed: %+v", r.Seq, r)
			}
		}
		return nil
	})
	if want := []string{"rec-e", "rec-f", "rec-g", "rec-h", "rec-i", "rec-j"}; !slices.Equal(ids, want) {
		t.Fatalf("moved in: %v, want %v", ids, want)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the journals are still there: %v", err)
	}
	var n int
	if err := db.r.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name = 'journals'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("journals table: %d %v", n, err)
	}
}
