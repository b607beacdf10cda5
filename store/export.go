package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
	"golang.org/x/mod/sumdb/tlog"
)

// An export's format is audit's (audit.ExportColumns, audit.ExportWriter):
// store reads the records it holds.

// ExportOptions select what Export writes.
type ExportOptions struct {
	Format       string // jsonl (default) or csv
	Since, Until time.Time
}

// Export writes the records covered by the latest checkpoint (those of
// o's time range) with that checkpoint, and, unless it is the whole log,
// each record's inclusion proof.
func (rd Reader) Export(ctx context.Context, w io.Writer, o ExportOptions) error {
	if o.Format == "" {
		o.Format = "jsonl"
	}
	if o.Format != "jsonl" && o.Format != "csv" {
		return fmt.Errorf("export: format %q: want jsonl or csv", o.Format)
	}
	c, err := rd.db.LatestCheckpoint(ctx)
	if errors.Is(err, ErrNoCheckpoint) {
		// Nothing signs the log yet: every record is after the
		// checkpoint, which is empty (docs/audit-formats.md).
		c = &audit.Checkpoint{}
	} else if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	complete := o.Since.IsZero() && o.Until.IsZero()
	run, args := "", []any{c.Size}
	if !complete {
		// A part is a run of records without a gap, from the first of
		// the period to its last (records of several processes
		// interleave, so a few from just outside it may be among
		// them): a record taken out of it later shows as missing.
		window, wargs := `time >= ? AND time <= ?`, []any{fmtTime(o.Since), "9999"}
		if !o.Until.IsZero() {
			wargs[1] = fmtTime(o.Until)
		}
		run = ` AND seq >= (SELECT min(seq) FROM records WHERE ` + window + `) AND seq <= (SELECT max(seq) FROM records WHERE ` + window + `)`
		args = append(args, wargs...)
		args = append(args, wargs...)
	}
	q := rd.db.schema.selectRecords() + ` WHERE seq <= ?` + run + ` ORDER BY seq`
	if err := rd.exportRecords(ctx, w, o.Format, c, complete, q, args, nil); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	q = rd.db.schema.selectRecords() + ` WHERE seq > ?` + run + ` ORDER BY seq`
	if err := rd.exportPending(ctx, w, o, q, args); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	return nil
}

// exportPending writes, after the records the export's checkpoint covers,
// the records of the chain after it that query q selects, and the
// acknowledged records of o's period still in journals of guard processes
// that stopped, each marked in its pending field.
func (rd Reader) exportPending(ctx context.Context, w io.Writer, o ExportOptions, q string, args []any) error {
	ew, err := audit.NewExportWriter(w, o.Format, nil, false)
	if err != nil {
		return err
	}
	var buf []byte
	rows, err := rd.db.r.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return err
		}
		// Retention prunes only records a checkpoint covers: these have
		// their bodies.
		buf = audit.AppendCanonical(buf[:0], r)
		if err := ew.Write(audit.PendingRow(r, audit.LeafHash(buf), audit.PendingCheckpoint)); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	recs, err := rd.db.journals().unchainedRecords(ctx)
	if err != nil {
		return err
	}
	for _, r := range recs {
		if !o.Since.IsZero() && r.Time.Before(o.Since) || !o.Until.IsZero() && r.Time.After(o.Until) {
			continue
		}
		if err := ew.Write(audit.PendingRow(r, tlog.Hash{}, audit.PendingJournal)); err != nil {
			return err
		}
	}
	return ew.Close()
}

// exportRecords writes the records query q selects (in seq order; those
// keep accepts, when it is set) in an export of the format against the
// checkpoint c, with each record's proof unless complete. A pruned
// record's leaf hash is the tree's: its body is no longer there to hash.
func (rd Reader) exportRecords(ctx context.Context, w io.Writer, format string, c *audit.Checkpoint, complete bool,
	q string, args []any, keep func(seq int64) bool) error {
	rows, err := rd.db.r.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	ew, err := audit.NewExportWriter(w, format, c, complete)
	if err != nil {
		return err
	}
	hr := audit.CachedHashes(sqlHashReader(ctx, rd.db.r))
	var buf []byte
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return err
		}
		if keep != nil && !keep(r.Seq) {
			continue
		}
		var leaf tlog.Hash
		if r.Pruned {
			hs, err := hr.ReadHashes([]int64{audit.LeafIndex(r.Seq)})
			if err != nil {
				return fmt.Errorf("record %d: %w", r.Seq, err)
			}
			leaf = hs[0]
		} else {
			buf = audit.AppendCanonical(buf[:0], r)
			leaf = audit.LeafHash(buf)
		}
		var proof tlog.RecordProof
		if !complete {
			if proof, err = tlog.ProveRecord(c.Size, r.Seq-1, hr); err != nil {
				return fmt.Errorf("record %d: %w", r.Seq, err)
			}
		}
		if err := ew.Write(audit.ExportRow(r, leaf, proof)); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return ew.Close()
}

// Prove returns the proof text (docs/tree.md) of the records with
// the given id or call id against the latest checkpoint.
func (vr Verifier) Prove(ctx context.Context, id string) ([]byte, error) {
	c, err := vr.db.LatestCheckpoint(ctx)
	if err != nil {
		return nil, fmt.Errorf("prove: %w", err)
	}
	rows, err := vr.db.r.QueryContext(ctx, `SELECT seq, id FROM records WHERE id = ? OR call_id = ? ORDER BY seq`, id, id)
	if err != nil {
		return nil, fmt.Errorf("prove: %w", err)
	}
	type found struct {
		seq int64
		id  string
	}
	var recs []found
	for rows.Next() {
		var f found
		if err := rows.Scan(&f.seq, &f.id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("prove: %w", err)
		}
		recs = append(recs, f)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("prove: %w", err)
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("prove: %w: no record or call has the id %q", guard.ErrNotFound, id)
	}
	hr := sqlHashReader(ctx, vr.db.r)
	proved := make([]audit.Proved, 0, len(recs))
	for _, f := range recs {
		if f.seq > c.Size {
			return nil, fmt.Errorf("prove: record %d (id %s) is not yet in a checkpoint (the latest covers %d records): try again once one is written", f.seq, f.id, c.Size)
		}
		hs, err := hr.ReadHashes([]int64{audit.LeafIndex(f.seq)})
		if err != nil {
			return nil, fmt.Errorf("prove: %w", err)
		}
		p, err := tlog.ProveRecord(c.Size, f.seq-1, hr)
		if err != nil {
			return nil, fmt.Errorf("prove: %w", err)
		}
		proved = append(proved, audit.Proved{Seq: f.seq, ID: f.id, Leaf: hs[0], Proof: p})
	}
	return audit.AppendProof(nil, proved, c), nil
}
