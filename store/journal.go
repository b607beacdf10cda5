package store

import (
	"context"
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

// Records become durable in a journal before they reach SQLite. Each open
// database that writes has one journal, a file of its own in
// DB.journal/ (a segment), locked while it is open. An append is one write
// of its records' frames at the journal's end: with durability normal that
// is all (the record survives a crash of guard in the kernel's page cache),
// with full the journal is fdatasync'd, once for every append written
// meanwhile. The ingester moves what the journal holds into the records
// table in batches, with the chain, and notes in the journal's header how
// far it has come. A journal whose records are all in the database is
// replaced once it is large and removed.
//
// A journal left by a process that died (its lock is free) is moved into
// the database by a process running on it (recoverOrphans), else by the
// next writable Open; records already there (a crash between the
// database's commit and the header's update) are skipped. Until then,
// readers read it as it is (unchained.go). A
// frame that cannot be read (a damaged disk, a changed byte) costs that
// frame alone: the reader finds the next frame by its mark (scanJournal),
// and the recovery keeps the file aside and records what was lost
// (damage.go).

// journalMagic opens the journal segments of the release before, whose
// frames have no mark: they are still read, and a reader finds the frame
// after a damaged one only by trying every offset.
const journalMagic = "guard-journal-1\n"

// journalMarked opens the journal segments whose frames begin with
// frameMark but carry no MAC, as written before frames were sealed: they
// are still read, and moved in until the log's MACs begin
// (journalauth.go).
const journalMarked = "guard-journal-2\n"

// journalSealed opens this release's journal segments: each frame begins
// with frameMark and carries a MAC that binds it to the segment's id (in
// the header) and to its offset (journalauth.go).
const journalSealed = "guard-journal-3\n"

// journalFormat is a segment's format, as its magic says.
type journalFormat int

// The formats of journal segments, oldest first.
const (
	formatUnmarked journalFormat = 1 + iota // journalMagic
	formatMarked                            // journalMarked
	formatSealed                            // journalSealed
)

// String is the format's magic without its newline, as people read it.
func (f journalFormat) String() string {
	switch f {
	case formatUnmarked:
		return journalMagic[:len(journalMagic)-1]
	case formatMarked:
		return journalMarked[:len(journalMarked)-1]
	}
	return journalSealed[:len(journalSealed)-1]
}

// marked reports whether the format's frames begin with frameMark.
func (f journalFormat) marked() bool { return f >= formatMarked }

// frameMark begins every frame of a marked segment, so that a reader that
// cannot read a frame finds where the next one begins. Its first byte,
// 0xF8, never occurs in UTF-8 text, and a mark inside a record's text is
// told from a frame's by the frame's checksum.
const frameMark = "\xf8GJ\x9d"

// journalHeader is the size of a segment's header: the magic, then the
// offset of the first frame not yet in the database (8 bytes, little
// endian), then in a sealed segment its id (segmentIDSize random bytes)
// and a CRC-32 of the id (so that a changed byte there reads as damage,
// not as frames someone forged). Frames follow it.
const journalHeader = 64

// ingestedAt is the offset of the ingested offset in the header.
const ingestedAt = len(journalMagic)

// segmentIDAt is the offset of a sealed segment's id in the header, and
// segmentIDSize its size; its CRC-32 (4 bytes, big endian) follows it.
const (
	segmentIDAt   = ingestedAt + 8
	segmentIDSize = 16
)

// segmentSize is the size past which a segment is replaced by a new one.
// With durability full a segment is written with zeros to this size when
// it is made, so that an fdatasync after an append has only data to
// flush, not the file's size.
const segmentSize = 8 << 20

// journalsDir holds the journals of the database at dbPath.
func journalsDir(dbPath string) string { return dbPath + ".journal" }

// segment is one journal file.
type segment struct {
	f    *os.File
	fd   uintptr // f's, for datasync
	path string
	id   [segmentIDSize]byte // what its frames' MACs bind them to
	// Under DB.jmu: where the next frame goes, and the appends written
	// to this segment.
	end     int64
	appends int64
	// bad is set (under DB.jmu) when an fdatasync failed: the kernel may
	// have dropped what it could not write, so nothing more goes here.
	bad bool
	// The ingester's own: appends of this segment moved into the
	// database (or refused), and the offset after the last of them.
	done     int64
	doneTill int64
}

// newSegment creates a journal segment in dir, locked for this process.
// With zero, it is filled with zeros to segmentSize and synced.
func newSegment(dir string, zero bool) (*segment, error) {
	path := filepath.Join(dir, guard.NewID()+".log")
	// Opened so that it can be removed while open: the process that moves
	// it into the database after this one stopped removes it.
	f, err := filelock.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	s := &segment{f: f, fd: f.Fd(), path: path, end: journalHeader, doneTill: journalHeader}
	fail := func(err error) (*segment, error) {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("journal %s: %w", path, err)
	}
	// A reader looking for live journals holds a shared lock for a
	// moment: the new file's lock waits for it.
	if err := filelock.Lock(f); err != nil {
		return fail(err)
	}
	rand.Read(s.id[:])
	h := make([]byte, journalHeader)
	copy(h, journalSealed)
	binary.LittleEndian.PutUint64(h[ingestedAt:], journalHeader)
	copy(h[segmentIDAt:], s.id[:])
	binary.BigEndian.PutUint32(h[segmentIDAt+segmentIDSize:], crc32.ChecksumIEEE(s.id[:]))
	if _, err := f.WriteAt(h, 0); err != nil {
		return fail(err)
	}
	if zero {
		if err := zeroFill(f); err != nil {
			// A disk without room for it: the segment grows with its
			// frames instead (each sync then also writes its size).
			if err := f.Truncate(journalHeader); err != nil {
				return fail(err)
			}
		}
		if err := f.Sync(); err != nil {
			return fail(err)
		}
		if err := syncDir(dir); err != nil {
			return fail(err)
		}
	}
	return s, nil
}

// zeroFill writes zeros after the header up to segmentSize.
func zeroFill(f *os.File) error {
	chunk := make([]byte, 1<<20)
	for off := int64(journalHeader); off < segmentSize; off += int64(len(chunk)) {
		if _, err := f.WriteAt(chunk[:min(int64(len(chunk)), segmentSize-off)], off); err != nil {
			return err
		}
	}
	return nil
}

// noteIngested writes in the header how far the database holds the
// segment's records. It is a hint, for readers that wait for the
// database to catch up and for the recovery after a crash: nothing
// depends on it being on disk.
func (s *segment) noteIngested(off int64) error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(off))
	_, err := s.f.WriteAt(b[:], int64(ingestedAt))
	return err
}

// close closes the segment and, when remove, deletes it.
func (s *segment) close(remove bool) error {
	var err error
	if remove {
		err = os.Remove(s.path)
	}
	return errors.Join(err, s.f.Close())
}

// A record in a journal is one frame: frameMark (in a marked segment), its
// length (uvarint), its fields in a fixed order (text as length and bytes,
// numbers as varints), in a sealed segment the frame's MAC (macSize
// bytes, journalauth.go), and a CRC-32 of what the length counts (the
// fields and the MAC). What follows the last frame written is zeros (a
// segment made with zeros to its size) or the file's end; a frame cut
// short by a crash is the last. The chain's fields (seq, hashes) are not
// in it: the ingester computes them.

func frameText(r *guard.Record) []*string {
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

// appendFrameFields appends the length of r's frame, counting extra bytes
// after the fields (a sealed frame's MAC), and its fields; start is where
// the fields begin. The frame's checksum is the caller's.
func appendFrameFields(b []byte, r *guard.Record, extra int) (_ []byte, start int) {
	text := frameText(r)
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

// errTorn marks a frame cut short: the end of what was written.
var errTorn = errors.New("frame cut short")

// readFrame decodes the frame at the start of b, of a segment whose
// frames carry no MAC, and returns its size.
func readFrame(b []byte) (*guard.Record, int, error) {
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
		return nil, 0, errTorn
	}
	body := b[k : k+int(n)]
	if crc32.ChecksumIEEE(body) != binary.BigEndian.Uint32(b[k+int(n):]) {
		// Only the last frame can be cut short (a process that died in
		// the middle of writing it): what follows is never read.
		return nil, 0, errTorn
	}
	return body, k + int(n) + 4, nil
}

// errFields is the error for a frame whose fields do not fit it.
var errFields = errors.New("a record's fields do not fit its frame")

// decodeFields decodes a record from a frame's fields.
func decodeFields(body []byte) (*guard.Record, error) {
	r := &guard.Record{}
	for _, f := range frameText(r) {
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

// readJournal returns the complete records of a journal from offset on.
func readJournal(path string, offset int64) ([]*guard.Record, int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, offset, err
	}
	if offset > int64(len(b)) {
		return nil, offset, nil
	}
	var recs []*guard.Record
	for rest := b[offset:]; len(rest) > 0; {
		r, size, err := readFrame(rest)
		if errors.Is(err, errTorn) {
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
func segmentFormat(h []byte) (journalFormat, error) {
	if len(h) < len(journalMagic) {
		return 0, errNotJournal
	}
	switch string(h[:len(journalMagic)]) {
	case journalSealed:
		return formatSealed, nil
	case journalMarked:
		return formatMarked, nil
	case journalMagic:
		return formatUnmarked, nil
	}
	return 0, errNotJournal
}

// segmentID is a sealed segment's id, read from its header h, or an error
// when the header is damaged there.
func segmentID(h []byte) ([]byte, error) {
	if len(h) < journalHeader {
		return nil, errors.New("the journal's header is cut short")
	}
	id := h[segmentIDAt : segmentIDAt+segmentIDSize]
	if crc32.ChecksumIEEE(id) != binary.BigEndian.Uint32(h[segmentIDAt+segmentIDSize:]) {
		return nil, errors.New("the journal's header is damaged")
	}
	return id, nil
}

// segmentIngested reads a segment's header: the offset of its first
// record not yet in the database, and whether its frames are marked.
func segmentIngested(f io.ReaderAt) (int64, bool, error) {
	h := make([]byte, journalHeader)
	if _, err := f.ReadAt(h, 0); err != nil {
		return 0, false, err
	}
	format, err := segmentFormat(h)
	if err != nil {
		return 0, false, err
	}
	off := int64(binary.LittleEndian.Uint64(h[ingestedAt:]))
	if off < journalHeader {
		return 0, false, errors.New("the journal's header is damaged")
	}
	return off, format.marked(), nil
}

// framesEnd is the offset after the last complete frame written to f from
// off on, found from the frames' lengths (the contents are not read).
func framesEnd(f *os.File, off int64, marked bool) int64 {
	st, err := f.Stat()
	if err != nil {
		return off
	}
	mark := int64(0)
	if marked {
		mark = int64(len(frameMark))
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

// orphanJournals counts the journals of the database at dbPath whose
// owner is gone.
func orphanJournals(dbPath string) int {
	files, _ := segments(journalsDir(dbPath))
	n := 0
	for _, p := range files {
		f, err := filelock.OpenFile(p, os.O_RDONLY, 0)
		if err != nil {
			continue
		}
		if !ownerAlive(f) {
			n++
		}
		f.Close()
	}
	return n
}

// ownerAlive reports whether the journal open as f is locked by the
// process that writes it (a shared lock cannot be had). The lock this
// takes to find out is given back at once.
func ownerAlive(f *os.File) bool {
	if filelock.TryRLock(f) != nil {
		return true
	}
	_ = filelock.Unlock(f)
	return false
}

// segments lists the journal segments in dir.
func segments(dir string) ([]string, error) {
	return filepath.Glob(filepath.Join(dir, "*.log"))
}

// recoverJournals moves into the database the records of journals whose
// owner is gone (a process that was killed, or stopped while the database
// could not take them), in order and chained, skipping those already
// there, and removes the journals. A journal still locked belongs to a
// live process.
func (in *ingestion) recoverJournals(ctx context.Context) error {
	files, err := segments(journalsDir(in.db.opts.Path))
	if err != nil {
		return err
	}
	var errs []error
	for _, path := range files {
		n, err := in.recoverJournal(ctx, path)
		if err != nil {
			errs = append(errs, fmt.Errorf("journal %s: %w", path, err))
			in.unmoved[path] = time.Now() // said once: recoverOrphans waits before it tries again
			continue
		}
		if n > 0 {
			in.db.opts.Logger.Info("records of a journal left by a process that stopped moved into the database", "journal", path, "records", n)
		}
	}
	return errors.Join(errs...)
}

// orphanRetry is how long a running process waits before it tries again
// to move in a journal of a process that stopped that it could not.
const orphanRetry = time.Minute

// recoverOrphans moves into the log the journals of processes that
// stopped while this one runs (the ingester calls it every
// CheckpointEvery), so that what they acknowledged reaches the chain
// without waiting for the next writable open; a journal it could not move
// in is tried again after orphanRetry, and said once in the log.
func (in *ingestion) recoverOrphans() {
	if in.db.pg {
		return
	}
	files, _ := segments(journalsDir(in.db.opts.Path))
	for _, p := range files {
		in.jmu.Lock()
		own := in.own[p]
		in.jmu.Unlock()
		last, failed := in.unmoved[p]
		if own || failed && time.Since(last) < orphanRetry {
			continue
		}
		n, err := in.recoverJournal(context.Background(), p)
		if err != nil {
			if !failed {
				in.db.opts.Logger.Error("records of a journal left by a process that stopped could not be moved into the database; tried again in a minute", "journal", p, "err", err)
			}
			in.unmoved[p] = time.Now()
			continue
		}
		delete(in.unmoved, p)
		if n > 0 {
			in.db.opts.Logger.Info("records of a journal left by a process that stopped moved into the database", "journal", p, "records", n)
		}
	}
}

func (in *ingestion) recoverJournal(ctx context.Context, path string) (int, error) {
	f, err := filelock.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return 0, nil // removed meanwhile by its owner
	}
	defer f.Close()
	if filelock.TryLock(f) != nil {
		return 0, nil // its owner is alive
	}
	if st, err := f.Stat(); err == nil && st.Size() < journalHeader {
		// A segment whose maker has not locked it yet (newSegment), or
		// died before it wrote the header: no record was written to it.
		return 0, nil
	}
	// A key of another log would refuse every frame of a genuine journal
	// as forged: the journal waits for a process with this log's key.
	key, err := in.db.journals().journalKey(ctx)
	if err != nil {
		return 0, err
	}
	if key == nil {
		// A writable open always holds the key: this is not one.
		return 0, errors.New("the journal's frames cannot be checked without the checkpoint key's secret")
	}
	// Read from the first frame, whatever the header says: it is written
	// after the database's commits, which are not fsync'd (DB.rotate), so
	// after a power cut either may be ahead of the other. Records already
	// in the database are skipped.
	sc, err := scanFile(path, key)
	if err != nil {
		return 0, err
	}
	from, err := in.db.auth.macsFrom(ctx, in.db.w)
	if err != nil {
		return 0, err
	}
	recs := sc.records()
	held, err := heldAlready(ctx, in.db.w, recs)
	if err != nil {
		return 0, err
	}
	// What the journal's frames cannot vouch for is refused
	// (journalauth.go).
	refused := refuse(sc, held, from)
	var fresh []*guard.Record
	for i, r := range recs {
		if !held[i] && !refused.whole() {
			fresh = append(fresh, r)
		}
	}
	for rest := fresh; len(rest) > 0; {
		k := min(len(rest), maxBatch)
		batch := []*appendReq{{recs: rest[:k]}}
		in.commitMu.Lock()
		err := in.commitRetrying(batch)
		in.commitMu.Unlock()
		if err != nil {
			return 0, err
		}
		in.db.ckpt.dirty.Store(true)
		rest = rest[k:]
	}
	aside := ""
	if refused.any() {
		aside = path + damagedSuffix
		if err := in.db.journals().recordRefusal(ctx, path, aside, sc, refused, len(fresh)); err != nil {
			return 0, err
		}
	}
	if len(sc.damage) > 0 && !refused.whole() {
		aside = path + damagedSuffix
		if err := in.db.journals().recordDamage(ctx, path, aside, sc, held, len(fresh)); err != nil {
			return 0, err
		}
	}
	if in.fsync {
		// The records are durable in the database before the journal
		// that held them goes (the ingester's commits are not synced).
		if err := in.syncFiles(); err != nil {
			return 0, err
		}
	}
	if aside != "" {
		return len(fresh), os.Rename(path, aside)
	}
	return len(fresh), os.Remove(path)
}
