package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
	"golang.org/x/mod/sumdb/tlog"
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

// anchor is a checkpoint the log is checked against while it is walked.
type anchor struct {
	c     *audit.Checkpoint
	where string
	kept  bool // from outside guard's files, its signature checked
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
		if err != nil && damaged(err) {
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
	var extra []anchor
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
			extra = append(extra, anchor{c, "in " + vr.db.opts.CheckpointPath, false})
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
		extra = append(extra, anchor{c, k.Name, v != nil})
	}
	slices.SortStableFunc(extra, func(a, b anchor) int { return int(a.c.Size - b.c.Size) })

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
	cps := &checkpointStream{rows: w.cps, cs: cs, extra: extra}
	macs, err := vr.newMACWalk(ctx, v, extra)
	if err != nil {
		return rep, fmt.Errorf("verify: %w", err)
	}
	edge := &audit.Edge{}
	var buf []byte
	var prev *guard.Record
	checked := 0
	// Checkpoints of size 0 hold nothing to check.
	for cps.peek(rep.Fail) != nil && cps.peek(rep.Fail).c.Size == 0 {
		cps.next()
	}
	for w.recs.Next() {
		var mac []byte
		r, err := scanRecord(w.recs, &mac)
		if err != nil {
			return rep, fmt.Errorf("verify: %w", err)
		}
		rep.Records++
		if r.Pruned {
			rep.Pruned++
		}
		if rep.Problem != "" {
			continue
		}
		wantSeq, prevHash := int64(1), ""
		if prev != nil {
			wantSeq, prevHash = prev.Seq+1, prev.Hash
		}
		// A pruned record's hash is not recomputed (its body is in an
		// archive): its link is checked, and its leaf is the tree's.
		var h string
		if !r.Pruned {
			h, buf = audit.HashInto(buf, r)
		}
		switch {
		case r.Pruned && audit.HasBody(r):
			rep.Fail("record %d (id %s) was altered: it is marked as pruned but its row holds a body", r.Seq, r.ID)
		case !r.Pruned && h != r.Hash:
			rep.Fail("record %d (id %s) was altered: its contents do not match its hash", r.Seq, r.ID)
		case r.Seq != wantSeq:
			rep.Fail("records %d to %d were removed: record %d (id %s) follows record %d", wantSeq, r.Seq-1, r.Seq, r.ID, wantSeq-1)
		case r.PrevHash != prevHash:
			if s := vr.seqOf(ctx, r.PrevHash); r.PrevHash != "" && s > 0 {
				rep.Fail("records were reordered: record %d (id %s) belongs after record %d", r.Seq, r.ID, s)
			} else {
				rep.Fail("record %d (id %s) does not follow record %d: the record before it was removed or replaced", r.Seq, r.ID, wantSeq-1)
			}
		}
		prev = r
		if rep.Problem != "" {
			continue
		}
		if p := macs.record(r, mac); p != "" {
			rep.Fail("%s", p)
			continue
		}
		if p := ret.Record(ctx, r); p != "" {
			rep.Fail("%s", p)
			continue
		}
		var leaf *tlog.Hash
		if !r.Pruned {
			l := audit.LeafHash(buf)
			leaf = &l
		}
		if macs.treeless {
			continue
		}
		if p := w.checkLeaf(edge, r.Seq, leaf); p != "" {
			if w.endedAt == r.Seq && cps.peek(rep.Fail) == nil {
				// The tree stops after the last checkpoint, as guard
				// stops it before a record whose MAC fails (mac.go):
				// the records from there on are in no tree yet.
				macs.treeless = true
				continue
			}
			rep.Fail("%s", p)
			continue
		}
		for a := cps.peek(rep.Fail); a != nil && a.c.Size == edge.Size() && rep.Problem == ""; a = cps.peek(rep.Fail) {
			root, err := edge.Root()
			if err != nil {
				return rep, fmt.Errorf("verify: %w", err)
			}
			if root != a.c.Root {
				rep.Fail("the checkpoint of %d records %s does not match the log: records up to %d were changed, removed or replaced", a.c.Size, a.where, a.c.Size)
			}
			macs.checkpointed(a.c.Size)
			if a.kept {
				rep.Witnessed = true
				rep.Extends = max(rep.Extends, a.c.Size)
			}
			checked++
			cps.next()
		}
	}
	if err := w.recs.Err(); err != nil {
		return rep, fmt.Errorf("verify: %w", err)
	}
	if rep.Problem == "" && w.tree.Next() {
		var idx int64
		var h []byte
		if err := w.tree.Scan(&idx, &h); err == nil {
			level, n := tlog.SplitStoredHashIndex(idx)
			rep.Fail("the log was truncated: the tree has a hash (level %d, node %d) beyond its %d records", level, n, rep.Records)
		}
	}
	if a := cps.peek(rep.Fail); a != nil && rep.Problem == "" {
		rep.Fail("the log was truncated: the checkpoint of %d records %s is ahead of the log's %d", a.c.Size, a.where, rep.Records)
	}
	if err := cps.err(); err != nil {
		return rep, fmt.Errorf("verify: %w", err)
	}
	if !hadKey && (rep.Records > 0 || cps.seen || len(o.Kept) > 0) {
		vr.noKey(&rep.Findings)
	}
	if rep.Problem == "" && rep.Records > 0 && checked == 0 {
		rep.Fail("no checkpoint covers the log: its truncation cannot be ruled out")
	}
	if rep.Problem == "" {
		p, err := vr.checkCallIndex(ctx, macs.authenticated(rep.Records))
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
	if rep.Problem == "" && macs.unauth > 0 {
		rep.Unauthenticated, rep.TailAfter = macs.unauth, macs.covered
		rep.Note("tail of %d records after checkpoint %d unauthenticated: no checkpoint signs them yet, and their MACs can be checked only with the checkpoint key's secret (the key file, or the configuration that names it)",
			rep.Unauthenticated, rep.TailAfter)
	}
	return rep, nil
}

// walk holds the cursors VerifyWith reads the log with, each in order,
// all in one read transaction: the records, the tree and the checkpoints
// are read as of one moment (a commit between them would read as a
// truncation), on one connection of the readers' pool.
type walk struct {
	txs             []*sql.Tx
	recs, tree, cps *sql.Rows
	endedAt         int64 // the record before whose leaf the stored tree ended
}

func (vr Verifier) openWalk(ctx context.Context) (*walk, error) {
	w := &walk{}
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

// checkLeaf adds record seq's leaf to the tree rebuilt from the records
// and compares the hashes it adds with the stored ones; it returns a
// problem, or "". A nil leaf is a pruned record's: the stored one is
// taken, and only the hashes it completes are compared.
func (w *walk) checkLeaf(edge *audit.Edge, seq int64, leaf *tlog.Hash) string {
	first := tlog.StoredHashIndex(0, edge.Size())
	next := func(j int) ([]byte, string) {
		if !w.tree.Next() {
			if j == 0 {
				w.endedAt = seq
			}
			return nil, fmt.Sprintf("the tree ends before record %d: its hashes from record %d on were removed", seq, seq)
		}
		var idx int64
		var got []byte
		if err := w.tree.Scan(&idx, &got); err != nil {
			return nil, fmt.Sprintf("the tree's hashes at record %d: %v", seq, err)
		}
		if idx != first+int64(j) {
			return nil, fmt.Sprintf("the tree's hashes at record %d were removed or reordered", seq)
		}
		return got, ""
	}
	from := 0
	if leaf == nil {
		got, p := next(0)
		if p != "" {
			return p
		}
		if len(got) != tlog.HashSize {
			return fmt.Sprintf("the tree's leaf of pruned record %d is malformed: the tree was altered", seq)
		}
		leaf = new(tlog.Hash)
		copy(leaf[:], got)
		from = 1
	}
	hs, err := edge.Append(*leaf)
	if err != nil {
		return err.Error()
	}
	for j := from; j < len(hs); j++ {
		got, p := next(j)
		switch {
		case p != "":
			return p
		case string(got) != string(hs[j][:]) && j == 0:
			return fmt.Sprintf("the tree's leaf of record %d does not match the record: the record or the tree was altered", seq)
		case string(got) != string(hs[j][:]):
			return fmt.Sprintf("the tree's hashes at record %d do not match the records before it: the tree was altered", seq)
		}
	}
	return ""
}

// checkpointStream merges the checkpoints kept in the database (rows, in
// size order, each read by cs as it is read) with the others, by size.
type checkpointStream struct {
	rows  *sql.Rows
	cs    audit.Checkpoints
	extra []anchor
	head  *anchor
	done  bool
	seen  bool // the database keeps a checkpoint
	rerr  error
}

// peek returns the next checkpoint by size, or nil.
func (s *checkpointStream) peek(problem func(string, ...any)) *anchor {
	for s.head == nil && !s.done {
		if !s.rows.Next() {
			s.done = true
			s.rerr = s.rows.Err()
			break
		}
		var size int64
		var text string
		if err := s.rows.Scan(&size, &text); err != nil {
			s.rerr = err
			s.done = true
			break
		}
		s.seen = true
		c, err := s.cs.Open([]byte(text))
		if err == nil && c.Size != size {
			err = fmt.Errorf("it is filed under %d records", size)
		}
		if err != nil {
			problem("the checkpoint of %d records kept in the database: %v", size, err)
			continue
		}
		s.head = &anchor{c, "kept in the database", false}
	}
	switch {
	case len(s.extra) > 0 && (s.head == nil || s.extra[0].c.Size < s.head.c.Size):
		return &s.extra[0]
	case s.head != nil:
		return s.head
	}
	return nil
}

// next drops the checkpoint peek returned.
func (s *checkpointStream) next() {
	if len(s.extra) > 0 && (s.head == nil || s.extra[0].c.Size < s.head.c.Size) {
		s.extra = s.extra[1:]
		return
	}
	s.head = nil
}

func (s *checkpointStream) err() error { return s.rerr }

// seqOf is the seq of the record with chain hash h, or 0 (a full scan:
// it is asked only once a link is broken).
func (vr Verifier) seqOf(ctx context.Context, h string) int64 {
	var s int64
	_ = vr.db.r.QueryRowContext(ctx, `SELECT seq FROM records WHERE hash = ?`, h).Scan(&s)
	return s
}
