package store

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store/sqlite"
)

// The frames guard writes carry a MAC under the key derived from the
// checkpoint key with the journal's own label: of the segment's id, the
// frame's offset and its fields. Read with that key, every frame holds;
// with any other, none does.
func TestJournalFramesCarryTheirMACs(t *testing.T) {
	sqliteOnly(t)
	path := filepath.Join(t.TempDir(), "g.db")
	o := protected(t, path)
	db, err := Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i := range 3 {
		if err := db.Append(rec(i, guard.KindRequest), rec(i, guard.KindOutcome)); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(db.ing.seg.Path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("guard-journal-3\n")) {
		t.Fatalf("the segment begins %q", b[:16])
	}
	key := db.signer.Derive("guard: the journal frames' MACs")
	sc, err := sqlite.ScanJournal(b, key)
	if err != nil || len(sc.Frames) != 6 || len(sc.Forged) != 0 || len(sc.Damage) != 0 || !sc.Checked {
		t.Fatalf("read with the key: %d frames, %d forged, %d damaged, %v", len(sc.Frames), len(sc.Forged), len(sc.Damage), err)
	}
	for _, other := range [][]byte{forgersKey(), db.signer.Derive(macPurpose)} {
		if sc, err := sqlite.ScanJournal(b, other); err != nil || len(sc.Frames) != 0 || len(sc.Forged) != 6 {
			t.Errorf("read with another key: %d frames, %d forged, %v", len(sc.Frames), len(sc.Forged), err)
		}
	}
}

// A scan tells a forged frame (its checksum holds, its MAC does not) from
// a damaged one, reads the frames around either, and binds each frame to
// its place: a genuine frame copied to another offset, or into another
// segment, is forged there. After damage it finds the next frame by its
// mark and a frame whose MAC holds: a frame inside a record's text, which
// a client chose, is no frame, where a segment without MACs would read it.
func TestAScanTellsForgedFramesFromDamage(t *testing.T) {
	key, other := forgersKey(), forgersKey()
	recs := journalRecs(12)
	// Record 8's arguments hold a whole frame, its checksum right.
	fake := &guard.Record{ID: "fake", CallID: "fake", Kind: guard.KindDecision, Decision: guard.ApprovalApproved, DecidedBy: "alice@example.com"}
	recs[8].Arguments = string(appendSealedFrame(nil, fake, other, make([]byte, sqlite.SegmentIDSize), 0))
	b, offs := journalBytes(recs, key)
	id := b[sqlite.SegmentIDAt : sqlite.SegmentIDAt+sqlite.SegmentIDSize]
	// Frame 2 sealed with another key; frame 5 replaced by a copy of
	// frame 4 (of the same size: the records differ only in their id).
	copy(b[offs[2]:], appendSealedFrame(nil, recs[2], other, id, int64(offs[2])))
	if offs[5]-offs[4] != offs[6]-offs[5] {
		t.Fatal("frames 4 and 5 differ in size")
	}
	copy(b[offs[5]:offs[6]], b[offs[4]:offs[5]])
	// Frame 8's length damaged: what follows its mark is read anew.
	b[offs[8]+len(sqlite.FrameMark)] ^= 0x04
	// A genuine frame of another segment at the same offset as frame 10.
	b2, offs2 := journalBytes(recs, key)
	copy(b[offs[10]:offs[11]], b2[offs2[10]:offs2[11]])

	sc, err := sqlite.ScanJournal(b, key)
	if err != nil {
		t.Fatal(err)
	}
	var read, forged []string
	for _, f := range sc.Frames {
		read = append(read, f.Rec.ID)
	}
	for _, f := range sc.Forged {
		forged = append(forged, f.Rec.ID)
	}
	want := []string{recs[0].ID, recs[1].ID, recs[3].ID, recs[4].ID, recs[6].ID, recs[7].ID, recs[9].ID, recs[11].ID}
	if !slices.Equal(read, want) {
		t.Errorf("read %v, want %v", read, want)
	}
	if !slices.Equal(forged, []string{recs[2].ID, recs[4].ID, recs[10].ID}) || sc.Forged[1].Off != int64(offs[5]) {
		t.Errorf("forged %v, want those of frames 2, 5 (a copy of 4) and 10", forged)
	}
	if len(sc.Damage) != 1 || sc.Damage[0].Off != int64(offs[8]) || sc.Damage[0].End != int64(offs[9]) {
		t.Errorf("damage %+v, want frame 8 alone", sc.Damage)
	}

	// Without the key, the frames are read as a marked segment's: none
	// is forged, and nothing tells the frame inside record 8's text from
	// a record.
	sc, err = sqlite.ScanJournal(b, nil)
	if err != nil || sc.Checked || len(sc.Frames) != 12 || len(sc.Forged) != 0 || !slices.ContainsFunc(sc.Frames, func(f sqlite.ScannedFrame) bool { return f.Rec.ID == "fake" }) {
		t.Errorf("read without the key: %d frames, %d forged, %v", len(sc.Frames), len(sc.Forged), err)
	}
	// A changed byte in a sealed segment's id is damage to its header,
	// not forgery of its frames.
	b[sqlite.SegmentIDAt] ^= 1
	if _, err := sqlite.ScanJournal(b, key); err == nil || !strings.Contains(err.Error(), "header is damaged") {
		t.Errorf("a damaged id: %v", err)
	}
}

// crashedProcess runs a guard process on the database of o that appends
// the records of calls 0 to 54 and is killed with those of 50 to 54 in its
// journal alone; it returns the journal's path.
func crashedProcess(t *testing.T, o Options) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperCrasher$")
	cmd.Env = append(os.Environ(), "GUARD_STORE_CRASH_DB="+o.Path, "GUARD_STORE_CRASH_DURABILITY=normal", "GUARD_STORE_CRASH_MORE=1",
		"GUARD_STORE_CRASH_KEY="+o.KeyPath)
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Fatalf("the child did not crash:\n%s", out)
	}
	left, _ := sqlite.Segments(sqlite.JournalsDir(o.Path))
	if len(left) != 1 {
		t.Fatalf("the crashed process left %d journals, want its own", len(left))
	}
	return left[0]
}

// recordIDs are the ids of the records in the log, and how often each is.
func recordIDs(t *testing.T, db *DB) map[string]int {
	t.Helper()
	ids := map[string]int{}
	if err := db.Reader().Records(context.Background(), func(r *guard.Record) error { ids[r.ID]++; return nil }); err != nil {
		t.Fatal(err)
	}
	return ids
}

// refusals are the records of refused journals in the log, with their
// details.
func refusals(t *testing.T, db *DB) ([]*guard.Record, []refusalDetail) {
	t.Helper()
	recs := eventRecords(t, db, MethodJournalRefused)
	ds := make([]refusalDetail, len(recs))
	for i, r := range recs {
		if err := json.Unmarshal([]byte(r.Detail), &ds[i]); err != nil {
			t.Fatal(err)
		}
	}
	return recs, ds
}

// forgedDecision is a decision approving the held call callID "by
// alice@example.com": what whoever forges the log's tail wants in it.
func forgedDecision(callID string) *guard.Record {
	return &guard.Record{ID: guard.NewID(), CallID: callID, Kind: guard.KindDecision, Time: time.Now().UTC().Truncate(time.Millisecond),
		Server: "files", Tool: "write_file", Decision: guard.ApprovalApproved, DecidedBy: "alice@example.com", Reason: "looks fine", Approval: callID}
}

// Someone who can write the database and its directory, but not the key
// file (kept elsewhere), plants a journal of frames whose checksums they
// computed with guard's code, plants one in the format of before MACs,
// and changes and appends frames in the journal of a guard process that
// was killed. A reader holding the key leaves them all out (verify says
// so); one without it reads them and says they are unauthenticated. The
// next writable open moves none of them in and the killed process's own
// records around them all; it counts each as an integrity alert, records
// each journal in an event that names its frames, an alert until a person
// acknowledges it, and keeps the files aside.
func TestAForgedJournalIsNotMovedIn(t *testing.T) {
	sqliteOnly(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "g.db")
	o := protected(t, path)
	real := crashedProcess(t, o)

	// The killed process's journal: frame 52 changed (and sealed anew
	// with the only key at hand), a decision appended, and a copy of
	// frame 53 after it.
	b, err := os.ReadFile(real)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := sqlite.ScanJournal(b, journalKeyOf(t, o.KeyPath))
	if err != nil || len(sc.Frames) != 55 {
		t.Fatalf("the killed process's journal: %d frames, %v", len(sc.Frames), err)
	}
	id := b[sqlite.SegmentIDAt : sqlite.SegmentIDAt+sqlite.SegmentIDSize]
	f52, f53 := sc.Frames[52], sc.Frames[53]
	changed := *f52.Rec
	changed.Arguments = strings.Replace(changed.Arguments, "/tmp/", "/etc/", 1)
	copy(b[f52.Off:f52.End], appendSealedFrame(nil, &changed, forgersKey(), id, f52.Off))
	end := int(sc.Frames[54].End)
	decision := forgedDecision("call-50")
	b = appendSealedFrame(b[:end], decision, forgersKey(), id, int64(end))
	b = append(b, b[f53.Off:f53.End]...)
	if err := os.WriteFile(real, b, 0o600); err != nil {
		t.Fatal(err)
	}
	// A journal planted whole, and one in the format of before MACs.
	planted := []*guard.Record{forgedDecision("call-51"), rec(60, guard.KindRequest), rec(60, guard.KindOutcome)}
	for _, r := range planted[1:] {
		r.ID, r.Time = guard.NewID(), time.Now().UTC().Truncate(time.Millisecond)
	}
	sealed, _ := segmentBytes(planted, sqlite.FormatSealed, forgersKey())
	sealedPath := plantJournal(t, path, sealed)
	older := []*guard.Record{forgedDecision("call-52"), rec(61, guard.KindRequest)}
	older[1].ID, older[1].Time = guard.NewID(), time.Now().UTC().Truncate(time.Millisecond)
	marked, _ := segmentBytes(older, sqlite.FormatMarked, nil)
	markedPath := plantJournal(t, path, marked)
	forgedIDs := []string{decision.ID, planted[0].ID, planted[1].ID, planted[2].ID, older[0].ID, older[1].ID}

	// A reader with the key.
	ro, err := OpenReadOnly(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	u, err := ro.Verifier().Unchained(ctx)
	if err != nil || u.Records != 4 || u.Refused != 3+3+2 || u.Unauthenticated != 0 {
		t.Errorf("unchained with the key: %+v %v, want the killed process's 4 records and 8 frames refused", u, err)
	}
	if ids := queryIDs(t, ro, Filter{DecidedBy: "alice@example.com"}); len(ids) != 0 {
		t.Errorf("calls alice approved, read with the key: %v", ids)
	}
	if n := ro.Integrity().IntegrityAlerts(); n != 3+3+1 {
		t.Errorf("a reader counted %d integrity alerts, want 7", n)
	}
	rep, err := ro.Verifier().Verify(ctx)
	if err != nil || !slices.ContainsFunc(rep.Notes, func(n string) bool {
		return strings.HasPrefix(n, "8 frames of journals of stopped processes were left out")
	}) {
		t.Errorf("verify with the key: %+v %v", rep, err)
	}
	ro.Close()
	// A reader without it.
	ro, err = OpenReadOnly(ctx, Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	u, err = ro.Verifier().Unchained(ctx)
	if err != nil || u.Records != 5+2+3+2 || u.Unauthenticated != u.Records || u.Refused != 0 {
		t.Errorf("unchained without the key: %+v %v, want every frame, unauthenticated", u, err)
	}
	rep, err = ro.Verifier().Verify(ctx)
	if err != nil || !slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.Contains(n, "journals of stopped processes are unauthenticated") }) {
		t.Errorf("verify without the key: %+v %v", rep, err)
	}
	ro.Close()

	db, err := Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ids := recordIDs(t, db)
	for i := range 55 {
		if n := ids[recordOf(t, db, i)]; n != 1 && i != 52 {
			t.Errorf("call %d is in the log %d times, want once", i, n)
		}
	}
	if id := recordOf(t, db, 52); id != "" {
		t.Errorf("call 52, whose frame was changed, is in the log as %s", id)
	}
	for _, id := range forgedIDs {
		if ids[id] > 0 {
			t.Errorf("the forged record %s is in the log", id)
		}
	}
	if n := db.Integrity().IntegrityAlerts(); n != 3+3+1 {
		t.Errorf("%d integrity alerts counted, want 7", n)
	}
	recs, ds := refusals(t, db)
	if len(ds) != 3 {
		t.Fatalf("%d records of refused journals, want 3", len(ds))
	}
	byJournal := map[string]int{}
	for i, d := range ds {
		byJournal[d.Journal] = i
	}
	if i, ok := byJournal[real+damagedSuffix]; !ok || ds[i].Refused != 3 || ds[i].Moved != 4 || len(ds[i].Frames) != 3 ||
		ds[i].Frames[0].Offset != f52.Off || ds[i].Frames[1].Offset != int64(end) || ds[i].Frames[1].ID != decision.ID ||
		!strings.Contains(recs[i].Reason, "holds 3 frames whose MAC does not verify") {
		t.Errorf("the killed process's journal's record: %s\n%s", recs[i].Detail, recs[i].Reason)
	}
	if i, ok := byJournal[sealedPath+damagedSuffix]; !ok || ds[i].Refused != 3 || ds[i].Moved != 0 || ds[i].Format != "guard-journal-3" {
		t.Errorf("the planted journal's record: %s", recs[i].Detail)
	}
	if i, ok := byJournal[markedPath+damagedSuffix]; !ok || ds[i].Refused != 2 || ds[i].MACsFrom != 1 || ds[i].Format != "guard-journal-2" ||
		!strings.Contains(recs[i].Reason, "earlier format (guard-journal-2)") {
		t.Errorf("the planted journal of an earlier format's record: %s\n%s", recs[i].Detail, recs[i].Reason)
	}
	for _, p := range []string{real, sealedPath, markedPath} {
		if _, err := os.Stat(p + damagedSuffix); err != nil {
			t.Errorf("%s was not kept aside: %v", p, err)
		}
	}
	alerts, err := db.Integrity().Alerts(ctx)
	if err != nil || len(alerts) != 3 || alerts[0].Kind != AlertJournalRefused {
		t.Fatalf("alerts: %+v %v", alerts, err)
	}
	if ids := queryIDs(t, db, Filter{DecidedBy: "alice@example.com"}); len(ids) != 0 {
		t.Errorf("calls alice approved: %v", ids)
	}
	db.ing.caughtUp(ctx)
	if err := db.ckpt.writeCheckpoint(); err != nil {
		t.Fatal(err)
	}
	rep, err = db.Verifier().Verify(ctx)
	if err != nil || !rep.OK || len(rep.Notes) != 3 || !strings.HasPrefix(rep.Notes[0], "unacknowledged refused journal "+alerts[0].ID) {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	if _, err := db.Integrity().AcknowledgeLoss(ctx, alerts[0].ID, "alice", "the directory's permissions are fixed"); err != nil {
		t.Fatal(err)
	}
	if alerts, err := db.Integrity().Alerts(ctx); err != nil || len(alerts) != 2 {
		t.Errorf("alerts after an acknowledgement: %+v %v", alerts, err)
	}
}

// recordOf is the id of the request of call i that the log holds (rec's
// calls, as TestHelperCrasher appends them), or "".
func recordOf(t *testing.T, db *DB, i int) string {
	t.Helper()
	var id string
	_ = db.r.QueryRow(`SELECT id FROM records WHERE call_id = ? AND kind = 'request'`, "call-"+strconv.Itoa(i)).Scan(&id)
	return id
}

// A guard running on the database refuses, within a tick, a journal
// planted beside it, as a writable open does.
func TestARunningProcessRefusesAForgedJournal(t *testing.T) {
	sqliteOnly(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "g.db")
	o := protected(t, path)
	o.CheckpointEvery = 10 * time.Millisecond
	db, err := Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	heldCall(t, db, "held-1")
	sealed, _ := segmentBytes([]*guard.Record{forgedDecision("held-1")}, sqlite.FormatSealed, forgersKey())
	marked, _ := segmentBytes([]*guard.Record{forgedDecision("held-1"), forgedDecision("held-1")}, sqlite.FormatMarked, nil)
	plantJournal(t, path, sealed)
	plantJournal(t, path, marked)
	waitFor(t, "the refusals", func() bool { a, _ := db.Integrity().Alerts(ctx); return len(a) == 2 })
	if n := db.Integrity().IntegrityAlerts(); n != 2 {
		t.Errorf("%d integrity alerts counted, want 2", n)
	}
	if ids := queryIDs(t, db, Filter{DecidedBy: "alice@example.com"}); len(ids) != 0 {
		t.Errorf("calls alice approved: %v", ids)
	}
	if left, _ := sqlite.Segments(sqlite.JournalsDir(path)); len(left) != 1 {
		t.Errorf("journals left: %v, want the process's own", left)
	}
	verifyOK(t, db)
}

// A journal of the release before moves in on the upgrade's first open,
// before the log's MACs begin; once they have, one is refused, kept aside
// and recorded, and the log says what to do.
func TestAJournalOfAnEarlierFormatMovesInOnlyBeforeMACs(t *testing.T) {
	sqliteOnly(t)
	ctx := context.Background()
	path := logBeforeUsers(t) // 14 records, no MACs
	if err := os.MkdirAll(sqlite.JournalsDir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	recs := journalRecs(4)
	b, _ := segmentBytes(recs[:2], sqlite.FormatUnmarked, nil)
	plantJournal(t, path, b)
	ro, err := OpenReadOnly(ctx, Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if u, err := ro.Verifier().Unchained(ctx); err != nil || u.Records != 2 || u.Refused != 0 {
		t.Errorf("unchained before MACs: %+v %v", u, err)
	}
	ro.Close()
	db := openDB(t, path)
	ids := recordIDs(t, db)
	if ids[recs[0].ID] != 1 || ids[recs[1].ID] != 1 {
		t.Fatalf("the journal of the release before was not moved in: %v", ids)
	}
	from, _ := macsStart(t, db)
	if from != 17 {
		t.Fatalf("MACs from %d, want 17, after the journal's records", from)
	}
	db.Close()

	b, _ = segmentBytes(recs[2:], sqlite.FormatUnmarked, nil)
	j := plantJournal(t, path, b)
	ro, err = OpenReadOnly(ctx, Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if u, err := ro.Verifier().Unchained(ctx); err != nil || u.Records != 0 || u.Refused != 2 {
		t.Errorf("unchained after MACs began: %+v %v", u, err)
	}
	ro.Close()
	var logs bytes.Buffer
	db, err = Open(ctx, Options{Path: path, Durability: "normal", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ids = recordIDs(t, db)
	if ids[recs[2].ID] != 0 || ids[recs[3].ID] != 0 {
		t.Errorf("a journal of the release before was moved in after MACs began")
	}
	recsR, ds := refusals(t, db)
	if len(ds) != 1 || ds[0].MACsFrom != 17 || ds[0].Refused != 2 || ds[0].Journal != j+damagedSuffix ||
		!strings.Contains(recsR[0].Reason, "earlier format (guard-journal-1)") || !strings.Contains(recsR[0].Reason, "MACs began (seq 17)") {
		t.Fatalf("the refusal: %+v", recsR)
	}
	if n := db.Integrity().IntegrityAlerts(); n != 1 {
		t.Errorf("%d integrity alerts, want 1", n)
	}
	if !strings.Contains(logs.String(), "guard audit acknowledge-loss "+recsR[0].ID) || !strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("the log does not say what to do:\n%s", logs.String())
	}
	if _, err := os.Stat(j + damagedSuffix); err != nil {
		t.Errorf("the journal was not kept aside: %v", err)
	}
	verifyOK(t, db)
}

// A writable open whose key is another log's moves no journal in: every
// frame would fail its MAC, and the journal waits for this log's key.
func TestAJournalWaitsForTheLogsKey(t *testing.T) {
	sqliteOnly(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "g.db")
	o := protected(t, path)
	db, err := Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Append(rec(1, guard.KindRequest)); err != nil {
		t.Fatal(err)
	}
	db.Close()
	recs := journalRecs(2)
	b, _ := journalBytes(recs, journalKeyOf(t, o.KeyPath))
	j := plantJournal(t, path, b)

	var logs bytes.Buffer
	stray := Options{Path: path, Durability: "normal", Logger: slog.New(slog.NewTextHandler(&logs, nil))} // a key made beside the database
	db, err = Open(ctx, stray)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "the checkpoint key is another log's") {
		t.Errorf("the log does not say why the journal waits:\n%s", logs.String())
	}
	if ids := recordIDs(t, db); ids[recs[0].ID] != 0 {
		t.Error("a journal was moved in with another log's key")
	}
	if _, err := os.Stat(j); err != nil || db.Integrity().IntegrityAlerts() != 0 {
		t.Errorf("the journal is not left as it was for this log's key (%v), or alerts were raised (%d)", err, db.Integrity().IntegrityAlerts())
	}
	db.Close()
	if err := os.Remove(filepath.Join(filepath.Dir(path), "audit.key")); err != nil {
		t.Fatal(err)
	}
	db, err = Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if ids := recordIDs(t, db); ids[recs[0].ID] != 1 || ids[recs[1].ID] != 1 {
		t.Errorf("the journal was not moved in with the log's key")
	}
}

// Whatever bytes of a sealed segment change, a scan with the key reads
// only frames guard wrote, each where it wrote it. (A changed magic makes
// it a segment of an earlier format, which recovery refuses once the
// log's MACs have begun.)
func FuzzScanJournal(f *testing.F) {
	key := []byte("the journal key")
	recs := journalRecs(6)
	recs[3].Arguments = string(appendSealedFrame(nil, recs[0], []byte("another key"), make([]byte, sqlite.SegmentIDSize), 0))
	seg, offs := journalBytes(recs, key)
	f.Add(uint16(offs[1]+9), []byte{0x01})
	f.Add(uint16(offs[3]+len(sqlite.FrameMark)), []byte{0x7f})
	f.Add(uint16(offs[5]), seg[offs[4]:offs[5]])
	f.Add(uint16(offs[6]), seg[offs[2]:offs[4]])
	f.Fuzz(func(t *testing.T, at uint16, patch []byte) {
		if int(at) > len(seg) {
			return
		}
		b := slices.Clone(seg)
		n := copy(b[at:], patch)
		b = append(b, patch[n:]...)
		sc, err := sqlite.ScanJournal(b, key)
		if err != nil || sc.Format != sqlite.FormatSealed {
			return
		}
		for _, fr := range sc.Frames {
			i := slices.Index(offs, int(fr.Off))
			if i < 0 || i == len(recs) || fr.End != int64(offs[i+1]) || !reflect.DeepEqual(fr.Rec, recs[i]) {
				t.Fatalf("read a frame at %d-%d that guard did not write there: %+v", fr.Off, fr.End, fr.Rec)
			}
		}
	})
}

// BenchmarkAppendFrame is what an append's frame costs to build: as
// before frames carried MACs (marked), and sealed, whole and in the part
// done under the journal's lock (the MAC of the offset, the digest of the
// fields being made before).
func BenchmarkAppendFrame(b *testing.B) {
	r := &guard.Record{ID: guard.NewID(), CallID: guard.NewID(), Kind: guard.KindRequest, Session: "s1", Client: "claude-ai/0.1.0",
		Server: "files", Method: "tools/call", Tool: "write_file", Decision: guard.DecisionAllowed, DecidedBy: "default", Time: time.Now(),
		Arguments: `{"path":"/srv/data/project-7/report.txt","content":"quarterly revenue figures for the board, draft 7"}`}
	m, id := sqlite.NewFrameMACer(forgersKey()), make([]byte, sqlite.SegmentIDSize)
	var buf []byte
	b.Run("marked", func(b *testing.B) {
		for b.Loop() {
			buf = appendMarkedFrame(buf[:0], r)
		}
	})
	var f sqlite.AppendFrames
	b.Run("sealed", func(b *testing.B) {
		for b.Loop() {
			f.Reset()
			f.Add(r)
			f.Seal(m, id, sqlite.JournalHeader)
		}
	})
	b.Run("sealed/locked", func(b *testing.B) {
		for b.Loop() {
			f.Seal(m, id, sqlite.JournalHeader)
		}
	})
}
