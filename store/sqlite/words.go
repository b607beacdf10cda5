package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"hash/maphash"
	"io"
	"math"
)

// The words of SQLite's text index: the index is contentless, so its words
// can be read only through fts5vocab, in term order, over the whole index.
// CheckWords sums a hash, keyed anew for each check, of every (word,
// call, column, position) the index holds into buckets by call, and the
// same of the words an index in memory makes of the records' text a batch
// of calls at a time, with the tokenizer the index was made with; memory
// does not grow with the log. Only when a bucket differs does a second
// pass over that bucket's calls name the call.

// WordsMismatch is the first call whose words in the text index are not
// those its records make.
type WordsMismatch struct {
	Key    int64  // the call index's key
	CallID string // the call's id; "" when no call has that key
}

// callTextDef is the text index's definition (SQLite migration 0009),
// which the index in memory is made with.
const callTextDef = `fts5 (arguments, result, content = '', columnsize = 0, tokenize = 'unicode61 remove_diacritics 2')`

// wordBuckets is how many buckets the words' hashes are summed into.
const wordBuckets = 4096

// wordSums sums the hashes of words into buckets by call, or, for one
// bucket, by call.
type wordSums struct {
	seed    maphash.Seed
	buckets [wordBuckets]uint64
	only    int              // with calls: the bucket whose calls are summed
	calls   map[int64]uint64 // nil: every bucket is summed
	buf     []byte
}

// bucketOf is the bucket of the call with key k.
func bucketOf(k int64) int {
	return int(uint64(k) * 0x9e3779b97f4a7c15 >> (64 - 12)) // wordBuckets = 1<<12
}

// add adds a word of the call with key k: the word, its column and its
// position in it.
func (s *wordSums) add(term, col string, k, pos int64) {
	b := bucketOf(k)
	if s.calls != nil && b != s.only {
		return
	}
	s.buf = append(append(append(s.buf[:0], term...), 0), col...)
	s.buf = binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(s.buf, uint64(k)), uint64(pos))
	h := maphash.Bytes(s.seed, s.buf)
	if s.calls != nil {
		s.calls[k] += h
		return
	}
	s.buckets[b] += h
}

// The SQLite side reads millions of rows: it reads them from the driver
// directly, which costs half of what database/sql's rows do per row.

// driverConn is what the reads need of a driver's connection.
type driverConn interface {
	driver.ConnPrepareContext
	driver.ExecerContext
}

// Stmt is a driver's prepared statement that takes a context.
type Stmt interface {
	driver.Stmt
	driver.StmtExecContext
	driver.StmtQueryContext
}

// Prepare prepares q on the driver's connection c.
func Prepare(ctx context.Context, c driver.ConnPrepareContext, q string) (Stmt, error) {
	st, err := c.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	ds, ok := st.(Stmt)
	if !ok {
		st.Close()
		return nil, errors.New("the driver's statements take no context")
	}
	return ds, nil
}

// rawQuery runs q on c and calls fn with each row, whose values are valid
// until fn returns.
func rawQuery(ctx context.Context, c driverConn, q string, fn func(row []driver.Value) error, args ...any) error {
	sq, err := Prepare(ctx, c, q)
	if err != nil {
		return err
	}
	defer sq.Close()
	named := make([]driver.NamedValue, len(args))
	for i, a := range args {
		named[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
	}
	rows, err := sq.QueryContext(ctx, named)
	if err != nil {
		return err
	}
	defer rows.Close()
	row := make([]driver.Value, len(rows.Columns()))
	for {
		err := rows.Next(row)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(row); err != nil {
			return err
		}
	}
}

// rawExec runs a statement on c.
func rawExec(ctx context.Context, c driverConn, q string, args ...driver.NamedValue) error {
	_, err := c.ExecContext(ctx, q, args)
	return err
}

// text is a text value a driver returned.
func text(v driver.Value) string {
	switch t := v.(type) {
	case string:
		return t
	case []byte:
		return string(t)
	}
	return ""
}

// addVocab adds every word the fts5vocab instance table vocab lists.
func (s *wordSums) addVocab(ctx context.Context, c driverConn, vocab string) error {
	return rawQuery(ctx, c, `SELECT term, doc, col, offset FROM `+vocab, func(row []driver.Value) error {
		k, _ := row[1].(int64)
		pos, _ := row[3].(int64)
		s.add(text(row[0]), text(row[2]), k, pos)
		return nil
	})
}

// wordReader reads the SQLite text index's words and makes those of the
// records, in one read transaction of the database.
type wordReader struct {
	db    driverConn // the database, in a read transaction
	mem   driverConn // the index in memory (words, and its vocabulary words_vocab)
	batch int        // how many calls' text the index in memory takes at a time
}

// check compares the words of every call, then, when a bucket differs,
// those of its calls one by one.
func (wr *wordReader) check(ctx context.Context) (*WordsMismatch, error) {
	seed := maphash.MakeSeed()
	have, want := &wordSums{seed: seed}, &wordSums{seed: seed}
	if err := have.addVocab(ctx, wr.db, "temp.call_words"); err != nil {
		return nil, err
	}
	if err := wr.recordWords(ctx, want); err != nil {
		return nil, err
	}
	b := 0
	for b < wordBuckets && have.buckets[b] == want.buckets[b] {
		b++
	}
	if b == wordBuckets {
		return nil, nil
	}
	have = &wordSums{seed: seed, only: b, calls: map[int64]uint64{}}
	want = &wordSums{seed: seed, only: b, calls: map[int64]uint64{}}
	if err := have.addVocab(ctx, wr.db, "temp.call_words"); err != nil {
		return nil, err
	}
	if err := wr.recordWords(ctx, want); err != nil {
		return nil, err
	}
	first := int64(math.MaxInt64)
	for k, h := range have.calls {
		if want.calls[k] != h {
			first = min(first, k)
		}
	}
	for k, h := range want.calls {
		if have.calls[k] != h {
			first = min(first, k)
		}
	}
	id := ""
	if err := rawQuery(ctx, wr.db, `SELECT call_id FROM call_index WHERE k = ?`, func(row []driver.Value) error {
		id = text(row[0])
		return nil
	}, first); err != nil {
		return nil, err
	}
	return &WordsMismatch{Key: first, CallID: id}, nil
}

// recordWords adds to s the words the text index would hold for every
// call (or, for s's bucket, for each of its calls): those an index made
// in memory the same way holds, a batch of calls at a time.
func (wr *wordReader) recordWords(ctx context.Context, s *wordSums) error {
	insert, err := Prepare(ctx, wr.mem, `INSERT INTO words (rowid, arguments, result) VALUES (?, ?, ?)`)
	if err != nil {
		return err
	}
	defer insert.Close()
	args := []driver.NamedValue{{Ordinal: 1}, {Ordinal: 2}, {Ordinal: 3}}
	// A batch is one transaction of the index in memory: FTS5 writes what
	// a transaction adds as one segment, which its vocabulary then reads
	// at once (a segment per call would cost more than all the rest).
	n := 0
	flush := func() error {
		if n == 0 {
			return nil
		}
		n = 0
		if err := rawExec(ctx, wr.mem, `COMMIT`); err != nil {
			return err
		}
		if err := s.addVocab(ctx, wr.mem, "words_vocab"); err != nil {
			return err
		}
		return rawExec(ctx, wr.mem, `INSERT INTO words (words) VALUES ('delete-all')`)
	}
	err = rawQuery(ctx, wr.db, `SELECT c.k, q.arguments, coalesce(o.result, '') FROM call_index c
		JOIN records q ON q.seq = c.req_seq LEFT JOIN records o ON o.seq = c.out_seq AND c.out_seq != 0 ORDER BY c.k`,
		func(row []driver.Value) error {
			k, _ := row[0].(int64)
			a, r := text(row[1]), text(row[2])
			if a == "" && r == "" || s.calls != nil && bucketOf(k) != s.only {
				return nil // no text, no row
			}
			if n == 0 {
				if err := rawExec(ctx, wr.mem, `BEGIN`); err != nil {
					return err
				}
			}
			args[0].Value, args[1].Value, args[2].Value = k, a, r
			if _, err := insert.ExecContext(ctx, args); err != nil {
				return err
			}
			if n++; n == wr.batch {
				return flush()
			}
			return nil
		})
	if err != nil {
		return err
	}
	return flush()
}

// CheckWords compares the words of the text index of the database at
// path with those its records make, and returns the first call (by key)
// whose words differ, nil when none does. batch is how many calls' text
// the index in memory takes at a time.
func CheckWords(ctx context.Context, path string, batch int) (m *WordsMismatch, err error) {
	// A connection of its own: its temporary schema takes the index's
	// vocabulary table, which the readers' (query_only) could not.
	f, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)&_pragma=temp_store(2)")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	conn, err := f.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	md, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		return nil, err
	}
	defer md.Close()
	mem, err := md.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer mem.Close()
	err = conn.Raw(func(dc any) error {
		return mem.Raw(func(mdc any) error {
			c, ok := dc.(driverConn)
			mc, mok := mdc.(driverConn)
			if !ok || !mok {
				return errors.New("the driver cannot prepare statements")
			}
			if err := rawExec(ctx, c, `CREATE VIRTUAL TABLE temp.call_words USING fts5vocab(main, call_text, instance)`); err != nil {
				return err
			}
			if err := rawExec(ctx, mc, `CREATE VIRTUAL TABLE words USING `+callTextDef); err != nil {
				return err
			}
			if err := rawExec(ctx, mc, `CREATE VIRTUAL TABLE words_vocab USING fts5vocab(words, instance)`); err != nil {
				return err
			}
			if err := rawExec(ctx, c, `BEGIN`); err != nil {
				return err
			}
			defer rawExec(ctx, c, `ROLLBACK`) //nolint:errcheck // it only read
			m, err = (&wordReader{db: c, mem: mc, batch: batch}).check(ctx)
			return err
		})
	})
	return m, err
}
