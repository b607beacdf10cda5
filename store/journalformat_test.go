package store

import (
	"crypto/rand"
	"encoding/binary"
	"hash/crc32"
	"testing"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
	"github.com/guard-mcp/guard/store/sqlite"
)

// appendMarkedFrame appends r's frame in a segment of sqlite.FormatMarked to b:
// how segments were written before frames carried a MAC.
func appendMarkedFrame(b []byte, r *guard.Record) []byte {
	return appendFrame(append(b, sqlite.FrameMark...), r)
}

// appendFrame appends r's frame without its mark to b: the form of the
// release before (sqlite.FormatUnmarked), and the rest of a marked frame.
func appendFrame(b []byte, r *guard.Record) []byte {
	b, start := sqlite.AppendFrameFields(b, r, 0)
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b[start:]))
}

// segmentBytes is a journal segment of format as a process that stopped
// left it: the header, the frames of recs and zeros after them; offs are
// where each frame begins, and the last offset is where the frames end. A
// sealed segment's frames carry MACs under key, the journal's MAC key (or,
// as whoever forges one has it, any other), and its id is random.
func segmentBytes(recs []*guard.Record, format sqlite.JournalFormat, key []byte) (b []byte, offs []int) {
	b = make([]byte, sqlite.JournalHeader)
	copy(b, map[sqlite.JournalFormat]string{sqlite.FormatUnmarked: sqlite.JournalMagic, sqlite.FormatMarked: sqlite.JournalMarked, sqlite.FormatSealed: sqlite.JournalSealed}[format])
	binary.LittleEndian.PutUint64(b[sqlite.IngestedAt:], sqlite.JournalHeader)
	id := b[sqlite.SegmentIDAt : sqlite.SegmentIDAt+sqlite.SegmentIDSize]
	if format == sqlite.FormatSealed {
		rand.Read(id)
		binary.BigEndian.PutUint32(b[sqlite.SegmentIDAt+sqlite.SegmentIDSize:], crc32.ChecksumIEEE(id))
	}
	for _, r := range recs {
		offs = append(offs, len(b))
		switch format {
		case sqlite.FormatSealed:
			b = appendSealedFrame(b, r, key, id, int64(len(b)))
		case sqlite.FormatMarked:
			b = appendMarkedFrame(b, r)
		default:
			b = appendFrame(b, r)
		}
	}
	offs = append(offs, len(b))
	return append(b, make([]byte, 8192)...), offs
}

// appendSealedFrame appends r's frame, sealed under key for the offset off
// of the segment id, to b.
func appendSealedFrame(b []byte, r *guard.Record, key, id []byte, off int64) []byte {
	var f sqlite.AppendFrames
	f.Add(r)
	f.Seal(sqlite.NewFrameMACer(key), id, off)
	return append(b, f.Bytes...)
}

// journalKeyOf is the journal's MAC key of the checkpoint key at keyPath.
func journalKeyOf(t testing.TB, keyPath string) []byte {
	t.Helper()
	s, err := audit.ReadSigner(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	return s.Derive(sqlite.JournalPurpose)
}

// forgersKey is a key that is not the log's: what someone who cannot read
// the key file seals frames with.
func forgersKey() []byte {
	k := make([]byte, 32)
	rand.Read(k)
	return k
}
