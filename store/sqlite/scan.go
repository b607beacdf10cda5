package sqlite

import (
	"bytes"
	"encoding/binary"
	"os"

	guard "github.com/guard-mcp/guard"
)

// Reading a journal whose owner is gone (journal.go): every frame that
// can be read is read, and one that cannot costs itself alone. The
// reader then looks for the next frame: in a marked segment at the next
// FrameMark whose frame's checksum holds (and, in a sealed segment read
// with the key, whose MAC holds: a frame's worth of bytes inside a
// record's text, which a client chose, is no frame); in an unmarked one
// (the release before's) at the next offset where a frame's checksum
// holds and another frame, or the end of what was written, follows it.
// What lies after the last frame is either nothing (zeros, the file's
// end) or a frame whose write a crash cut short, which was never
// acknowledged: neither is a loss. Anything else that cannot be read is
// damage. A frame of a sealed segment whose checksum holds and whose MAC
// does not was written whole by someone without the key (a changed byte
// fails the checksum, which covers the MAC): it is forged, not damaged.

// ScannedFrame is one frame a scan read.
type ScannedFrame struct {
	Rec      *guard.Record
	Off, End int64
}

// JournalDamage is a run of bytes that could not be read as frames.
type JournalDamage struct {
	Off, End int64
	// Frames is how many frames the run held, when the lengths in it
	// lead from its start to its end (0: not known).
	Frames int
	// Before is the index of the first frame read after the run (the
	// run follows frames[before-1]); len(frames) when none follows.
	Before int
}

// JournalScan is what a scan read of a segment.
type JournalScan struct {
	Format JournalFormat
	Marked bool
	// Checked reports whether the frames' MACs were checked: a sealed
	// segment read with the key. frames then holds only those whose MAC
	// holds.
	Checked bool
	Frames  []ScannedFrame
	Damage  []JournalDamage
	// Forged are the frames whose checksum holds and whose MAC does not
	// (rec is what the frame says, nil when its fields do not fit it).
	Forged []ScannedFrame
}

// Records are the records of the frames read, in order.
func (s *JournalScan) Records() []*guard.Record {
	out := make([]*guard.Record, len(s.Frames))
	for i, f := range s.Frames {
		out[i] = f.Rec
	}
	return out
}

// DamagedBytes is the number of bytes that could not be read.
func (s *JournalScan) DamagedBytes() int64 {
	var n int64
	for _, d := range s.Damage {
		n += d.End - d.Off
	}
	return n
}

// ScanFile reads the segment at path (ScanJournal).
func ScanFile(path string, key []byte) (*JournalScan, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ScanJournal(b, key)
}

// ScanJournal reads every frame of a segment's bytes that can be read,
// from the first (whatever the header says: see store's recoverJournal), and the
// runs of bytes between them that cannot. With key (the journal's MAC
// key), the frames of a sealed segment are read only when their MAC
// holds; without it, as those of a marked one.
func ScanJournal(b []byte, key []byte) (*JournalScan, error) {
	format, err := segmentFormat(b)
	if err != nil {
		return nil, err
	}
	s := &JournalScan{Format: format, Marked: format.Marked()}
	if len(b) < JournalHeader {
		return s, nil // a header cut short: no frame was written
	}
	fr := frameReader{b: b, marked: s.Marked}
	if format == FormatSealed {
		if fr.id, err = segmentID(b); err != nil {
			return nil, err
		}
		fr.sealed = true
		if key != nil {
			fr.m, s.Checked = NewFrameMACer(key), true
		}
	}
	marked := s.Marked
	// Whatever lies past the last byte that is not zero was never
	// written (or is a frame's checksum's last zeros, which a frame
	// read whole takes with it).
	written := len(bytes.TrimRight(b, "\x00"))
	for off := JournalHeader; off < written; {
		switch r, n, st := fr.at(off); st {
		case frameRead:
			s.Frames = append(s.Frames, ScannedFrame{Rec: r, Off: int64(off), End: int64(off + n)})
			off += n
			continue
		case frameForged:
			s.Forged = append(s.Forged, ScannedFrame{Rec: r, Off: int64(off), End: int64(off + n)})
			off += n
			continue
		}
		next := fr.resync(off+1, written)
		if next < 0 {
			// Nothing readable follows: the end of what was written,
			// unless the bytes here are a frame that was written whole
			// and then damaged.
			if b[off] == 0 || cutShort(b, off, written, marked) {
				break
			}
			next = max(written, frameEnd(b, off, marked))
		}
		s.Damage = append(s.Damage, JournalDamage{Off: int64(off), End: int64(next),
			Frames: countFrames(b, off, next, marked), Before: len(s.Frames)})
		off = next
	}
	return s, nil
}

// frameReader reads the frames of one segment's bytes.
type frameReader struct {
	b      []byte
	marked bool
	sealed bool        // the frames carry a MAC
	id     []byte      // a sealed segment's id
	m      *FrameMACer // checks the MACs; nil: they are not checked
}

// frameState is what frameReader.at found.
type frameState int

const (
	frameNone   frameState = iota // no frame whose checksum holds and whose fields fit
	frameRead                     // a frame, its MAC checked where there is one to check
	frameForged                   // a frame whose checksum holds and whose MAC does not
)

// at reads the frame at off.
func (fr *frameReader) at(off int) (*guard.Record, int, frameState) {
	p := fr.b[off:]
	mark := 0
	if fr.marked {
		if !bytes.HasPrefix(p, []byte(FrameMark)) {
			return nil, 0, frameNone
		}
		mark = len(FrameMark)
	}
	body, n, err := framePayload(p[mark:])
	if err != nil {
		return nil, 0, frameNone
	}
	if fr.sealed {
		if len(body) < macSize {
			return nil, 0, frameNone
		}
		fields, mac := body[:len(body)-macSize], body[len(body)-macSize:]
		if fr.m != nil && !fr.m.valid(fr.id, int64(off), fields, mac) {
			r, _ := decodeFields(fields)
			return r, mark + n, frameForged
		}
		body = fields
	}
	r, err := decodeFields(body)
	if err != nil {
		return nil, 0, frameNone
	}
	return r, mark + n, frameRead
}

// resync is the offset of the first frame at or after from that begins
// before written, or -1.
func (fr *frameReader) resync(from, written int) int {
	b := fr.b
	if fr.marked {
		for i := from; i < written; {
			j := bytes.Index(b[i:written], []byte(FrameMark))
			if j < 0 {
				return -1
			}
			if _, _, st := fr.at(i + j); st == frameRead {
				return i + j
			}
			i += j + 1
		}
		return -1
	}
	// Without marks, a frame found by its checksum alone must also be
	// followed by the end of what was written or by another frame.
	for i := from; i < written; i++ {
		_, n, st := fr.at(i)
		if st != frameRead {
			continue
		}
		if p := i + n; p >= written || cutShort(b, p, written, false) {
			return i
		} else if _, _, st := fr.at(p); st == frameRead {
			return i
		}
	}
	return -1
}

// cutShort reports whether the bytes at off, the last written, are the
// start of a frame whose write ended early: the frame they begin runs
// past the file's end, or at least its checksum was never written (it
// is zeros, as the segment was made).
func cutShort(b []byte, off, written int, marked bool) bool {
	p := b[off:]
	mark := 0
	if marked {
		k := min(len(p), len(FrameMark))
		if string(p[:k]) != FrameMark[:k] {
			return false
		}
		if k < len(FrameMark) {
			return true
		}
		mark = k
	}
	n, k := binary.Uvarint(p[mark:])
	if k == 0 {
		return true // the length itself runs past the end
	}
	if k < 0 || n > uint64(len(b)) {
		return false
	}
	end := off + mark + k + int(n) + 4
	return end > len(b) || end-written >= 4
}

// frameEnd is where the frame at off ends by its length, or 0 when that
// is not within b.
func frameEnd(b []byte, off int, marked bool) int {
	mark := 0
	if marked {
		mark = len(FrameMark)
	}
	if off+mark > len(b) {
		return 0
	}
	n, k := binary.Uvarint(b[off+mark:])
	if k <= 0 || n > uint64(len(b)) {
		return 0
	}
	if end := off + mark + k + int(n) + 4; end <= len(b) {
		return end
	}
	return 0
}

// countFrames follows the lengths of the frames from off and returns how
// many frames lead exactly to end, or 0 when they do not.
func countFrames(b []byte, off, end int, marked bool) int {
	n := 0
	for p := off; p < end; n++ {
		mark := 0
		if marked {
			if !bytes.HasPrefix(b[p:], []byte(FrameMark)) {
				return 0
			}
			mark = len(FrameMark)
		}
		l, k := binary.Uvarint(b[p+mark:])
		if k <= 0 || l == 0 || l > uint64(len(b)) {
			return 0
		}
		p += mark + k + int(l) + 4
		if p > end {
			return 0
		}
	}
	return n
}
