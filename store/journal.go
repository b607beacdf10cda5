package store

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/metrics"
)

// The audit log is written in two steps. A record is durable once it is in
// this process's journal: an append-only file beside the database, written
// with one write per batch (and fsync'd when durability is full). Records
// are then moved into SQLite, where the hash chain is assigned, by any
// process: the ingested offset of every journal is kept in the database and
// advanced in the same transaction as the inserts, so a journal is ingested
// exactly once whoever does it. A journal whose process died is ingested by
// the next process that opens the database.
//
// Compared with one SQLite commit per record, this takes the commit (and,
// with durability normal, every system call) off the path of each call,
// while nothing a process acknowledged can be lost by its crash.

// journal is this process's append-only file of records not yet ingested.
type journal struct {
	mu      sync.Mutex
	f       *os.File
	m       []byte       // the file, mapped (durability normal): records are copied in, not written
	limit   int64        // a smaller capacity than journalCap (tests)
	name    string       // base name, the key in the journals table
	sync    bool         // fsync every batch (durability full)
	waiters []*appendReq // written, waiting for the next fsync
	cond    *sync.Cond   // signalled when an fsync run ends
	kick    chan struct{}
	stopped chan struct{}
	closed  bool
	syncing bool // the syncer is fsyncing f
	memMu   sync.Mutex
	mem     []memRecord
	size    int64
	err     error // a write that failed poisons the journal: fail closed
	// latency observes how long appends take to become durable.
	latency *metrics.Histogram
}

// journalDir holds the journals. (Not "-journal": that name is SQLite's.)
func journalDir(dbPath string) string { return dbPath + ".journals" }

// openJournal creates this process's journal and locks it, so that other
// processes know it is alive and leave its deletion to it.
func openJournal(dbPath string, fsync bool) (*journal, error) {
	f, name, m, err := newJournalFile(dbPath, fsync)
	if err != nil {
		return nil, err
	}
	j := &journal{f: f, m: m, name: name, sync: fsync, kick: make(chan struct{}, 1), stopped: make(chan struct{}),
		latency: metrics.NewHistogram(metrics.LatencyBuckets)}
	j.cond = sync.NewCond(&j.mu)
	if fsync {
		go j.syncer()
	}
	return j, nil
}

// journalCap is a journal file's size. It is written with zeros when it is
// created, so that its blocks exist: records are then copied into a shared
// mapping of the file, which costs no system call and survives a crash of
// the process (the pages belong to the kernel's cache), and an fsync has
// only data to flush. A zero length marks the end of what was written.
const journalCap = 32 << 20

// newJournalFile creates, locks, fills and maps a new journal file.
func newJournalFile(dbPath string, fsync bool) (*os.File, string, []byte, error) {
	dir := journalDir(dbPath)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", nil, fmt.Errorf("journal: %w", err)
	}
	name := fmt.Sprintf("%d-%s.jsonl", os.Getpid(), uuid.NewString()[:8])
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, "", nil, fmt.Errorf("journal: %w", err)
	}
	fail := func(err error) (*os.File, string, []byte, error) {
		f.Close()
		os.Remove(f.Name())
		return nil, "", nil, fmt.Errorf("journal: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fail(err)
	}
	zeros := make([]byte, 1<<20)
	for off := 0; off < journalCap; off += len(zeros) {
		if _, err := f.WriteAt(zeros, int64(off)); err != nil {
			return fail(err)
		}
	}
	if fsync {
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			return fail(err)
		}
	}
	var m []byte
	if !fsync {
		if m, err = syscall.Mmap(int(f.Fd()), 0, journalCap, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED); err != nil {
			return fail(err)
		}
	}
	if fsync {
		// The new file's name must survive a power cut too.
		if d, err := os.Open(dir); err == nil {
			_ = d.Sync()
			d.Close()
		}
	}
	return f, name, m, nil
}

// A record in the journal is one frame: its length (uvarint), its fields
// in a fixed order (text as length and bytes, kept exactly, numbers as
// varints), and a CRC-32 of the fields. A frame cut short at the end of a
// journal is one whose write never finished: it was never acknowledged and
// is left out.
func appendFrame(buf []byte, r *guard.Record) []byte {
	text := frameText(r)
	nums := [4]int64{r.Time.UnixMilli(), r.RequestSize, r.ResponseSize, r.DurationMS}
	size := 0
	for _, f := range text {
		size += uvarintLen(uint64(len(*f))) + len(*f)
	}
	for _, n := range nums {
		size += varintLen(n)
	}
	buf = slices.Grow(buf, binary.MaxVarintLen64+size+4)
	buf = binary.AppendUvarint(buf, uint64(size))
	start := len(buf)
	for _, f := range text {
		buf = binary.AppendUvarint(buf, uint64(len(*f)))
		buf = append(buf, *f...)
	}
	for _, n := range nums {
		buf = binary.AppendVarint(buf, n)
	}
	return binary.BigEndian.AppendUint32(buf, crc32.ChecksumIEEE(buf[start:]))
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

func varintLen(x int64) int {
	ux := uint64(x) << 1
	if x < 0 {
		ux = ^ux
	}
	return uvarintLen(ux)
}

func frameText(r *guard.Record) []*string {
	return []*string{&r.ID, &r.CallID, &r.Kind, &r.Session, &r.Client, &r.Protocol, &r.Server, &r.Direction,
		&r.Method, &r.Tool, &r.Arguments, &r.Pin, &r.Decision, &r.DecidedBy, &r.Reason, &r.Outcome,
		&r.Result, &r.Detail}
}

// errTorn marks a frame cut short: the end of what was written.
var errTorn = errors.New("frame cut short")

// readFrame decodes the frame at the start of b and returns its size.
func readFrame(b []byte) (*guard.Record, int, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n == 0 || uint64(len(b)-k) < n+4 {
		return nil, 0, errTorn
	}
	body := b[k : k+int(n)]
	if crc32.ChecksumIEEE(body) != binary.BigEndian.Uint32(b[k+int(n):]) {
		// Only the last frame can be cut short (a process that died in
		// the middle of copying it): what follows is never read.
		return nil, 0, errTorn
	}
	r := &guard.Record{}
	for _, f := range frameText(r) {
		l, k := binary.Uvarint(body)
		if k <= 0 || uint64(len(body)-k) < l {
			return nil, 0, errors.New("a record's fields do not fit its frame")
		}
		*f = string(body[k : k+int(l)])
		body = body[k+int(l):]
	}
	var nums [4]int64
	for i := range nums {
		v, k := binary.Varint(body)
		if k <= 0 {
			return nil, 0, errors.New("a record's fields do not fit its frame")
		}
		nums[i], body = v, body[k:]
	}
	r.Time = time.UnixMilli(nums[0]).UTC()
	r.RequestSize, r.ResponseSize, r.DurationMS = nums[1], nums[2], nums[3]
	return r, k + int(n) + 4, nil
}

// append writes records to the journal at once, one write for the
// batch. With durability normal that is all: the write is acknowledged.
// With durability full, the caller's channel is answered once the syncer
// has fsync'd past the write; writes that arrive while an fsync runs share
// the next one (group commit without a timer), and the caller goes on
// reading its next message meanwhile.
func (j *journal) append(req *appendReq) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.err != nil {
		req.done <- j.err
		return
	}
	if j.closed {
		req.done <- fmt.Errorf("%w: %w", guard.ErrAuditWrite, errClosed)
		return
	}
	if err := j.write(req.recs); err != nil {
		j.err = fmt.Errorf("%w: %w", guard.ErrAuditWrite, err)
		req.done <- j.err
		return
	}
	if !j.sync {
		j.latency.Observe(time.Since(req.start).Seconds())
		req.done <- nil
		return
	}
	j.waiters = append(j.waiters, req)
	if !j.syncing && len(j.waiters) == 1 {
		// Nothing else is being synced or waiting: fsync here rather
		// than wake the syncer (a lone call then pays no hand-off).
		j.syncing = true
		f := j.f
		j.waiters = nil
		j.mu.Unlock()
		err := syscall.Fdatasync(int(f.Fd()))
		j.mu.Lock()
		j.synced(err, []*appendReq{req})
		return
	}
	select {
	case j.kick <- struct{}{}:
	default:
	}
}

// synced ends an fsync run: it answers the waiters it covered and hands
// whoever arrived meanwhile to the syncer. The caller holds j.mu.
func (j *journal) synced(err error, w []*appendReq) {
	j.syncing = false
	if err != nil && j.err == nil {
		j.err = fmt.Errorf("%w: journal: fsync: %w", guard.ErrAuditWrite, err)
	}
	for _, r := range w {
		j.latency.Observe(time.Since(r.start).Seconds())
		r.done <- j.err
	}
	j.cond.Broadcast()
	if len(j.waiters) > 0 && !j.closed {
		select {
		case j.kick <- struct{}{}:
		default:
		}
	}
}

// syncer fsyncs the journal for the waiters gathered since the last fsync.
func (j *journal) syncer() {
	defer close(j.stopped)
	for range j.kick {
		j.mu.Lock()
		for j.syncing {
			j.cond.Wait()
		}
		w := j.waiters
		j.waiters = nil
		f := j.f
		if len(w) == 0 {
			j.mu.Unlock()
			continue
		}
		j.syncing = true
		j.mu.Unlock()
		err := syscall.Fdatasync(int(f.Fd()))
		j.mu.Lock()
		j.synced(err, w)
		j.mu.Unlock()
	}
}

// stop ends the syncer after a last fsync for whoever still waits.
func (j *journal) stop() {
	if !j.sync {
		return
	}
	j.mu.Lock()
	if !j.closed {
		j.closed = true
		select {
		case j.kick <- struct{}{}:
		default:
		}
		close(j.kick)
	}
	j.mu.Unlock()
	<-j.stopped
}

func (j *journal) write(recs []*guard.Record) error {
	var buf []byte
	mem := make([]memRecord, 0, len(recs))
	for _, r := range recs {
		start := len(buf)
		buf = appendFrame(buf, r)
		c := *r
		mem = append(mem, memRecord{rec: &c, start: j.size + int64(start), end: j.size + int64(len(buf))})
	}
	// One zero byte must stay after the last frame: it marks the end.
	if j.size+int64(len(buf)) >= j.capacity() {
		return errors.New("journal: full (records are not being moved into the database)")
	}
	if j.sync {
		// Durability full writes (an fsync of pages dirtied through a
		// mapping costs far more here than a write does).
		if _, err := j.f.WriteAt(buf, j.size); err != nil {
			return fmt.Errorf("journal: %w", err)
		}
	} else {
		// The first frame's length goes in last: a reader in another
		// process sees either nothing new or whole frames.
		_, k := binary.Uvarint(buf)
		copy(j.m[j.size+int64(k):], buf[k:])
		copy(j.m[j.size:], buf[:k])
	}
	j.size += int64(len(buf))
	j.memMu.Lock()
	j.mem = append(j.mem, mem...)
	j.memMu.Unlock()
	return nil
}

// backlog is how many bytes of the journal are written but not yet in the
// database (as far as this process knows).
func (j *journal) backlog() int64 {
	j.memMu.Lock()
	defer j.memMu.Unlock()
	if len(j.mem) == 0 {
		return 0
	}
	return j.mem[len(j.mem)-1].end - j.mem[0].start
}

// capacity is how many bytes the journal holds.
func (j *journal) capacity() int64 {
	if j.limit > 0 {
		return j.limit
	}
	return journalCap
}

// memRecord is a record this process wrote to its journal, kept so that
// it is ingested without reading the file back.
type memRecord struct {
	rec        *guard.Record
	start, end int64
}

// takeMem returns the records written since the last call.
func (j *journal) takeMem() []memRecord {
	j.memMu.Lock()
	defer j.memMu.Unlock()
	m := j.mem
	j.mem = nil
	return m
}

// ingest is ingestAll for the ingester goroutine, which also rotates this
// process's journal when it has grown.
func (db *DB) ingest() (int, error) {
	db.ingestMu.Lock()
	defer db.ingestMu.Unlock()
	n, err := db.ingestAll()
	if err == nil {
		db.maybeRotate()
	}
	return n, err
}

// ingestAll moves every complete record of every journal into the
// database and returns how many it moved. The caller holds ingestMu: the
// writer connection is not shared.
func (db *DB) ingestAll() (int, error) {
	files, err := filepath.Glob(filepath.Join(journalDir(db.opts.Path), "*.jsonl"))
	if err != nil {
		return 0, err
	}
	total := 0
	var errs []error
	for _, f := range files {
		n, err := db.ingestFile(f)
		total += n
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return total, errors.Join(errs...)
}

// ingestFile moves the complete records of one journal past its ingested
// offset into the database, assigning the chain, in one transaction.
func (db *DB) ingestFile(path string) (int, error) {
	name := filepath.Base(path)
	ctx := context.Background()
	wc := db.wc
	var offset int64
	err := wc.offset.QueryRowContext(ctx, name).Scan(&offset)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("ingest %s: %w", name, err)
	}
	if !hasFrameAt(path, offset) {
		return 0, nil
	}
	if _, err := wc.conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return 0, fmt.Errorf("ingest %s: begin: %w", name, err)
	}
	n, err := db.ingestLocked(ctx, path, name)
	if err != nil {
		_, _ = wc.conn.ExecContext(ctx, "ROLLBACK")
		return 0, fmt.Errorf("ingest %s: %w", name, err)
	}
	if _, err := wc.conn.ExecContext(ctx, "COMMIT"); err != nil {
		_, _ = wc.conn.ExecContext(ctx, "ROLLBACK")
		return 0, fmt.Errorf("ingest %s: commit: %w", name, err)
	}
	if n > 0 {
		db.dirty.Store(true)
	}
	return n, nil
}

// hasFrameAt reports whether a record starts at offset in a journal.
func hasFrameAt(path string, offset int64) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var b [binary.MaxVarintLen64]byte
	n, _ := f.ReadAt(b[:], offset)
	l, k := binary.Uvarint(b[:n])
	return k > 0 && l > 0
}

// ingestLocked runs inside the write transaction: the offset is read again
// there, since another process may have ingested the journal meanwhile.
// This process's own records come from memory; other journals are read.
func (db *DB) ingestLocked(ctx context.Context, path, name string) (int, error) {
	wc := db.wc
	var offset int64
	err := wc.offset.QueryRowContext(ctx, name).Scan(&offset)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, err
	}
	var seq int64
	var prev string
	err = wc.tail.QueryRowContext(ctx).Scan(&seq, &prev)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("chain tail: %w", err)
	}
	n := 0
	add := func(r *guard.Record) error {
		seq++
		r.Seq, r.PrevHash = seq, prev
		r.Hash = HashRecord(r)
		prev = r.Hash
		n++
		return db.insert(ctx, r)
	}
	if db.j != nil && name == db.j.name {
		mem := db.j.takeMem()
		if len(mem) > 0 && mem[0].start <= offset {
			for i, m := range mem {
				if m.end <= offset {
					continue
				}
				if m.start != offset {
					db.j.requeue(mem[i:])
					return n, fmt.Errorf("journal %s: memory and file disagree at offset %d", name, offset)
				}
				if err := add(m.rec); err != nil {
					db.j.requeue(mem[i:])
					return n, err
				}
				offset = m.end
			}
			_, err := wc.setOffset.ExecContext(ctx, name, offset)
			return n, err
		}
		// Not from where memory starts: read the file, and let memory go.
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	var b []byte
	for {
		got, rerr := f.ReadAt(chunk, offset+int64(len(b)))
		b = append(b, chunk[:got]...)
		progressed := false
		for len(b) > 0 {
			r, size, err := readFrame(b)
			if errors.Is(err, errTorn) {
				break
			}
			if err != nil {
				return n, fmt.Errorf("record at offset %d: %w", offset, err)
			}
			if err := add(r); err != nil {
				return n, err
			}
			offset += int64(size)
			b = b[size:]
			progressed = true
		}
		if rerr != nil || got == 0 || (!progressed && len(b) > 0 && zeroLength(b)) {
			break
		}
		if len(b) > 0 && zeroLength(b) {
			break
		}
	}
	if _, err := wc.setOffset.ExecContext(ctx, name, offset); err != nil {
		return n, err
	}
	return n, nil
}

// zeroLength reports whether b starts with the zero that ends a journal.
func zeroLength(b []byte) bool {
	l, k := binary.Uvarint(b)
	return k > 0 && l == 0
}

// requeue puts records back for the next ingestion after a failure.
func (j *journal) requeue(m []memRecord) {
	j.memMu.Lock()
	defer j.memMu.Unlock()
	j.mem = append(append([]memRecord(nil), m...), j.mem...)
}

func (db *DB) insert(ctx context.Context, r *guard.Record) error {
	_, err := db.wc.insert.ExecContext(ctx, r.Seq, r.ID, r.CallID, r.Kind, fmtTime(r.Time), r.Session, r.Client,
		r.Protocol, r.Server, r.Direction, r.Method, r.Tool, r.Arguments, r.Pin, r.Decision,
		r.DecidedBy, r.Reason, r.Outcome, r.Result, r.RequestSize, r.ResponseSize, r.DurationMS,
		r.Detail, r.PrevHash, r.Hash)
	if err != nil {
		return fmt.Errorf("insert record: %w", err)
	}
	return nil
}

// recoverJournals ingests the journals of processes that are gone (their
// lock is free) and removes them.
func (db *DB) recoverJournals() error {
	files, err := filepath.Glob(filepath.Join(journalDir(db.opts.Path), "*.jsonl"))
	if err != nil {
		return err
	}
	var errs []error
	for _, path := range files {
		if db.j != nil && filepath.Base(path) == db.j.name {
			continue
		}
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			f.Close() // alive
			continue
		}
		if _, err := db.ingestFile(path); err != nil {
			errs = append(errs, err)
		} else {
			db.dropJournal(path)
		}
		f.Close()
	}
	return errors.Join(errs...)
}

// dropJournal removes a fully ingested journal and its offset row, once
// what was ingested from it is in the database file for good: the
// ingester's commits are not fsync'd, so a full checkpoint comes first.
func (db *DB) dropJournal(path string) {
	name := filepath.Base(path)
	var busy, logPages, done int
	err := db.wc.conn.QueryRowContext(context.Background(), `PRAGMA wal_checkpoint(FULL)`).Scan(&busy, &logPages, &done)
	if err != nil || busy != 0 {
		return // kept, and ingested again by nobody: its offset says it is done
	}
	_ = os.Remove(path)
	_, _ = db.wc.conn.ExecContext(context.Background(), `DELETE FROM journals WHERE name = ?`, name)
}

// rotateAt is the size past which a fully ingested journal is replaced by
// a new one, so that a long session's journal does not grow without end.
const rotateAt = 8 << 20

// maybeRotate starts a new journal when this one is large and everything
// in it is in the database. The caller holds ingestMu.
func (db *DB) maybeRotate() {
	j := db.j
	ready := func() bool { // the caller holds j.mu
		return j.size >= rotateAt && !j.syncing && len(j.waiters) == 0 && !j.closed
	}
	j.mu.Lock()
	size, name := j.size, j.name
	ok := ready()
	j.mu.Unlock()
	if !ok {
		return
	}
	var offset int64
	if err := db.wc.offset.QueryRowContext(context.Background(), name).Scan(&offset); err != nil || offset != size {
		return
	}
	// The new file is made (and zero-filled) without holding the journal:
	// the relay goes on appending meanwhile.
	f, newName, m, err := newJournalFile(db.opts.Path, j.sync)
	if err != nil {
		db.opts.Logger.Warn("audit journal not rotated", "err", err)
		return
	}
	j.mu.Lock()
	if !ready() || j.size != size || j.name != name {
		j.mu.Unlock()
		if m != nil {
			_ = syscall.Munmap(m)
		}
		f.Close()
		os.Remove(f.Name())
		return
	}
	oldF, oldM := j.f, j.m
	j.f, j.m, j.name, j.size = f, m, newName, 0
	j.memMu.Lock()
	j.mem = nil
	j.memMu.Unlock()
	j.mu.Unlock()
	if oldM != nil {
		_ = syscall.Munmap(oldM)
	}
	oldF.Close()
	db.dropJournal(filepath.Join(journalDir(db.opts.Path), name))
}

// closeJournal ingests what is left of this process's journal and removes
// it when everything in it is in the database.
func (db *DB) closeJournal() error {
	db.j.stop()
	db.ingestMu.Lock()
	defer db.ingestMu.Unlock()
	j := db.j
	path := filepath.Join(journalDir(db.opts.Path), j.name)
	_, err := db.ingestFile(path)
	if err == nil {
		var offset int64
		_ = db.wc.offset.QueryRowContext(context.Background(), j.name).Scan(&offset)
		if offset >= j.size {
			db.dropJournal(path)
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.closed = true
	var merr error
	if j.m != nil {
		merr = syscall.Munmap(j.m)
		j.m = nil
	}
	return errors.Join(err, merr, j.f.Close())
}
