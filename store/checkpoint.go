package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/guard-mcp/guard/store/sqlite"

	"github.com/guard-mcp/guard/audit"
	"golang.org/x/mod/sumdb/tlog"
)

// SecretForms returns the ways the checkpoint key may be written: its file's
// text (the hex seed), and the seed and the whole private key in hex (both
// cases) and base64 (standard and URL alphabets, padded or not). guard masks
// each wherever it appears; none of it is ever recorded.
func (db *DB) SecretForms() []string { return db.signer.SecretForms() }

// VerifierKey is the verifier key of the log's checkpoint key, to pin.
func (vr Verifier) VerifierKey() (string, error) {
	if vr.db.signer == nil {
		return "", fmt.Errorf("there is no checkpoint key at %s", vr.db.opts.KeyPath)
	}
	return vr.db.signer.VerifierKey(), nil
}

// writeCheckpoint signs the tree's current size and root, once it is
// proved consistent with the last checkpoint kept in the database and the
// one in the file beside it, keeps it in the checkpoints table, writes it
// to the file and hands it to the witnesses. A log that does not extend
// the last checkpoint gets no new one: the refusal is logged and counted.
func (cp *checkpointState) writeCheckpoint() (err error) {
	// dirty is cleared before the head is read: a commit that lands
	// meanwhile (a caller's own, in AppendAsync) sets it again, and is
	// covered by the next checkpoint. A failure leaves it set.
	if cp.dirty.Swap(false) {
		defer func() {
			if err != nil {
				cp.dirty.Store(true)
			}
		}()
	}
	path := cp.db.opts.CheckpointPath
	unlock, err := lockFile(path + ".lock")
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer unlock()
	c, fresh, err := cp.signCheckpoint(context.Background(), path)
	if errors.Is(err, audit.ErrRewritten) {
		cp.db.stats.refused.Add(1)
		return err
	}
	if err != nil || c == nil {
		return err
	}
	if old, err := audit.ReadCheckpointFile(path, cp.db.signer.Verifier()); err != nil || old.Size < c.Size {
		if err := audit.WriteFileAtomic(path, c.Note); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
	}
	cp.lastCheckpoint.Store(time.Now().UnixNano())
	cp.signedSize.Store(c.Size)
	if fresh && cp.witness != nil {
		cp.witness.Send(c)
	}
	return nil
}

// logCheckpoint logs why a checkpoint was not written. A log that does not
// extend the last checkpoint stays so: that is logged as an error once,
// and counted each time (CheckpointRefusals). A record without a valid
// MAC stays too: it was alerted (IntegrityAlerts) when it was found.
func (cp *checkpointState) logCheckpoint(err error) {
	if (errors.Is(err, audit.ErrRewritten) || errors.Is(err, errUnauthenticated)) && cp.refusedLogged.Swap(true) {
		cp.db.opts.Logger.Debug("audit checkpoint refused", "err", err)
		return
	}
	cp.db.opts.Logger.Error("audit checkpoint", "err", err)
}

// signCheckpoint signs and keeps the checkpoint of the tree as it is, in
// one write transaction; fresh reports that it was not kept before. It
// returns nil when the log is empty.
func (cp *checkpointState) signCheckpoint(ctx context.Context, path string) (c *audit.Checkpoint, fresh bool, err error) {
	err = cp.writerTx(ctx, func(conn *sql.Conn) (bool, error) {
		// What it signs is on disk first, with either durability: the
		// ingester's commits are not synced, and a checkpoint ahead of
		// the log after a power cut would read as a truncation for
		// good. The write lock held here keeps new commits out until
		// the size is read.
		if err := cp.db.ing.syncFiles(); err != nil {
			return false, fmt.Errorf("checkpoint: %w", err)
		}
		c, fresh, err = cp.signIn(ctx, conn, path)
		return fresh, err
	})
	return c, fresh, err
}

// writerTx runs fn in a write transaction on the audit writer's
// connection, committed when fn says so. The writer's knowledge of the
// chain's tail survives it (writerConn.chainTail): a checkpoint is not
// another writer's commit.
func (cp *checkpointState) writerTx(ctx context.Context, fn func(*sql.Conn) (bool, error)) (err error) {
	cp.db.ing.commitMu.Lock()
	defer cp.db.ing.commitMu.Unlock()
	if cp.db.ing.wc == nil {
		if cp.db.ing.wc, err = newWriterConn(ctx, cp.db.aw, cp.db.auth); err != nil {
			return err
		}
	}
	wc := cp.db.ing.wc
	if _, err := wc.conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		cp.db.ing.endFailed(ctx, wc) // a connection the server closed is given up
		return fmt.Errorf("begin: %w", err)
	}
	same := false
	_ = wc.conn.Raw(func(dc any) error {
		v, err := sqlite.DataVersion(dc)
		same = err == nil && wc.known && v == wc.version
		return nil
	})
	commit, err := fn(wc.conn)
	if err != nil {
		cp.db.ing.endFailed(ctx, wc)
		return err
	}
	if !commit {
		_, _ = wc.conn.ExecContext(ctx, "ROLLBACK")
		return nil
	}
	if _, err := wc.conn.ExecContext(ctx, "COMMIT"); err != nil {
		cp.db.ing.endFailed(ctx, wc)
		return fmt.Errorf("commit: %w", err)
	}
	if same {
		_ = wc.conn.Raw(func(dc any) error {
			if v, err := sqlite.DataVersion(dc); err == nil {
				wc.version = v
			}
			return nil
		})
	}
	return nil
}

// signIn is signCheckpoint inside the transaction on conn.
func (cp *checkpointState) signIn(ctx context.Context, conn *sql.Conn, path string) (c *audit.Checkpoint, fresh bool, err error) {
	size, err := treeSize(ctx, conn)
	if err != nil || size == 0 {
		return nil, false, err
	}
	hr := sqlHashReader(ctx, conn)
	root, err := tlog.TreeHash(size, hr)
	if err != nil {
		return nil, false, fmt.Errorf("checkpoint: %w", err)
	}
	// The last checkpoint kept, and the file's (another process may
	// have written it, or it may be all that is left of one); the last
	// one this process signed, and the latest each file witness held
	// when this process first signed one: none of them is in the
	// database, which whoever truncates the log may also empty of its
	// checkpoints.
	var prev []*audit.Checkpoint
	var kept int64
	var text string
	err = conn.QueryRowContext(ctx, `SELECT size, note FROM checkpoints ORDER BY size DESC LIMIT 1`).Scan(&kept, &text)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return nil, false, fmt.Errorf("checkpoint: %w", err)
	default:
		p, err := audit.OpenCheckpoint([]byte(text), cp.db.signer.Verifier())
		if err != nil {
			return nil, false, fmt.Errorf("checkpoint: the last one kept (%d records): %w", kept, err)
		}
		prev = append(prev, p)
	}
	switch p, err := audit.ReadCheckpointFile(path, cp.db.signer.Verifier()); {
	case err == nil:
		prev = append(prev, p)
	case !errors.Is(err, os.ErrNotExist):
		cp.db.opts.Logger.Warn("the checkpoint file is not one of this log's checkpoints: it is replaced", "err", err)
	}
	if p := cp.lastSigned.Load(); p != nil {
		prev = append(prev, p)
	}
	if cp.witness != nil {
		prev = append(prev, cp.witness.LatestHeld(cp.db.signer.Verifier())...)
	}
	var after int64
	for _, p := range prev {
		if err := audit.ProveExtends(p, size, root, hr); err != nil {
			return nil, false, err
		}
		after = max(after, p.Size)
		cp.db.auth.learn(p)
	}
	from, err := cp.checkTail(ctx, conn, after, size)
	if err != nil {
		return nil, false, err
	}
	if c, err = cp.db.signer.Sign(size, root, from); err != nil {
		return nil, false, err
	}
	cp.lastSigned.Store(c)
	cp.db.ing.wc.dropOwn(size)
	if size <= kept {
		return c, false, nil
	}
	if _, err := conn.ExecContext(ctx, `INSERT INTO checkpoints (size, note, time) VALUES (?, ?, ?)`,
		size, string(c.Note), fmtTime(cp.db.opts.Now())); err != nil {
		return nil, false, fmt.Errorf("checkpoint: %w", err)
	}
	return c, true, nil
}

// ErrNoCheckpoint is a log no checkpoint signs yet: it is empty, or its
// first records are younger than the first checkpoint (a guard killed in
// its first second leaves such a log).
var ErrNoCheckpoint = errors.New("no checkpoint yet")

// LatestCheckpoint is the latest checkpoint kept in the database (or, when
// none is, the one in the file beside it), checked against the log's key.
func (db *DB) LatestCheckpoint(ctx context.Context) (*audit.Checkpoint, error) {
	db.ing.caughtUp(ctx)
	if db.signer == nil {
		return nil, fmt.Errorf("there is no checkpoint key at %s", db.opts.KeyPath)
	}
	var text string
	err := db.r.QueryRowContext(ctx, `SELECT note FROM checkpoints ORDER BY size DESC LIMIT 1`).Scan(&text)
	if errors.Is(err, sql.ErrNoRows) {
		c, err := audit.ReadCheckpointFile(db.opts.CheckpointPath, db.signer.Verifier())
		if errors.Is(err, os.ErrNotExist) {
			return nil, ErrNoCheckpoint
		}
		return c, err
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	c, err := audit.OpenCheckpoint([]byte(text), db.signer.Verifier())
	if err != nil {
		return nil, fmt.Errorf("the latest checkpoint kept: %w", err)
	}
	return c, nil
}

// CheckpointRefusals is how many times a checkpoint was not signed because
// the log did not extend the last one (it was truncated or rewritten).
func (ig Integrity) CheckpointRefusals() int64 { return ig.db.stats.refused.Load() }

// WitnessFailures is how many checkpoints a witness did not get.
func (ig Integrity) WitnessFailures() int64 { return ig.db.stats.witness.Load() }
