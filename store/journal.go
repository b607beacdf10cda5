package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/internal/filelock"
	"github.com/guard-mcp/guard/store/sqlite"
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
// frame alone: the reader finds the next frame by its mark (sqlite.ScanJournal),
// and the recovery keeps the file aside and records what was lost
// (damage.go).

// recoverJournals moves into the database the records of journals whose
// owner is gone (a process that was killed, or stopped while the database
// could not take them), in order and chained, skipping those already
// there, and removes the journals. A journal still locked belongs to a
// live process.
func (in *ingestion) recoverJournals(ctx context.Context) error {
	files, err := sqlite.Segments(sqlite.JournalsDir(in.db.opts.Path))
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
	files, _ := sqlite.Segments(sqlite.JournalsDir(in.db.opts.Path))
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
	if st, err := f.Stat(); err == nil && st.Size() < sqlite.JournalHeader {
		// A segment whose maker has not locked it yet (sqlite.NewSegment), or
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
	sc, err := sqlite.ScanFile(path, key)
	if err != nil {
		return 0, err
	}
	from, err := in.db.auth.macsFrom(ctx, in.db.w)
	if err != nil {
		return 0, err
	}
	recs := sc.Records()
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
	if len(sc.Damage) > 0 && !refused.whole() {
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
