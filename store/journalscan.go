package store

import (
	"bytes"
	"encoding/binary"
	"os"

	guard "github.com/guard-mcp/guard"
)

// Reading a journal whose owner is gone (journal.go): every frame that
// can be read is read, and one that cannot costs itself alone. The
// reader then looks for the next frame: in a marked segment at the next
// frameMark whose frame's checksum holds; in an unmarked one (the release
// before's) at the next offset where a frame's checksum holds and another
// frame, or the end of what was written, follows it. What lies after the
// last frame is either nothing (zeros, the file's end) or a frame whose
// write a crash cut short, which was never acknowledged: neither is a
// loss. Anything else that cannot be read is damage.

// scannedFrame is one frame a scan read.
type scannedFrame struct {
	rec      *guard.Record
	off, end int64
}

// journalDamage is a run of bytes that could not be read as frames.
type journalDamage struct {
	off, end int64
	// frames is how many frames the run held, when the lengths in it
	// lead from its start to its end (0: not known).
	frames int
	// before is the index of the first frame read after the run (the
	// run follows frames[before-1]); len(frames) when none follows.
	before int
}

// journalScan is what a scan read of a segment.
type journalScan struct {
	marked bool
	frames []scannedFrame
	damage []journalDamage
}

// records are the records of the frames read, in order.
func (s *journalScan) records() []*guard.Record {
	out := make([]*guard.Record, len(s.frames))
	for i, f := range s.frames {
		out[i] = f.rec
	}
	return out
}

// damagedBytes is the number of bytes that could not be read.
func (s *journalScan) damagedBytes() int64 {
	var n int64
	for _, d := range s.damage {
		n += d.end - d.off
	}
	return n
}

// scanFile reads the segment at path (scanJournal).
func scanFile(path string) (*journalScan, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return scanJournal(b)
}

// scanJournal reads every frame of a segment's bytes that can be read,
// from the first (whatever the header says: see recoverJournal), and the
// runs of bytes between them that cannot.
func scanJournal(b []byte) (*journalScan, error) {
	marked, err := segmentMarked(b)
	if err != nil {
		return nil, err
	}
	s := &journalScan{marked: marked}
	if len(b) < journalHeader {
		return s, nil // a header cut short: no frame was written
	}
	// Whatever lies past the last byte that is not zero was never
	// written (or is a frame's checksum's last zeros, which a frame
	// read whole takes with it).
	written := len(bytes.TrimRight(b, "\x00"))
	for off := journalHeader; off < written; {
		if r, n, ok := frameAt(b, off, marked); ok {
			s.frames = append(s.frames, scannedFrame{rec: r, off: int64(off), end: int64(off + n)})
			off += n
			continue
		}
		next := resync(b, off+1, written, marked)
		if next < 0 {
			// Nothing readable follows: the end of what was written,
			// unless the bytes here are a frame that was written whole
			// and then damaged.
			if b[off] == 0 || cutShort(b, off, written, marked) {
				break
			}
			next = max(written, frameEnd(b, off, marked))
		}
		s.damage = append(s.damage, journalDamage{off: int64(off), end: int64(next),
			frames: countFrames(b, off, next, marked), before: len(s.frames)})
		off = next
	}
	return s, nil
}

// frameAt reads the frame at off, when there is one whose checksum holds
// and whose fields fit.
func frameAt(b []byte, off int, marked bool) (*guard.Record, int, bool) {
	p := b[off:]
	mark := 0
	if marked {
		if !bytes.HasPrefix(p, []byte(frameMark)) {
			return nil, 0, false
		}
		mark = len(frameMark)
	}
	r, n, err := readFrame(p[mark:])
	if err != nil {
		return nil, 0, false
	}
	return r, mark + n, true
}

// resync is the offset of the first frame at or after from that begins
// before written, or -1.
func resync(b []byte, from, written int, marked bool) int {
	if marked {
		for i := from; i < written; {
			j := bytes.Index(b[i:written], []byte(frameMark))
			if j < 0 {
				return -1
			}
			if _, _, ok := frameAt(b, i+j, true); ok {
				return i + j
			}
			i += j + 1
		}
		return -1
	}
	// Without marks, a frame found by its checksum alone must also be
	// followed by the end of what was written or by another frame.
	for i := from; i < written; i++ {
		_, n, ok := frameAt(b, i, false)
		if !ok {
			continue
		}
		if p := i + n; p >= written || cutShort(b, p, written, false) {
			return i
		} else if _, _, ok := frameAt(b, p, false); ok {
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
		k := min(len(p), len(frameMark))
		if string(p[:k]) != frameMark[:k] {
			return false
		}
		if k < len(frameMark) {
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
		mark = len(frameMark)
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
			if !bytes.HasPrefix(b[p:], []byte(frameMark)) {
				return 0
			}
			mark = len(frameMark)
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
