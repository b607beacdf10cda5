package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/guard-mcp/guard/store/sqlite"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
)

// Verifier verifies the audit log (its chain, its tree, its checkpoints,
// its MACs and the indexes made from it), on a schedule too, keeping the
// results; it says what the journals of processes that stopped hold
// outside the chain, and proves records against the latest checkpoint.
// DB.Verifier returns it.
type Verifier struct{ db *DB }

// Verifier returns the audit log's verification.
func (db *DB) Verifier() Verifier { return Verifier{db} }

// Verify is VerifyWith against the log's own files only.
func (vr Verifier) Verify(ctx context.Context) (audit.Report, error) {
	return vr.VerifyWith(ctx, audit.VerifyOptions{})
}

// VerifyWith walks the log in order, recomputing every record's hash and
// link and its leaf in the Merkle tree, and the whole tree from the
// leaves, comparing every stored tree hash; it checks every checkpoint
// kept in the database, the one in the file beside it and those in
// o.Kept (signature, and the root of the tree at its size: two successive
// checkpoints are then consistent), reading each table once, in order,
// with memory that does not grow with the log.
//
// What cannot be checked here does not stop the rest: without a key of
// this log (none at hand, or another log's, which is used for nothing)
// the checkpoints' sizes and roots are still compared with the log, and
// the report fails on whatever fails, and is unverifiable only when all
// it could check holds.
func (vr Verifier) VerifyWith(ctx context.Context, o audit.VerifyOptions) (rep audit.Report, err error) {
	defer func() {
		if err != nil && sqlite.Damaged(err) {
			rep.Fail("the database is damaged: %v", err)
			err = nil
		}
		rep.OK = rep.Verdict() == audit.VerdictVerified
	}()
	if vr.db.hold != nil {
		rep.Cannot("there is no database at %s: nothing there to verify (is it the log's? --db, GUARD_DB or db: in the configuration names it)", vr.db.opts.Path)
		return rep, nil
	}
	vr.db.ing.caughtUp(ctx)
	var has int
	if err := vr.db.r.QueryRowContext(ctx, tableExists(vr.db.pg, "tree_hashes")).Scan(&has); err != nil {
		return rep, fmt.Errorf("verify: %w", err)
	}
	if has == 0 {
		rep.Cannot("the log has no Merkle tree yet: a writable guard (guard run, guard serve) builds it when it opens the database")
		return rep, nil
	}
	origin, originAt, err := vr.db.logOrigin(ctx)
	if err != nil {
		return rep, fmt.Errorf("verify: %w", err)
	}
	v, hadKey := vr.verifyKey(o.Key, origin, originAt, &rep.Findings)
	cs := audit.Checkpoints{V: v, Origin: origin}
	var extra []audit.Anchor
	// The file beside the database is guard's own copy of the latest
	// checkpoint; one that names another log is not this log's (on
	// PostgreSQL it lies beside whichever key was read) and tells
	// nothing about it.
	if b, err := os.ReadFile(vr.db.opts.CheckpointPath); err == nil {
		if other := audit.OriginOfNote(b); origin != "" && other != "" && other != origin {
			rep.Cannot("the checkpoint file %s is another log's (%s), not this log's (%s): it was not used", vr.db.opts.CheckpointPath, other, origin)
		} else if c, err := cs.Open(b); err != nil {
			rep.Fail("the checkpoint at %s: %v", vr.db.opts.CheckpointPath, err)
		} else {
			extra = append(extra, audit.Anchor{C: c, Where: "in " + vr.db.opts.CheckpointPath})
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		rep.Fail("the checkpoint at %s: %v", vr.db.opts.CheckpointPath, err)
	}
	for _, k := range o.Kept {
		c, err := cs.Open(k.Note)
		if err != nil {
			rep.Fail("the checkpoint %s: %v", k.Name, err)
			continue
		}
		extra = append(extra, audit.Anchor{C: c, Where: k.Name, Kept: v != nil})
	}
	slices.SortStableFunc(extra, func(a, b audit.Anchor) int { return int(a.C.Size - b.C.Size) })

	// The retention records are read before the walk takes its
	// connections (those appended since are read when needed).
	ret, err := vr.db.Pruning().newRetentionCheck(ctx, v)
	if err != nil {
		return rep, fmt.Errorf("verify: %w", err)
	}
	w, err := vr.openWalk(ctx)
	if err != nil {
		return rep, err
	}
	defer w.close()
	macs, err := vr.newMACWalk(ctx, v, extra)
	if err != nil {
		return rep, fmt.Errorf("verify: %w", err)
	}
	wk := &audit.Walk{Checkpoints: cs, Extra: extra, Retention: ret, MACs: macs}
	if err := wk.Run(ctx, w, &rep); err != nil {
		return rep, fmt.Errorf("verify: %w", err)
	}
	if !hadKey && (rep.Records > 0 || wk.SeenCheckpoint || len(o.Kept) > 0) {
		vr.noKey(&rep.Findings)
	}
	if rep.Problem == "" && rep.Records > 0 && wk.Checked == 0 {
		rep.Fail("no checkpoint covers the log: its truncation cannot be ruled out")
	}
	if rep.Problem == "" {
		p, err := vr.checkCallIndex(ctx, macs.Authenticated(rep.Records))
		if err != nil {
			return rep, fmt.Errorf("verify: call index: %w", err)
		}
		if p != "" {
			rep.Fail("%s", p)
		}
	}
	if rep.Problem == "" {
		p, err := vr.checkCallWords(ctx)
		if err != nil {
			return rep, fmt.Errorf("verify: text index: %w", err)
		}
		if p != "" {
			rep.Fail("%s", p)
		}
	}
	if err := vr.journalFindings(ctx, &rep.Findings); err != nil {
		return rep, fmt.Errorf("verify: %w", err)
	}
	if n, after := macs.Unauthenticated(); rep.Problem == "" && n > 0 {
		rep.Unauthenticated, rep.TailAfter = n, after
		rep.Note("tail of %d records after checkpoint %d unauthenticated: no checkpoint signs them yet, and their MACs can be checked only with the checkpoint key's secret (the key file, or the configuration that names it)",
			rep.Unauthenticated, rep.TailAfter)
	}
	return rep, nil
}

// walk is the log as VerifyWith walks it (audit.Log): the cursors it
// reads the records, the tree and the checkpoints with, each in order,
// all as of one moment (a commit between them would read as a
// truncation), on one connection of the readers' pool.
type walk struct {
	db              *DB
	txs             []*sql.Tx
	recs, tree, cps *sql.Rows
}

var _ audit.Log = (*walk)(nil)

func (vr Verifier) openWalk(ctx context.Context) (*walk, error) {
	w := &walk{db: vr.db}
	queries := []struct {
		rows **sql.Rows
		q    string
	}{
		{&w.recs, vr.db.schema.selectRecordsMAC() + ` ORDER BY seq`},
		{&w.tree, `SELECT idx, hash FROM tree_hashes ORDER BY idx`},
		{&w.cps, `SELECT size, note FROM checkpoints ORDER BY size`},
	}
	// SQLite reads the three on one connection. A PostgreSQL connection
	// reads one result at a time: each is read on a connection of its
	// own, in transactions that share one snapshot.
	snapshot := ""
	for i, q := range queries {
		if i > 0 && !vr.db.pg && len(w.txs) > 0 {
			rows, err := w.txs[0].QueryContext(ctx, q.q)
			if err != nil {
				w.close()
				return nil, fmt.Errorf("verify: %w", err)
			}
			*q.rows = rows
			continue
		}
		opts := &sql.TxOptions{}
		if vr.db.pg {
			opts = &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}
		}
		tx, err := vr.db.r.BeginTx(ctx, opts)
		if err != nil {
			w.close()
			return nil, fmt.Errorf("verify: %w", err)
		}
		w.txs = append(w.txs, tx)
		if vr.db.pg && i == 0 {
			err = tx.QueryRowContext(ctx, `SELECT pg_export_snapshot()`).Scan(&snapshot)
		} else if vr.db.pg {
			_, err = tx.ExecContext(ctx, `SET TRANSACTION SNAPSHOT '`+strings.ReplaceAll(snapshot, "'", "''")+`'`)
		}
		if err != nil {
			w.close()
			return nil, fmt.Errorf("verify: %w", err)
		}
		if *q.rows, err = tx.QueryContext(ctx, q.q); err != nil {
			w.close()
			return nil, fmt.Errorf("verify: %w", err)
		}
	}
	return w, nil
}

func (w *walk) close() {
	for _, r := range []*sql.Rows{w.recs, w.tree, w.cps} {
		if r != nil {
			r.Close()
		}
	}
	for _, tx := range w.txs {
		_ = tx.Rollback() // it only read
	}
}

// NextRecord reads the next record and its MAC.
func (w *walk) NextRecord() (*guard.Record, []byte, error) {
	if !w.recs.Next() {
		if err := w.recs.Err(); err != nil {
			return nil, nil, err
		}
		return nil, nil, io.EOF
	}
	var mac []byte
	r, err := scanRecord(w.recs, &mac)
	if err != nil {
		return nil, nil, err
	}
	return r, mac, nil
}

// NextTreeHash reads the next stored tree hash; the end of its rows is
// the tree's end.
func (w *walk) NextTreeHash() (int64, []byte, error) {
	if !w.tree.Next() {
		return 0, nil, io.EOF
	}
	var idx int64
	var h []byte
	if err := w.tree.Scan(&idx, &h); err != nil {
		return 0, nil, err
	}
	return idx, h, nil
}

// NextCheckpoint reads the next checkpoint kept in the database.
func (w *walk) NextCheckpoint() (int64, []byte, error) {
	if !w.cps.Next() {
		if err := w.cps.Err(); err != nil {
			return 0, nil, err
		}
		return 0, nil, io.EOF
	}
	var size int64
	var text string
	if err := w.cps.Scan(&size, &text); err != nil {
		return 0, nil, err
	}
	return size, []byte(text), nil
}

// SeqOf is the seq of the record with chain hash h, or 0 (a full scan:
// it is asked only once a link is broken).
func (w *walk) SeqOf(ctx context.Context, h string) int64 {
	var s int64
	_ = w.db.r.QueryRowContext(ctx, `SELECT seq FROM records WHERE hash = ?`, h).Scan(&s)
	return s
}
