package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/guard-mcp/guard/store/sqlite"
)

// Whoever can write the database's directory can put a segment in
// DB.journal/, or append frames to one a stopped process left, and the
// recovery would move them in as guard's own records, giving them their
// chain hashes and MACs as it does: the tail of the log could be forged
// without the key after all. So every frame of a sealed segment
// (sqlite.JournalSealed) carries a MAC: HMAC-SHA256, under a key derived from the
// checkpoint key (sqlite.JournalPurpose), of the segment's id (random, in its
// header), the frame's offset in the segment (where its mark begins) and
// the SHA-256 of its fields. The id and the offset bind a frame to its
// place: one copied into another segment, or elsewhere in its own, does
// not verify. The frame's checksum covers the MAC, so a changed byte reads
// as damage (damage.go), while a frame whose checksum holds and whose MAC
// does not was written whole by someone without the key: forged.
//
// Moving a journal in (recoverJournal), a forged frame is never moved in:
// it is an integrity alert, counted once, and the journal is kept aside
// like a damaged one, with an event record (MethodJournalRefused) that
// names the file and each frame, an alert until a person acknowledges it.
// A segment of an earlier format carries no MAC: before the log's MACs
// begin (the upgrade's first open) it is moved in as before; once they
// have begun it could only come from a guard of an earlier release
// running beside this one, which must not, or from someone without the
// key, and is refused the same way. Readers of the journals of stopped
// processes (unchained.go) leave out what recovery would refuse when they
// hold the key, and say that what they read is unauthenticated when they
// do not.

// MethodJournalRefused is the method of the event record of a journal
// whose recovery refused frames: their MAC does not verify, or the
// journal is of an earlier format, left after the log's MACs began.
const MethodJournalRefused = "guard/journal_refused"

// AlertJournalRefused is the Kind of an Alert for a journal whose frames
// were refused.
const AlertJournalRefused = "journal_refused"

// maxNamedFrames bounds the refused frames an event record names one by
// one (it counts them all): whoever plants a journal chooses how many
// frames it holds.
const maxNamedFrames = 64

// errForeignKey is why journals are not moved in with a checkpoint key of
// another log: every frame's MAC would fail, and genuine records would be
// refused as forged.
var errForeignKey = errors.New("the checkpoint key is another log's")

// journalKey is the key the frames of journals are checked with: the key
// file's, when it is this log's. It is nil without the key's secret, and,
// with err wrapping errForeignKey, when the key is another log's (the
// log's checkpoints name another origin), which is used for nothing.
func (jn journals) journalKey(ctx context.Context) ([]byte, error) {
	if jn.db.auth.jkey == nil || jn.db.signer == nil {
		return nil, nil
	}
	origin, where, err := jn.db.logOrigin(ctx)
	if err != nil {
		return nil, err
	}
	if mine := jn.db.signer.Verifier().Name(); origin != "" && origin != mine {
		return nil, fmt.Errorf("%w: %s signs as %s, and this log's checkpoints as %s (%s): journals are checked, and moved in, only with this log's key",
			errForeignKey, jn.db.opts.KeyPath, mine, origin, where)
	}
	return jn.db.auth.jkey, nil
}

// refusedFrame names a frame the recovery did not move in.
type refusedFrame struct {
	Offset int64 `json:"offset"`
	Bytes  int64 `json:"bytes"`
	// ID and Time are what the frame says of its record, where its
	// fields fit and the id is one guard could have given.
	ID   string `json:"id,omitempty"`
	Time string `json:"time,omitempty"`
}

// refusalDetail is the detail of a MethodJournalRefused record.
type refusalDetail struct {
	Journal string `json:"journal"` // where the file is kept
	Format  string `json:"format"`  // its magic: guard-journal-3, or an earlier one
	// MACsFrom is, for a journal of an earlier format, the seq from which
	// on the log's records carry MACs: it was refused for being left
	// after that.
	MACsFrom int64 `json:"macs_from,omitempty"`
	// Refused is how many frames were not moved in; Frames names the
	// first maxNamedFrames of them.
	Refused int            `json:"records_refused"`
	Frames  []refusedFrame `json:"frames"`
	Read    int            `json:"records_read"`  // frames read whose MAC holds (or, refused, all)
	Moved   int            `json:"records_moved"` // records moved into the log now
	Damaged int64          `json:"damaged_bytes,omitempty"`
}

// refusal is what recoverJournal refuses of a segment: its forged frames,
// or, for a segment of an earlier format after MACs began (macsFrom > 0),
// every frame whose record the database does not hold.
type refusal struct {
	frames   []sqlite.ScannedFrame
	macsFrom int64
}

// refuse says what the recovery of a segment scanned as sc refuses, held
// saying which of its records the database holds; macsFrom is where the
// log's MACs start (0: not yet).
func refuse(sc *sqlite.JournalScan, held []bool, macsFrom int64) refusal {
	if sc.Format >= sqlite.FormatSealed || macsFrom == 0 {
		return refusal{frames: sc.Forged}
	}
	var r refusal
	for i, f := range sc.Frames {
		if !held[i] {
			r.frames = append(r.frames, f)
		}
	}
	if len(r.frames) > 0 || len(sc.Damage) > 0 {
		r.macsFrom = macsFrom
	}
	return r
}

// whole reports whether the whole segment is refused.
func (r refusal) whole() bool { return r.macsFrom > 0 }

// any reports whether anything is refused.
func (r refusal) any() bool { return len(r.frames) > 0 || r.whole() }

// offsets are the refused frames' offsets, by which each is counted once
// as an alert; a whole segment refused counts once, as offset 0.
func (r refusal) offsets() []int64 {
	if r.whole() {
		return []int64{0}
	}
	offs := make([]int64, len(r.frames))
	for i, f := range r.frames {
		offs[i] = f.Off
	}
	return offs
}

// recordRefusal appends the event record of the frames of a journal that
// its recovery refused, counts them as integrity alerts and says so in the
// log; aside is where the file will be kept. A record of the same file
// from an earlier attempt (one that could not rename it) is not written
// again.
func (jn journals) recordRefusal(ctx context.Context, path, aside string, sc *sqlite.JournalScan, r refusal, moved int) error {
	done, err := jn.journalRecorded(ctx, MethodJournalRefused, aside)
	if err != nil {
		return fmt.Errorf("refused journal: %w", err)
	}
	if done {
		return nil
	}
	d := refusalDetail{Journal: aside, Format: sc.Format.String(), MACsFrom: r.macsFrom, Refused: len(r.frames),
		Read: len(sc.Frames), Moved: moved, Damaged: sc.DamagedBytes(), Frames: []refusedFrame{}}
	for _, f := range r.frames[:min(len(r.frames), maxNamedFrames)] {
		rf := refusedFrame{Offset: f.Off, Bytes: f.End - f.Off}
		if f.Rec != nil && plainID(f.Rec.ID) {
			rf.ID, rf.Time = f.Rec.ID, fmtTime(f.Rec.Time)
		}
		d.Frames = append(d.Frames, rf)
	}
	rec, err := jn.appendJournalEvent(MethodJournalRefused, refusalText(filepath.Base(path), d), mustJSON(d))
	if err != nil {
		return fmt.Errorf("refused journal: %w", err)
	}
	jn.db.auth.alertJournal(path, r.offsets()...)
	ack := "once seen to, record it: guard audit acknowledge-loss " + rec.ID + " --reason TEXT"
	if r.whole() {
		jn.db.opts.Logger.Error("a journal of an earlier format, whose frames carry no MAC, was left after this log's MACs began: its records were not moved into the log. "+
			"Only a guard of an earlier release running on this database, which must not, or someone who can write the database's directory without the checkpoint key, could have written it; "+
			"it is kept aside. Find out which: stop any guard of an earlier release on this database and check the file against what its clients saw; "+ack,
			"journal", aside, "record", rec.ID, "format", d.Format, "macs_from", r.macsFrom, "records_refused", d.Refused)
		return nil
	}
	jn.db.opts.Logger.Error("a journal holds frames whose MAC does not verify: guard, which holds the checkpoint key, did not write them, someone who can write the database's directory did; "+
		"they were not moved into the log, the journal's other records were, and it is kept aside. Treat it as an incident: keep the file, find who can write the database's directory, "+
		"and keep the key file out of their reach; "+ack,
		"journal", aside, "record", rec.ID, "records_refused", d.Refused, "records_moved", moved)
	return nil
}

// plainID reports whether id is one guard could have given a record (a
// UUID, or the like in tests): only such an id is repeated in a refused
// frame's description, the rest of what a forged frame says being its
// author's to choose.
func plainID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// refusalText says for people what a refused journal's record says.
func refusalText(name string, d refusalDetail) string {
	var frames []string
	for _, f := range d.Frames {
		s := fmt.Sprintf("%d bytes at offset %d", f.Bytes, f.Offset)
		if f.ID != "" {
			s += fmt.Sprintf(" (record %s, %s)", f.ID, f.Time)
		}
		frames = append(frames, s)
	}
	if d.Refused > len(d.Frames) {
		frames = append(frames, strconv.Itoa(d.Refused-len(d.Frames))+" more")
	}
	if d.MACsFrom > 0 {
		out := fmt.Sprintf("the journal %s is of an earlier format (%s), whose frames carry no MAC, and was left after this log's MACs began (seq %d): "+
			"only a guard of an earlier release running on this database, which must not, or someone who can write the database's directory without the checkpoint key, could have written it; "+
			"its %d records not in the log were not moved in", name, d.Format, d.MACsFrom, d.Refused)
		if d.Damaged > 0 {
			out += fmt.Sprintf(" (and %d bytes of it could not be read)", d.Damaged)
		}
		return out + "; the file is kept as " + d.Journal
	}
	return fmt.Sprintf("the journal %s holds %d frames whose MAC does not verify: %s; guard, which holds the checkpoint key, did not write them: someone who can write the database's directory did. "+
		"They were not moved into the log (%d of its other records were, now); the file is kept as %s",
		name, d.Refused, strings.Join(frames, "; "), d.Moved, d.Journal)
}

// alertJournal counts as integrity alerts the frames at offs of the
// journal at path (offset 0: the whole journal), each once, whether a
// reader or the recovery found it; it returns how many were new.
func (a *tailAuth) alertJournal(path string, offs ...int64) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, off := range offs {
		k := journalFrame{path, off}
		if !a.framesAlerted[k] {
			a.framesAlerted[k] = true
			n++
		}
	}
	a.alerts.Add(int64(n))
	return n
}

// journalFrame names a frame of a journal (offset 0: the journal).
type journalFrame struct {
	path string
	off  int64
}
