package sqlite

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"hash/crc32"
	"slices"

	guard "github.com/guard-mcp/guard"
)

// JournalPurpose is the label the journal frames' MAC key is derived from
// the checkpoint key with (audit.Signer.Derive).
const JournalPurpose = "guard: the journal frames' MACs"

// macSize is the size of a frame's MAC.
const macSize = sha256.Size

// FrameMACer makes and checks the MACs of journal frames under one key;
// it is not safe for concurrent use (store's writer uses its own under its journal lock,
// and each scan makes its own).
type FrameMACer struct {
	h   hash.Hash
	in  [SegmentIDSize + 8 + sha256.Size]byte
	out [macSize]byte
}

// NewFrameMACer returns a FrameMACer for key.
func NewFrameMACer(key []byte) *FrameMACer {
	return &FrameMACer{h: hmac.New(sha256.New, key)}
}

// sum is the MAC of the frame at off in the segment id whose fields have
// the SHA-256 digest; it is valid until the next call.
func (m *FrameMACer) sum(id []byte, off int64, digest *[sha256.Size]byte) []byte {
	copy(m.in[:SegmentIDSize], id)
	binary.BigEndian.PutUint64(m.in[SegmentIDSize:], uint64(off))
	copy(m.in[SegmentIDSize+8:], digest[:])
	m.h.Reset()
	m.h.Write(m.in[:])
	return m.h.Sum(m.out[:0])
}

// valid reports whether mac is the MAC of the frame at off in the segment
// id whose fields are fields.
func (m *FrameMACer) valid(id []byte, off int64, fields, mac []byte) bool {
	d := sha256.Sum256(fields)
	return hmac.Equal(m.sum(id, off, &d), mac)
}

// AppendFrames are an append's sealed frames, built before the journal's
// lock is taken: a frame's MAC binds its offset, known only once the lock
// is held, and its checksum covers the MAC, so both wait for seal. What
// is costly (the fields' digest and checksum) is done before.
type AppendFrames struct {
	Bytes []byte
	seals []frameSeal
}

// frameSeal is what seal needs of one frame.
type frameSeal struct {
	at, end int    // where the frame begins and ends in b
	crc     uint32 // the checksum of its fields, which seal continues over the MAC
	digest  [sha256.Size]byte
}

// Reset empties f for another append.
func (f *AppendFrames) Reset() {
	f.Bytes, f.seals = f.Bytes[:0], f.seals[:0]
}

// Add appends r's frame, its MAC and checksum left for seal.
func (f *AppendFrames) Add(r *guard.Record) {
	at := len(f.Bytes)
	b, start := AppendFrameFields(append(f.Bytes, FrameMark...), r, macSize)
	s := frameSeal{at: at, crc: crc32.ChecksumIEEE(b[start:]), digest: sha256.Sum256(b[start:])}
	n := len(b)
	b = slices.Grow(b, macSize+4)[:n+macSize+4]
	s.end = len(b)
	f.Bytes, f.seals = b, append(f.seals, s)
}

// Seal writes each frame's MAC and checksum, for the frames to be written
// at off in the segment id.
func (f *AppendFrames) Seal(m *FrameMACer, id []byte, off int64) {
	for i := range f.seals {
		s := &f.seals[i]
		mac := m.sum(id, off+int64(s.at), &s.digest)
		copy(f.Bytes[s.end-4-macSize:], mac)
		binary.BigEndian.PutUint32(f.Bytes[s.end-4:], crc32.Update(s.crc, crc32.IEEETable, mac))
	}
}
