package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/guard-mcp/guard/internal/filelock"
	"github.com/guard-mcp/guard/store/sqlite"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/guard-mcp/guard/audit"
)

// Earlier versions of guard made records durable in a per-process journal
// beside the database (DB.journals/*.jsonl) and moved them into records
// later, keeping in the journals table how far each journal was moved. A
// database directory may still hold journals with records that never
// reached the database (a process that was killed, or stopped while the
// disk was full): the first writable Open moves them into the database, in
// order and chained, then removes the files. Their frames are those of
// today's journal (journal.go); what follows is the import.

// legacyJournalDir holds the journals of earlier versions.
func legacyJournalDir(dbPath string) string { return dbPath + ".journals" }

// legacyJournals lists the journals an earlier version left.
func legacyJournals(dbPath string) ([]string, error) {
	return filepath.Glob(filepath.Join(legacyJournalDir(dbPath), "*.jsonl"))
}

// importJournals moves the records of earlier versions' journals into the
// database and removes the journals. A journal still locked belongs to a
// process of an earlier version that is still running: it is left to that
// process, and done reports false (the journals table must stay for it).
func (jn journals) importJournals(ctx context.Context) (done bool, err error) {
	files, err := legacyJournals(jn.db.opts.Path)
	if err != nil {
		return false, err
	}
	done = true
	var errs []error
	for _, path := range files {
		f, err := filelock.OpenFile(path, os.O_RDONLY, 0)
		if err != nil {
			continue // removed meanwhile by its owner
		}
		if filelock.TryLock(f) != nil {
			f.Close()
			done = false
			continue
		}
		n, err := jn.importJournal(ctx, path)
		f.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("journal %s: %w", path, err))
			done = false
			continue
		}
		if n > 0 {
			jn.db.opts.Logger.Info("records of an earlier version's journal moved into the database", "journal", path, "records", n)
		}
	}
	if done {
		_ = os.Remove(legacyJournalDir(jn.db.opts.Path)) // only when empty
	}
	return done, errors.Join(errs...)
}

// importJournal moves one journal's records past its ingested offset into
// the database, with the chain, advancing the offset in the same
// transaction; once that is on disk for good, the journal is removed.
func (jn journals) importJournal(ctx context.Context, path string) (int, error) {
	name := filepath.Base(path)
	conn, err := jn.db.w.Conn(ctx)
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
		recs, end, err := sqlite.ReadJournal(path, offset)
		if err != nil || len(recs) == 0 {
			return 0, err
		}
		var seq int64
		var prev string
		err = conn.QueryRowContext(ctx, selectTail).Scan(&seq, &prev)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return 0, fmt.Errorf("chain tail: %w", err)
		}
		// The tree grows with the records when it covers the log; if
		// it does not yet, the writer completes it from the table
		// (writerConn.loadTree).
		size, err := treeSize(ctx, conn)
		if err != nil {
			return 0, err
		}
		var edge *audit.Edge
		if size == seq {
			if edge, err = audit.LoadEdge(size, sqlHashReader(ctx, conn)); err != nil {
				return 0, err
			}
		}
		var buf []byte
		m := audit.NewMACer(jn.db.auth.key)
		for _, r := range recs {
			seq++
			r.Seq, r.PrevHash = seq, prev
			r.Hash, buf = audit.HashInto(buf, r)
			prev = r.Hash
			if _, err := conn.ExecContext(ctx, insertRecord, r.Seq, r.ID, r.CallID, r.Kind, fmtTime(r.Time), r.Session,
				r.Client, r.Protocol, r.Server, r.Direction, r.Method, r.Tool, r.Arguments, r.Pin, r.Decision,
				r.DecidedBy, r.Reason, r.Outcome, r.Result, r.RequestSize, r.ResponseSize, r.DurationMS,
				r.Detail, r.Approval, r.PrevHash, r.Hash, r.User, r.UserEmail, audit.GroupsText(r.UserGroups), m.MAC(r.Seq, r.Hash)); err != nil {
				return 0, fmt.Errorf("insert record: %w", err)
			}
			if edge == nil {
				continue
			}
			first := tlog.StoredHashIndex(0, edge.Size())
			hs, err := edge.Append(audit.LeafHash(buf))
			if err != nil {
				return 0, err
			}
			for j := range hs {
				if _, err := conn.ExecContext(ctx, insertTreeHash, first+int64(j), hs[j][:]); err != nil {
					return 0, fmt.Errorf("insert tree hash: %w", err)
				}
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
		jn.db.ckpt.dirty.Store(true)
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
