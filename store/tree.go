package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"

	"golang.org/x/mod/sumdb/tlog"
)

// The records form the leaves of a Merkle tree (package audit: Edge,
// Tree); its stored hashes are kept in tree_hashes by their
// tlog.StoredHashIndex, inserted in the transaction that inserts their
// records.

// errTreeAhead is returned when the tree has more leaves than the log has
// records: records were removed from the end of the log.
var errTreeAhead = errors.New("the audit tree has more leaves than the log has records: records were removed from its end")

// sqlQueryer is what the tree reads through with database/sql: a
// connection, a transaction or a pool.
type sqlQueryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// treeSize is the number of leaves of the stored tree.
func treeSize(ctx context.Context, q sqlQueryer) (int64, error) {
	var m sql.NullInt64
	if err := q.QueryRowContext(ctx, `SELECT max(idx) FROM tree_hashes`).Scan(&m); err != nil {
		return 0, fmt.Errorf("tree size: %w", err)
	}
	if !m.Valid {
		return 0, nil
	}
	return audit.TreeSize(m.Int64), nil
}

// sqlHashReader reads stored hashes through database/sql.
func sqlHashReader(ctx context.Context, q sqlQueryer) tlog.HashReaderFunc {
	return func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		for i, x := range idx {
			var b []byte
			if err := q.QueryRowContext(ctx, `SELECT hash FROM tree_hashes WHERE idx = ?`, x).Scan(&b); err != nil {
				if errors.Is(err, sql.ErrNoRows) {
					return nil, fmt.Errorf("tree hash %d is missing", x)
				}
				return nil, fmt.Errorf("tree hash %d: %w", x, err)
			}
			if len(b) != tlog.HashSize {
				return nil, fmt.Errorf("tree hash %d has %d bytes", x, len(b))
			}
			copy(out[i][:], b)
		}
		return out, nil
	}
}

// insertTreeHash stores one of the tree's hashes.
const insertTreeHash = `INSERT INTO tree_hashes (idx, hash) VALUES (?, ?)`

// treeRows is how many tree hashes one statement inserts: a batch's
// hashes are inserted that many at a time, which costs less than a
// statement each.
const treeRows = 32

// insertTreeHashes inserts treeRows tree hashes.
var insertTreeHashes = `INSERT INTO tree_hashes (idx, hash) VALUES (?, ?)` + strings.Repeat(`, (?, ?)`, treeRows-1)

// flushTree inserts the tree hashes the transaction's leaves added.
func (wc *writerConn) flushTree(ctx context.Context) error {
	hs := wc.tree.Hashes
	idx := wc.tree.First
	defer func() {
		for i := range wc.manyArgs {
			wc.manyArgs[i].Value = nil // the hashes are not kept
		}
		wc.tree.Written()
	}()
	for len(hs) > 0 {
		st, args, n := wc.insTree, wc.treeArgs[:], 1
		if len(hs) >= treeRows {
			st, args, n = wc.insTrees, wc.manyArgs[:], treeRows
		}
		for j := range n {
			args[2*j].Value = idx + int64(j)
			args[2*j+1].Value = hs[j][:]
		}
		if _, err := st.ExecContext(ctx, args); err != nil {
			return fmt.Errorf("insert tree hash: %w", err)
		}
		hs, idx = hs[n:], idx+int64(n)
	}
	wc.treeArgs[1].Value = nil
	return nil
}

// queryRow runs a driver statement that returns at most one row into dest;
// it reports whether there was one.
func queryRow(ctx context.Context, st driverStmt, args []driver.NamedValue, dest []driver.Value) (bool, error) {
	rows, err := st.QueryContext(ctx, args)
	if err != nil {
		return false, err
	}
	err = rows.Next(dest)
	cerr := rows.Close()
	if errors.Is(err, io.EOF) {
		return false, cerr
	}
	return err == nil, errors.Join(err, cerr)
}

// loadTree reads the tree's right edge inside the writer's transaction,
// for a log of seq records. A tree behind the records (records that a
// version of guard without the tree appended) is completed from them
// first.
func (wc *writerConn) loadTree(ctx context.Context, seq int64) (*audit.Edge, error) {
	row := make([]driver.Value, 1)
	if _, err := queryRow(ctx, wc.treeMax, nil, row); err != nil {
		return nil, fmt.Errorf("tree size: %w", err)
	}
	var size int64
	if m, ok := row[0].(int64); ok {
		size = audit.TreeSize(m)
	}
	if size > seq {
		return nil, fmt.Errorf("%w (%d leaves, %d records)", errTreeAhead, size, seq)
	}
	edge, err := audit.LoadEdge(size, func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		for i, x := range idx {
			ok, err := queryRow(ctx, wc.getTree, []driver.NamedValue{{Ordinal: 1, Value: x}}, row)
			if err != nil {
				return nil, err
			}
			b, _ := row[0].([]byte)
			if !ok || len(b) != tlog.HashSize {
				return nil, fmt.Errorf("tree hash %d is missing or malformed", x)
			}
			copy(out[i][:], b)
		}
		return out, nil
	})
	if err != nil || size == seq {
		return edge, err
	}
	return edge, wc.completeTree(ctx, edge, seq)
}

// completeTree adds the leaves of records edge.Size()+1 to seq, reading them
// from the table a chunk at a time. It stops before a record from MACs'
// start on that does not carry a valid MAC (or does not match its hash),
// which it alerts: the tree is then left shorter than the log, and no
// checkpoint covers that record.
func (wc *writerConn) completeTree(ctx context.Context, edge *audit.Edge, seq int64) error {
	t := &wc.tree
	t.Edge = edge
	from, err := wc.macsFrom(ctx)
	if err != nil {
		return fmt.Errorf("tree: %w", err)
	}
	for edge.Size() < seq {
		recs, macs, err := wc.recordsAfter(ctx, edge.Size(), min(seq-edge.Size(), treeChunk))
		if err != nil {
			return fmt.Errorf("tree: %w", err)
		}
		for i, r := range recs {
			if r.Seq != edge.Size()+1 {
				return fmt.Errorf("tree: record %d is missing", edge.Size()+1)
			}
			wc.buf = audit.AppendCanonical(wc.buf[:0], r)
			if from > 0 && r.Seq >= from {
				if why := wc.mac.Check(r, wc.buf, macs[i]); why != "" {
					wc.auth.alert(r.Seq, r.ID, why)
					return nil
				}
			}
			if _, err := t.Add(wc.buf); err != nil {
				return err
			}
			if len(t.Hashes) >= 4*treeRows {
				if err := wc.flushTree(ctx); err != nil {
					return err
				}
			}
		}
		if len(recs) == 0 {
			return fmt.Errorf("tree: record %d is missing", edge.Size()+1)
		}
	}
	return nil
}

// treeChunk is how many records completeTree reads at a time.
const treeChunk = 4096

// recordsAfter reads up to n records after seq from the table, with
// their MACs. They are read before their hashes are inserted: the
// statement's rows are closed before the connection writes.
func (wc *writerConn) recordsAfter(ctx context.Context, seq, n int64) ([]*guard.Record, [][]byte, error) {
	rows, err := wc.recsFrom.QueryContext(ctx, []driver.NamedValue{{Ordinal: 1, Value: seq}, {Ordinal: 2, Value: n}})
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	row := make([]driver.Value, len(rows.Columns()))
	var recs []*guard.Record
	var macs [][]byte
	for {
		err := rows.Next(row)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		if len(row) != 31 {
			return nil, nil, fmt.Errorf("a record row has %d columns", len(row))
		}
		r, err := recordFromValues(row[:30])
		if err != nil {
			return nil, nil, err
		}
		mac, _ := row[30].([]byte)
		recs = append(recs, r)
		macs = append(macs, slices.Clone(mac))
	}
	return recs, macs, rows.Close()
}

// macsFrom is where MACs start (tailAuth.macsFrom) read inside the
// writer's transaction.
func (wc *writerConn) macsFrom(ctx context.Context) (int64, error) {
	if s := wc.auth.from.Load(); s > 0 {
		return s, nil
	}
	row := make([]driver.Value, 1)
	ok, err := queryRow(ctx, wc.macs, nil, row)
	if err != nil {
		return 0, fmt.Errorf("where MACs start: %w", err)
	}
	s, _ := row[0].(int64)
	if !ok || s <= 0 {
		return 0, nil
	}
	wc.auth.from.CompareAndSwap(0, s)
	return s, nil
}

// recordFromValues is a row of selectRecord as the driver returns it.
func recordFromValues(v []driver.Value) (*guard.Record, error) {
	if len(v) != 30 {
		return nil, fmt.Errorf("a record row has %d columns", len(v))
	}
	str := func(i int) string {
		switch x := v[i].(type) {
		case string:
			return x
		case []byte:
			return string(x)
		}
		return ""
	}
	num := func(i int) int64 { n, _ := v[i].(int64); return n }
	r := &guard.Record{Seq: num(0), ID: str(1), CallID: str(2), Kind: str(3), Time: parseTime(str(4)),
		Session: str(5), Client: str(6), Protocol: str(7), Server: str(8), Direction: str(9), Method: str(10),
		Tool: str(11), Arguments: str(12), Pin: str(13), Decision: str(14), DecidedBy: str(15), Reason: str(16),
		Outcome: str(17), Result: str(18), RequestSize: num(19), ResponseSize: num(20), DurationMS: num(21),
		Detail: str(22), Approval: str(23), PrevHash: str(24), Hash: str(25), Pruned: num(26) != 0,
		User: str(27), UserEmail: str(28), UserGroups: audit.ParseGroups(str(29))}
	return r, nil
}
