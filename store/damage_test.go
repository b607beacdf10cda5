package store

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store/sqlite"
)

// journalBytes is a journal segment as a process of this release that
// stopped left it (segmentBytes), its frames sealed with key.
func journalBytes(recs []*guard.Record, key []byte) (b []byte, offs []int) {
	return segmentBytes(recs, sqlite.FormatSealed, key)
}

// journalRecs are n requests of distinct calls, a millisecond apart.
func journalRecs(n int) []*guard.Record {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var recs []*guard.Record
	for i := range n {
		r := rec(100+i, guard.KindRequest)
		r.ID, r.Time = guard.NewID(), at.Add(time.Duration(i)*time.Millisecond)
		recs = append(recs, r)
	}
	return recs
}

// A scan reads every frame but a damaged one, and finds the damage: in
// the middle (the next frame is found by its mark, or in a journal of the
// release before by trying each offset), in the last frame, or not at
// all where the last frame's write was cut short or a byte changed past
// the frames.
func TestAScanSkipsOnlyTheDamagedFrame(t *testing.T) {
	recs := journalRecs(40)
	ids := func(s *sqlite.JournalScan) []string {
		var out []string
		for _, f := range s.Frames {
			out = append(out, f.Rec.ID)
		}
		return out
	}
	all := func(except ...int) []string {
		var out []string
		for i, r := range recs {
			if !slices.Contains(except, i) {
				out = append(out, r.ID)
			}
		}
		return out
	}
	key := forgersKey()
	for _, format := range []sqlite.JournalFormat{sqlite.FormatSealed, sqlite.FormatMarked, sqlite.FormatUnmarked} {
		marked := format.Marked()
		b, offs := segmentBytes(recs, format, key)
		end := offs[len(offs)-1]
		for _, c := range []struct {
			name   string
			change func(b []byte) []byte
			want   []string
			damage []sqlite.JournalDamage
		}{
			{"whole", func(b []byte) []byte { return b }, all(), nil},
			{"a byte of a frame's body", func(b []byte) []byte { b[offs[7]+20] ^= 0x40; return b }, all(7),
				[]sqlite.JournalDamage{{Off: int64(offs[7]), End: int64(offs[8]), Frames: 1, Before: 7}}},
			{"a frame's length", func(b []byte) []byte {
				at := offs[12]
				if marked {
					at += len(sqlite.FrameMark)
				}
				b[at] ^= 0x03
				return b
			}, all(12), []sqlite.JournalDamage{{Off: int64(offs[12]), End: int64(offs[13]), Before: 12}}},
			{"the last frame", func(b []byte) []byte { b[offs[39]+20] ^= 0x01; return b }, all(39),
				[]sqlite.JournalDamage{{Off: int64(offs[39]), End: int64(end), Frames: 1, Before: 39}}},
			{"the last frame cut short", func(b []byte) []byte { clear(b[offs[39]+30 : end]); return b }, all(39), nil},
			{"the last frame cut short by the file's end", func(b []byte) []byte { return b[:offs[39]+30] }, all(39), nil},
			{"a byte past the frames", func(b []byte) []byte { b[end+100] = 7; return b }, all(), nil},
		} {
			t.Run(format.String()+"/"+c.name, func(t *testing.T) {
				s, err := sqlite.ScanJournal(c.change(slices.Clone(b)), key)
				if err != nil {
					t.Fatal(err)
				}
				if got := ids(s); !slices.Equal(got, c.want) {
					t.Errorf("read %d records, want %d: %v", len(got), len(c.want), got)
				}
				if !slices.Equal(s.Damage, c.damage) {
					t.Errorf("damage %+v, want %+v", s.Damage, c.damage)
				}
			})
		}
	}
}

// damagedJournal writes recs as the marked journal of a process that
// stopped beside the database at path, with one byte of frame i changed,
// and returns the journal's path.
func damagedJournal(t *testing.T, path string, recs []*guard.Record, i int) string {
	t.Helper()
	return orphanJournal(t, path, recs, func(b []byte, offs []int) { b[offs[i]+len(sqlite.FrameMark)+10] ^= 0x20 })
}

// orphanJournal writes recs as the journal of a process of this release
// that stopped beside the database at path (its key file beside it),
// changed by change (given where each frame begins), and returns the
// journal's path.
func orphanJournal(t *testing.T, path string, recs []*guard.Record, change func(b []byte, offs []int)) string {
	t.Helper()
	b, offs := journalBytes(recs, journalKeyOf(t, filepath.Join(filepath.Dir(path), "audit.key")))
	if change != nil {
		change(b, offs)
	}
	return plantJournal(t, path, b)
}

// plantJournal writes b as a journal beside the database at path, as
// whoever can write the database's directory can, and returns its path.
func plantJournal(t *testing.T, path string, b []byte) string {
	t.Helper()
	j := filepath.Join(sqlite.JournalsDir(path), guard.NewID()+".log")
	if err := os.MkdirAll(sqlite.JournalsDir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(j, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return j
}

// lossRecords are the records of damaged journals in the log.
func lossRecords(t *testing.T, db *DB) []*guard.Record {
	t.Helper()
	return eventRecords(t, db, MethodJournalDamaged)
}

// eventRecords are the event records of method in the log.
func eventRecords(t *testing.T, db *DB, method string) []*guard.Record {
	t.Helper()
	var out []*guard.Record
	if err := db.Reader().Records(context.Background(), func(r *guard.Record) error {
		if r.Kind == guard.KindEvent && r.Method == method {
			out = append(out, r)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// A journal with a damaged frame loses that frame alone: the records
// after it reach the log, the file is kept aside, an event record says
// what could not be read and between which records, and the loss is an
// alert, counted, until a person acknowledges it with a record of their
// own.
func TestADamagedJournalLosesNothingSilently(t *testing.T) {
	sqliteOnly(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "g.db")
	db := openDB(t, path)
	if err := db.Append(rec(1, guard.KindRequest)); err != nil {
		t.Fatal(err)
	}
	db.Close()
	recs := journalRecs(40)
	j := damagedJournal(t, path, recs, 7)

	db = openDB(t, path)
	defer db.Close()
	have := map[string]int64{}
	if err := db.Reader().Records(ctx, func(r *guard.Record) error { have[r.ID] = r.Seq; return nil }); err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		if _, ok := have[r.ID]; ok == (i == 7) {
			t.Errorf("record %d of the journal: in the log %v", i, ok)
		}
	}
	if _, err := os.Stat(j); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the damaged journal is still read as one: %v", err)
	}
	if _, err := os.Stat(j + damagedSuffix); err != nil {
		t.Errorf("the damaged journal was not kept aside: %v", err)
	}
	losses := lossRecords(t, db)
	if len(losses) != 1 {
		t.Fatalf("%d records of the damage, want 1", len(losses))
	}
	var d damageDetail
	if err := json.Unmarshal([]byte(losses[0].Detail), &d); err != nil {
		t.Fatal(err)
	}
	_, offs := journalBytes(recs, nil)
	run := damageRun{Offset: int64(offs[7]), Bytes: int64(offs[8] - offs[7]), Frames: 1, Lost: true,
		After:  &damageEdge{ID: recs[6].ID, Seq: have[recs[6].ID], Time: fmtTime(recs[6].Time)},
		Before: &damageEdge{ID: recs[8].ID, Seq: have[recs[8].ID], Time: fmtTime(recs[8].Time)}}
	if d.Journal != j+damagedSuffix || d.Read != 39 || d.Moved != 39 || !d.Lost || len(d.Runs) != 1 || *d.Runs[0].After != *run.After ||
		*d.Runs[0].Before != *run.Before || d.Runs[0].Offset != run.Offset || d.Runs[0].Bytes != run.Bytes || d.Runs[0].Frames != 1 {
		t.Errorf("the damage's record says %s", losses[0].Detail)
	}
	if !strings.Contains(losses[0].Reason, "records acknowledged there may be lost") || !strings.Contains(losses[0].Reason, recs[6].ID) {
		t.Errorf("the damage's reason: %s", losses[0].Reason)
	}
	if n := db.Integrity().IntegrityAlerts(); n != 1 {
		t.Errorf("%d integrity alerts counted, want 1", n)
	}
	alerts, err := db.Integrity().Alerts(ctx)
	if err != nil || len(alerts) != 1 || alerts[0].ID != losses[0].ID || alerts[0].Kind != AlertJournalDamaged {
		t.Fatalf("alerts: %+v %v", alerts, err)
	}
	verifyOK(t, db)

	if _, err := db.Integrity().AcknowledgeLoss(ctx, recs[3].ID, "alice", ""); !errors.Is(err, guard.ErrNotFound) {
		t.Errorf("acknowledging a record that is no loss: %v", err)
	}
	ack, err := db.Integrity().AcknowledgeLoss(ctx, losses[0].ID, "alice", "the disk was replaced")
	if err != nil {
		t.Fatal(err)
	}
	if ack.CallID != losses[0].ID || ack.DecidedBy != "alice" || ack.Method != MethodLossAcknowledged {
		t.Errorf("the acknowledgement: %+v", ack)
	}
	if _, err := db.Integrity().AcknowledgeLoss(ctx, losses[0].ID, "bob", ""); !errors.Is(err, ErrAcknowledged) || !strings.Contains(err.Error(), "alice") {
		t.Errorf("a second acknowledgement: %v", err)
	}
	if alerts, err := db.Integrity().Alerts(ctx); err != nil || len(alerts) != 0 {
		t.Errorf("alerts after the acknowledgement: %+v %v", alerts, err)
	}
	verifyOK(t, db)
	db.Close()

	// The file kept aside is not read again.
	db = openDB(t, path)
	defer db.Close()
	if n := len(lossRecords(t, db)); n != 1 {
		t.Errorf("%d records of the damage after the next open, want 1", n)
	}
}

// Damage where the database already held the journal's records (those
// after it were moved in before the process stopped) loses nothing: the
// file is kept aside and the record says so, and no alert is raised.
func TestDamageTheDatabaseHeldIsNoLoss(t *testing.T) {
	sqliteOnly(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "g.db")
	db := openDB(t, path)
	recs := journalRecs(10)
	for _, r := range recs {
		if err := db.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	damagedJournal(t, path, recs, 4)
	db = openDB(t, path)
	defer db.Close()
	losses := lossRecords(t, db)
	if len(losses) != 1 || !strings.Contains(losses[0].Reason, "which the database already held") {
		t.Fatalf("the damage's records: %+v", losses)
	}
	if alerts, err := db.Integrity().Alerts(ctx); err != nil || len(alerts) != 0 || db.Integrity().IntegrityAlerts() != 0 {
		t.Errorf("alerts %+v (%d counted) %v, want none", alerts, db.Integrity().IntegrityAlerts(), err)
	}
	verifyOK(t, db)
}

// A guard process that runs on the database moves in the journal of one
// that stopped meanwhile, within a tick, without waiting for the next
// writable open: its records reach the chain, and damage in it is
// recorded and counted by the process that found it.
func TestARunningProcessMovesInAStoppedProcessesJournal(t *testing.T) {
	sqliteOnly(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "g.db")
	db, err := Open(ctx, Options{Path: path, Durability: "normal", CheckpointEvery: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Append(rec(1, guard.KindRequest)); err != nil {
		t.Fatal(err)
	}
	whole, damaged := journalRecs(10), journalRecs(20)
	for _, r := range damaged {
		r.CallID += "-d"
	}
	j1 := orphanJournal(t, path, whole, nil)
	j2 := damagedJournal(t, path, damaged, 3)
	count := func() int {
		n := 0
		_ = db.Reader().Records(ctx, func(*guard.Record) error { n++; return nil })
		return n
	}
	waitFor(t, "the stopped process's records", func() bool { return count() == 1+10+19+1 })
	if n := db.Integrity().IntegrityAlerts(); n != 1 {
		t.Errorf("%d integrity alerts counted, want 1", n)
	}
	for _, p := range []string{j1, j2} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there: %v", p, err)
		}
	}
	if _, err := os.Stat(j2 + damagedSuffix); err != nil {
		t.Errorf("the damaged journal was not kept aside: %v", err)
	}
	verifyOK(t, db)
}

// A loss recorded in the log is an alert, on both engines, until a
// person acknowledges it; a damage that lost nothing is none.
func TestAlertsAreTheLossesNoOneAcknowledged(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, testPath(t))
	defer db.Close()
	loss := func(lost bool) *guard.Record {
		id := guard.NewID()
		return &guard.Record{ID: id, CallID: id, Kind: guard.KindEvent, Method: MethodJournalDamaged, Reason: "a journal was damaged",
			Detail: mustJSON(damageDetail{Journal: "j.log.damaged", Lost: lost})}
	}
	lost, held := loss(true), loss(false)
	if err := db.Append(lost, held); err != nil {
		t.Fatal(err)
	}
	alerts, err := db.Integrity().Alerts(ctx)
	if err != nil || len(alerts) != 1 || alerts[0].ID != lost.ID || alerts[0].Text != lost.Reason {
		t.Fatalf("alerts: %+v %v", alerts, err)
	}
	if _, err := db.Integrity().AcknowledgeLoss(ctx, lost.ID, "alice", "seen"); err != nil {
		t.Fatal(err)
	}
	if alerts, err := db.Integrity().Alerts(ctx); err != nil || len(alerts) != 0 {
		t.Errorf("alerts after the acknowledgement: %+v %v", alerts, err)
	}
}
