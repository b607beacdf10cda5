// Package sqlite is what only guard's SQLite engine does, below package
// store: the private journal in which records become durable before they
// reach the database (its segments, their frames and format, the frames'
// MACs, the scan that reads a damaged segment frame by frame), the
// durability of files (fdatasync, a directory's entries), and what only
// SQLite's connections have (its migrations, the data version, the WAL
// files kept for read-only opens, its error codes, the check of the FTS5
// text index's words). It works on
// files and bytes and takes what it needs as parameters: it knows
// nothing of package store or its callers, which moves what a journal
// holds into the database and records what was damaged or refused.
package sqlite

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
	"github.com/guard-mcp/guard/internal/filelock"
)

// JournalMagic opens the journal segments of the release before, whose
// frames have no mark: they are still read, and a reader finds the frame
// after a damaged one only by trying every offset.
const JournalMagic = "guard-journal-1\n"

// JournalMarked opens the journal segments whose frames begin with
// FrameMark but carry no MAC, as written before frames were sealed: they
// are still read, and moved in until the log's MACs begin
// (frames.go).
const JournalMarked = "guard-journal-2\n"

// JournalSealed opens this release's journal segments: each frame begins
// with FrameMark and carries a MAC that binds it to the segment's id (in
// the header) and to its offset (frames.go).
const JournalSealed = "guard-journal-3\n"

// JournalFormat is a segment's format, as its magic says.
type JournalFormat int

// The formats of journal segments, oldest first.
const (
	FormatUnmarked JournalFormat = 1 + iota // journalMagic
	FormatMarked                            // journalMarked
	FormatSealed                            // journalSealed
)

// String is the format's magic without its newline, as people read it.
func (f JournalFormat) String() string {
	switch f {
	case FormatUnmarked:
		return JournalMagic[:len(JournalMagic)-1]
	case FormatMarked:
		return JournalMarked[:len(JournalMarked)-1]
	}
	return JournalSealed[:len(JournalSealed)-1]
}

// Marked reports whether the format's frames begin with FrameMark.
func (f JournalFormat) Marked() bool { return f >= FormatMarked }

// FrameMark begins every frame of a marked segment, so that a reader that
// cannot read a frame finds where the next one begins. Its first byte,
// 0xF8, never occurs in UTF-8 text, and a mark inside a record's text is
// told from a frame's by the frame's checksum.
const FrameMark = "\xf8GJ\x9d"

// JournalHeader is the size of a segment's header: the magic, then the
// offset of the first frame not yet in the database (8 bytes, little
// endian), then in a sealed segment its id (SegmentIDSize random bytes)
// and a CRC-32 of the id (so that a changed byte there reads as damage,
// not as frames someone forged). Frames follow it.
const JournalHeader = 64

// IngestedAt is the offset of the ingested offset in the header.
const IngestedAt = len(JournalMagic)

// SegmentIDAt is the offset of a sealed segment's id in the header, and
// SegmentIDSize its size; its CRC-32 (4 bytes, big endian) follows it.
const (
	SegmentIDAt   = IngestedAt + 8
	SegmentIDSize = 16
)

// SegmentSize is the size past which a segment is replaced by a new one.
// With durability full a segment is written with zeros to this size when
// it is made, so that an fdatasync after an append has only data to
// flush, not the file's size.
const SegmentSize = 8 << 20

// JournalsDir holds the journals of the database at dbPath.
func JournalsDir(dbPath string) string { return dbPath + ".journal" }

// Segment is one journal file.
type Segment struct {
	File *os.File
	FD   uintptr // File's, for Datasync
	Path string
	ID   [SegmentIDSize]byte // what its frames' MACs bind them to
	// Under store's journal lock (DB.jmu): where the next frame goes,
	// and the appends written to this segment.
	End     int64
	Appends int64
	// Bad is set (under that lock) when an fdatasync failed: the kernel may
	// have dropped what it could not write, so nothing more goes here.
	Bad bool
	// The ingester's own: appends of this segment moved into the
	// database (or refused), and the offset after the last of them.
	Done     int64
	DoneTill int64
}

// NewSegment creates a journal segment in dir, locked for this process.
// With zero, it is filled with zeros to SegmentSize and synced.
func NewSegment(dir string, zero bool) (*Segment, error) {
	path := filepath.Join(dir, guard.NewID()+".log")
	// Opened so that it can be removed while open: the process that moves
	// it into the database after this one stopped removes it.
	f, err := filelock.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	s := &Segment{File: f, FD: f.Fd(), Path: path, End: JournalHeader, DoneTill: JournalHeader}
	fail := func(err error) (*Segment, error) {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("journal %s: %w", path, err)
	}
	// A reader looking for live journals holds a shared lock for a
	// moment: the new file's lock waits for it.
	if err := filelock.Lock(f); err != nil {
		return fail(err)
	}
	rand.Read(s.ID[:])
	h := make([]byte, JournalHeader)
	copy(h, JournalSealed)
	binary.LittleEndian.PutUint64(h[IngestedAt:], JournalHeader)
	copy(h[SegmentIDAt:], s.ID[:])
	binary.BigEndian.PutUint32(h[SegmentIDAt+SegmentIDSize:], crc32.ChecksumIEEE(s.ID[:]))
	if _, err := f.WriteAt(h, 0); err != nil {
		return fail(err)
	}
	if zero {
		if err := zeroFill(f); err != nil {
			// A disk without room for it: the segment grows with its
			// frames instead (each sync then also writes its size).
			if err := f.Truncate(JournalHeader); err != nil {
				return fail(err)
			}
		}
		if err := f.Sync(); err != nil {
			return fail(err)
		}
		if err := SyncDir(dir); err != nil {
			return fail(err)
		}
	}
	return s, nil
}

// zeroFill writes zeros after the header up to SegmentSize.
func zeroFill(f *os.File) error {
	chunk := make([]byte, 1<<20)
	for off := int64(JournalHeader); off < SegmentSize; off += int64(len(chunk)) {
		if _, err := f.WriteAt(chunk[:min(int64(len(chunk)), SegmentSize-off)], off); err != nil {
			return err
		}
	}
	return nil
}

// NoteIngested writes in the header how far the database holds the
// segment's records. It is a hint, for readers that wait for the
// database to catch up and for the recovery after a crash: nothing
// depends on it being on disk.
func (s *Segment) NoteIngested(off int64) error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(off))
	_, err := s.File.WriteAt(b[:], int64(IngestedAt))
	return err
}

// Close closes the segment and, when remove, deletes it.
func (s *Segment) Close(remove bool) error {
	var err error
	if remove {
		err = os.Remove(s.Path)
	}
	return errors.Join(err, s.File.Close())
}

// A record in a journal is one frame: FrameMark (in a marked segment), its
// length (uvarint), its fields in a fixed order (text as length and bytes,
// numbers as varints), in a sealed segment the frame's MAC (macSize
// bytes, frames.go), and a CRC-32 of what the length counts (the
// fields and the MAC). What follows the last frame written is zeros (a
// segment made with zeros to its size) or the file's end; a frame cut
// short by a crash is the last. The chain's fields (seq, hashes) are not
// in it: the ingester computes them.

func FrameText(r *guard.Record) []*string {
	return []*string{&r.ID, &r.CallID, &r.Kind, &r.Session, &r.Client, &r.Protocol, &r.Server, &r.Direction,
		&r.Method, &r.Tool, &r.Arguments, &r.Pin, &r.Decision, &r.DecidedBy, &r.Reason, &r.Outcome,
		&r.Result, &r.Detail}
}

// frameExt lists the text fields a frame holds after its numbers, in
// order; a frame may end before any of them (they are then empty). groups
// stands for the record's user groups, as groupsText writes them.
func frameExt(r *guard.Record, groups *string) []*string {
	return []*string{&r.Approval, &r.User, &r.UserEmail, groups}
}

// AppendFrameFields appends the length of r's frame, counting extra bytes
// after the fields (a sealed frame's MAC), and its fields; start is where
// the fields begin. The frame's checksum is the caller's.
func AppendFrameFields(b []byte, r *guard.Record, extra int) (_ []byte, start int) {
	text := FrameText(r)
	nums := [4]int64{r.Time.UnixMilli(), r.RequestSize, r.ResponseSize, r.DurationMS}
	n := extra
	for _, f := range text {
		n += uvarintLen(uint64(len(*f))) + len(*f)
	}
	for _, v := range nums {
		n += varintLen(v)
	}
	// The fields added after the frame's first form follow the numbers,
	// only when one of them is set: all of them for a record that names
	// a user, else the approval alone, so that a frame without a user is
	// the frame of the release before and reads as before.
	var ext []*string
	switch {
	case audit.HasUser(r):
		groups := audit.GroupsText(r.UserGroups)
		ext = frameExt(r, &groups)
	case r.Approval != "":
		ext = frameExt(r, nil)[:1]
	}
	for _, f := range ext {
		n += uvarintLen(uint64(len(*f))) + len(*f)
	}
	b = binary.AppendUvarint(b, uint64(n))
	start = len(b)
	for _, f := range text {
		b = binary.AppendUvarint(b, uint64(len(*f)))
		b = append(b, *f...)
	}
	for _, v := range nums {
		b = binary.AppendVarint(b, v)
	}
	for _, f := range ext {
		b = binary.AppendUvarint(b, uint64(len(*f)))
		b = append(b, *f...)
	}
	return b, start
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func varintLen(v int64) int {
	u := uint64(v) << 1
	if v < 0 {
		u = ^u
	}
	return uvarintLen(u)
}

// ErrTorn marks a frame cut short: the end of what was written.
var ErrTorn = errors.New("frame cut short")

// ReadFrame decodes the frame at the start of b, of a segment whose
// frames carry no MAC, and returns its size.
func ReadFrame(b []byte) (*guard.Record, int, error) {
	body, size, err := framePayload(b)
	if err != nil {
		return nil, 0, err
	}
	r, err := decodeFields(body)
	if err != nil {
		return nil, 0, err
	}
	return r, size, nil
}

// framePayload is what the length of the frame at the start of b counts,
// once its checksum holds, and the frame's size.
func framePayload(b []byte) ([]byte, int, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n == 0 || len(b)-k < 4 || n > uint64(len(b)-k-4) {
		return nil, 0, ErrTorn
	}
	body := b[k : k+int(n)]
	if crc32.ChecksumIEEE(body) != binary.BigEndian.Uint32(b[k+int(n):]) {
		// Only the last frame can be cut short (a process that died in
		// the middle of writing it): what follows is never read.
		return nil, 0, ErrTorn
	}
	return body, k + int(n) + 4, nil
}

// errFields is the error for a frame whose fields do not fit it.
var errFields = errors.New("a record's fields do not fit its frame")

// decodeFields decodes a record from a frame's fields.
func decodeFields(body []byte) (*guard.Record, error) {
	r := &guard.Record{}
	for _, f := range FrameText(r) {
		l, k := binary.Uvarint(body)
		if k <= 0 || uint64(len(body)-k) < l {
			return nil, errFields
		}
		*f = string(body[k : k+int(l)])
		body = body[k+int(l):]
	}
	var nums [4]int64
	for i := range nums {
		v, k := binary.Varint(body)
		if k <= 0 {
			return nil, errFields
		}
		nums[i], body = v, body[k:]
	}
	var groups string
	for _, f := range frameExt(r, &groups) {
		if len(body) == 0 {
			break
		}
		l, k := binary.Uvarint(body)
		if k <= 0 || uint64(len(body)-k) < l {
			return nil, errFields
		}
		*f = string(body[k : k+int(l)])
		body = body[k+int(l):]
	}
	r.UserGroups = audit.ParseGroups(groups)
	r.Time = time.UnixMilli(nums[0]).UTC()
	r.RequestSize, r.ResponseSize, r.DurationMS = nums[1], nums[2], nums[3]
	return r, nil
}

// ReadJournal returns the complete records of a journal from offset on.
func ReadJournal(path string, offset int64) ([]*guard.Record, int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, offset, err
	}
	if offset > int64(len(b)) {
		return nil, offset, nil
	}
	var recs []*guard.Record
	for rest := b[offset:]; len(rest) > 0; {
		r, size, err := ReadFrame(rest)
		if errors.Is(err, ErrTorn) {
			break
		}
		if err != nil {
			return nil, offset, fmt.Errorf("record at offset %d: %w", offset, err)
		}
		recs = append(recs, r)
		offset += int64(size)
		rest = rest[size:]
	}
	return recs, offset, nil
}

// errNotJournal is the error for a file whose header is not a journal's.
var errNotJournal = errors.New("not a guard journal")

// segmentFormat reads a segment's magic: the format of its frames.
func segmentFormat(h []byte) (JournalFormat, error) {
	if len(h) < len(JournalMagic) {
		return 0, errNotJournal
	}
	switch string(h[:len(JournalMagic)]) {
	case JournalSealed:
		return FormatSealed, nil
	case JournalMarked:
		return FormatMarked, nil
	case JournalMagic:
		return FormatUnmarked, nil
	}
	return 0, errNotJournal
}

// segmentID is a sealed segment's id, read from its header h, or an error
// when the header is damaged there.
func segmentID(h []byte) ([]byte, error) {
	if len(h) < JournalHeader {
		return nil, errors.New("the journal's header is cut short")
	}
	id := h[SegmentIDAt : SegmentIDAt+SegmentIDSize]
	if crc32.ChecksumIEEE(id) != binary.BigEndian.Uint32(h[SegmentIDAt+SegmentIDSize:]) {
		return nil, errors.New("the journal's header is damaged")
	}
	return id, nil
}

// SegmentIngested reads a segment's header: the offset of its first
// record not yet in the database, and whether its frames are marked.
func SegmentIngested(f io.ReaderAt) (int64, bool, error) {
	h := make([]byte, JournalHeader)
	if _, err := f.ReadAt(h, 0); err != nil {
		return 0, false, err
	}
	format, err := segmentFormat(h)
	if err != nil {
		return 0, false, err
	}
	off := int64(binary.LittleEndian.Uint64(h[IngestedAt:]))
	if off < JournalHeader {
		return 0, false, errors.New("the journal's header is damaged")
	}
	return off, format.Marked(), nil
}

// FramesEnd is the offset after the last complete frame written to f from
// off on, found from the frames' lengths (the contents are not read).
func FramesEnd(f *os.File, off int64, marked bool) int64 {
	st, err := f.Stat()
	if err != nil {
		return off
	}
	mark := int64(0)
	if marked {
		mark = int64(len(FrameMark))
	}
	var b [binary.MaxVarintLen64]byte
	for {
		n, _ := f.ReadAt(b[:], off+mark)
		l, k := binary.Uvarint(b[:n])
		next := off + mark + int64(k) + int64(l) + 4
		if k <= 0 || l == 0 || next > st.Size() {
			return off
		}
		off = next
	}
}

// OrphanJournals counts the journals of the database at dbPath whose
// owner is gone.
func OrphanJournals(dbPath string) int {
	files, _ := Segments(JournalsDir(dbPath))
	n := 0
	for _, p := range files {
		f, err := filelock.OpenFile(p, os.O_RDONLY, 0)
		if err != nil {
			continue
		}
		if !OwnerAlive(f) {
			n++
		}
		f.Close()
	}
	return n
}

// OwnerAlive reports whether the journal open as f is locked by the
// process that writes it (a shared lock cannot be had). The lock this
// takes to find out is given back at once.
func OwnerAlive(f *os.File) bool {
	if filelock.TryRLock(f) != nil {
		return true
	}
	_ = filelock.Unlock(f)
	return false
}

// Segments lists the journal segments in dir.
func Segments(dir string) ([]string, error) {
	return filepath.Glob(filepath.Join(dir, "*.log"))
}
