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
	"syscall"
	"time"

	guard "github.com/guard-mcp/guard"
)

// Earlier versions of guard made records durable in a per-process journal
// beside the database (DB.journals/*.jsonl) and moved them into records
// later, keeping in the journals table how far each journal was moved. A
// database directory may still hold journals with records that never
// reached the database (a process that was killed, or stopped while the
// disk was full): the first writable Open moves them into the database, in
// order and chained, then removes the files. What follows is only what
// that needs: the frame reader and the import.

// journalDir holds the journals of earlier versions.
func journalDir(dbPath string) string { return dbPath + ".journals" }

// legacyJournals lists the journals an earlier version left.
func legacyJournals(dbPath string) ([]string, error) {
	return filepath.Glob(filepath.Join(journalDir(dbPath), "*.jsonl"))
}

// A record in a journal is one frame: its length (uvarint), its fields in
// a fixed order (text as length and bytes, numbers as varints), and a
// CRC-32 of the fields. A frame cut short (or a zero length) marks the end
// of what was written.

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

// importJournals moves the records of earlier versions' journals into the
// database and removes the journals. A journal still locked belongs to a
// process of an earlier version that is still running: it is left to that
// process, and done reports false (the journals table must stay for it).
func (db *DB) importJournals(ctx context.Context) (done bool, err error) {
	files, err := legacyJournals(db.opts.Path)
	if err != nil {
		return false, err
	}
	done = true
	var errs []error
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			continue // removed meanwhile by its owner
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			f.Close()
			done = false
			continue
		}
		n, err := db.importJournal(ctx, path)
		f.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("journal %s: %w", path, err))
			done = false
			continue
		}
		if n > 0 {
			db.opts.Logger.Info("records of an earlier version's journal moved into the database", "journal", path, "records", n)
		}
	}
	if done {
		_ = os.Remove(journalDir(db.opts.Path)) // only when empty
	}
	return done, errors.Join(errs...)
}

// importJournal moves one journal's records past its ingested offset into
// the database, with the chain, advancing the offset in the same
// transaction; once that is on disk for good, the journal is removed.
func (db *DB) importJournal(ctx context.Context, path string) (int, error) {
	name := filepath.Base(path)
	conn, err := db.w.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	n, err := func() (int, error) {
		var offset int64
		err := conn.QueryRowContext(ctx, `SELECT offset FROM journals WHERE name = ?`, name).Scan(&offset)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return 0, err
		}
		recs, end, err := readJournal(path, offset)
		if err != nil || len(recs) == 0 {
			return 0, err
		}
		var seq int64
		var prev string
		err = conn.QueryRowContext(ctx, selectTail).Scan(&seq, &prev)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return 0, fmt.Errorf("chain tail: %w", err)
		}
		for _, r := range recs {
			seq++
			r.Seq, r.PrevHash = seq, prev
			r.Hash = HashRecord(r)
			prev = r.Hash
			if _, err := conn.ExecContext(ctx, insertRecord, r.Seq, r.ID, r.CallID, r.Kind, fmtTime(r.Time), r.Session,
				r.Client, r.Protocol, r.Server, r.Direction, r.Method, r.Tool, r.Arguments, r.Pin, r.Decision,
				r.DecidedBy, r.Reason, r.Outcome, r.Result, r.RequestSize, r.ResponseSize, r.DurationMS,
				r.Detail, r.PrevHash, r.Hash); err != nil {
				return 0, fmt.Errorf("insert record: %w", err)
			}
		}
		_, err = conn.ExecContext(ctx, `INSERT INTO journals (name, offset) VALUES (?, ?)
			ON CONFLICT (name) DO UPDATE SET offset = excluded.offset`, name, end)
		return len(recs), err
	}()
	if err == nil {
		_, err = conn.ExecContext(ctx, "COMMIT")
	}
	if err != nil {
		_, _ = conn.ExecContext(ctx, "ROLLBACK")
		return 0, err
	}
	if n > 0 {
		db.dirty.Store(true)
	}
	// With durability normal the commit is not yet on disk: a full WAL
	// checkpoint (which syncs) comes before the journal goes. When it
	// cannot complete, the journal stays: its offset says it is done.
	var busy, logPages, moved int
	if err := conn.QueryRowContext(ctx, `PRAGMA wal_checkpoint(FULL)`).Scan(&busy, &logPages, &moved); err != nil {
		return n, fmt.Errorf("kept until a WAL checkpoint completes: %w", err)
	}
	if busy != 0 {
		return n, errors.New("kept until a WAL checkpoint completes (another process is reading)")
	}
	if err := os.Remove(path); err != nil {
		return n, err
	}
	_, err = conn.ExecContext(ctx, `DELETE FROM journals WHERE name = ?`, name)
	return n, err
}
