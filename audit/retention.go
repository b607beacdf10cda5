package audit

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"slices"
	"strconv"

	guard "github.com/guard-mcp/guard"
	"golang.org/x/mod/sumdb/note"
)

// Retention moves the bodies of old records to archives and blanks them
// in the log, in runs each named by a retention record (of kind
// guard.KindRetention) that the checkpoint key signs: what a pruned
// record keeps (KeptLine) is hashed into it, so that a verification
// checks every pruned record against the retention record that names it.

// KeptLine appends the line a retention record's kept_sha256 covers for
// one record it names: what its row keeps once its body is gone, which
// its hash no longer covers in the database.
func KeptLine(b []byte, r *guard.Record) []byte {
	b = strconv.AppendInt(append(b, '['), r.Seq, 10)
	for _, s := range []string{r.ID, r.CallID, r.Kind, FormatTime(r.Time), r.Hash} {
		b = AppendString(append(b, ','), s)
	}
	return append(b, ']', '\n')
}

// Spans are the runs of consecutive seqs in seqs (sorted).
func Spans(seqs []int64) [][2]int64 {
	var out [][2]int64
	for _, s := range seqs {
		if n := len(out); n > 0 && out[n-1][1] == s-1 {
			out[n-1][1] = s
			continue
		}
		out = append(out, [2]int64{s, s})
	}
	return out
}

// RetentionDetail is the detail of a retention record.
type RetentionDetail struct {
	First      int64      `json:"first"`
	Last       int64      `json:"last"`
	Count      int64      `json:"count"`
	Records    [][2]int64 `json:"records"`     // the runs of records named, first and last seq
	KeptSHA256 string     `json:"kept_sha256"` // of their KeptLine, in seq order
	Archive    string     `json:"archive"`
	SHA256     string     `json:"sha256"`
	Checkpoint int64      `json:"checkpoint"`
	Before     string     `json:"before"`
	Retention  string     `json:"retention"`
	// Signature is a signed note, by the checkpoint key, of Statement.
	Signature string `json:"signature"`
}

// retentionStatementHeader opens the text a retention record's signature
// covers.
const retentionStatementHeader = "guard audit retention v1\n"

// Statement is the text the checkpoint key signs for a retention record
// of the log named origin: every field that says what was pruned.
func (d *RetentionDetail) Statement(origin string) string {
	b := []byte(retentionStatementHeader + origin + "\n")
	b = fmt.Appendf(b, "first %d\nlast %d\ncount %d\nrecords", d.First, d.Last, d.Count)
	for _, sp := range d.Records {
		b = fmt.Appendf(b, " %d-%d", sp[0], sp[1])
	}
	b = fmt.Appendf(b, "\nkept_sha256 %s\narchive %s\nsha256 %s\ncheckpoint %d\nbefore %s\n",
		d.KeptSHA256, d.Archive, d.SHA256, d.Checkpoint, d.Before)
	return string(b)
}

// Sign sets the detail's signature: its statement, signed by the
// checkpoint key.
func (d *RetentionDetail) Sign(s *Signer) error {
	sig, err := note.Sign(&note.Note{Text: d.Statement(s.verifier.Name())}, s.note)
	if err != nil {
		return err
	}
	d.Signature = string(sig)
	return nil
}

// SignedBy reports whether the record's signature is a note of its
// statement signed by v.
func (d *RetentionDetail) SignedBy(v note.Verifier) bool {
	if v == nil || d.Signature == "" {
		return false
	}
	n, err := note.Open([]byte(d.Signature), note.VerifierList(v))
	return err == nil && n.Text == d.Statement(v.Name())
}

// RetentionRecord is a retention record as a verification reads it.
type RetentionRecord struct {
	Seq    int64
	Detail string
}

// retentionRun is a retention record as Verify checks it.
type retentionRun struct {
	seq  int64
	d    RetentionDetail
	h    hash.Hash // over the KeptLine of each record it names, as the walk meets them
	n    int64
	late bool // read once the walk had passed records it names: they were not hashed
	// signed: its detail is signed by the key Verify trusts; only such a
	// record accounts for a pruned record.
	signed bool
}

// retentionSpan is a run of records a retention record names.
type retentionSpan struct {
	first, last int64
	run         *retentionRun
}

// RetentionCheck follows a verification's walk of the log: every pruned
// record must be named by a retention record after it, and the rows of
// the records each one names must still be those it hashed (kept_sha256).
type RetentionCheck struct {
	v      note.Verifier // the key the retention records must be signed by; nil: none at hand
	load   func(ctx context.Context, after int64) ([]RetentionRecord, error)
	runs   map[int64]*retentionRun // by the retention record's seq
	spans  []retentionSpan         // not yet reached, by first
	active []retentionSpan         // reached, not yet passed
	read   int64                   // the last retention record read
	at     int64                   // the walk's record
	buf    []byte
}

// NewRetentionCheck reads the retention records with load (those after
// the seq it is given, in order; nil: a log without retention), and
// reads those appended since when the walk meets a pruned record none of
// them names.
func NewRetentionCheck(ctx context.Context, v note.Verifier, load func(ctx context.Context, after int64) ([]RetentionRecord, error)) (*RetentionCheck, error) {
	c := &RetentionCheck{v: v, load: load, runs: map[int64]*retentionRun{}}
	if load == nil {
		return c, nil
	}
	return c, c.loadMore(ctx)
}

// loadMore reads the retention records after those read before.
func (c *RetentionCheck) loadMore(ctx context.Context) error {
	if c.load == nil {
		return nil
	}
	recs, err := c.load(ctx, c.read)
	for _, rec := range recs {
		run := &retentionRun{seq: rec.Seq, h: sha256.New()}
		c.read = run.seq
		if json.Unmarshal([]byte(rec.Detail), &run.d) != nil {
			continue // Verify finds it altered, or pruned
		}
		// Without a key of this log no signature is checked (the
		// verification says it could not be): the rest still is.
		run.signed = c.v == nil || run.d.SignedBy(c.v)
		c.runs[run.seq] = run
		for _, s := range run.d.Records {
			sp := retentionSpan{s[0], s[1], run}
			switch {
			case s[1] < c.at:
				run.late = true
			case s[0] <= c.at:
				run.late = run.late || s[0] < c.at
				c.active = append(c.active, sp)
			default:
				c.spans = append(c.spans, sp)
			}
		}
	}
	slices.SortFunc(c.spans, func(a, b retentionSpan) int { return cmp.Compare(a.first, b.first) })
	return err
}

// Record checks the walk's next record, returning a problem or "".
func (c *RetentionCheck) Record(ctx context.Context, r *guard.Record) string {
	c.at = r.Seq
	for len(c.spans) > 0 && c.spans[0].first <= r.Seq {
		c.active = append(c.active, c.spans[0])
		c.spans = c.spans[1:]
	}
	c.active = slices.DeleteFunc(c.active, func(s retentionSpan) bool { return s.last < r.Seq })
	if r.Pruned && !c.signedActive(r) {
		// A retention record appended since the walk began names it?
		if err := c.loadMore(ctx); err != nil {
			return err.Error()
		}
		c.active = slices.DeleteFunc(c.active, func(s retentionSpan) bool { return s.last < r.Seq || s.first > r.Seq })
		switch {
		case len(c.active) == 0:
			return fmt.Sprintf("record %d (id %s) lost its body, but no retention record names it: it was removed outside retention", r.Seq, r.ID)
		case !slices.ContainsFunc(c.active, func(s retentionSpan) bool { return s.run.signed }):
			return fmt.Sprintf("record %d (id %s) lost its body, but no retention record signed by the checkpoint key (%s) names it: it was removed outside retention, and a retention record forged",
				r.Seq, r.ID, c.keyName())
		case !c.signedActive(r):
			return fmt.Sprintf("record %d (id %s) lost its body, but it was not past the retention of the retention record that names it, or not in its checkpoint",
				r.Seq, r.ID)
		}
	}
	for _, s := range c.active {
		if s.run.seq < r.Seq {
			return fmt.Sprintf("retention record %d names record %d, which comes after it: it was altered", s.run.seq, r.Seq)
		}
		c.buf = KeptLine(c.buf[:0], r)
		s.run.h.Write(c.buf)
		s.run.n++
	}
	run := c.runs[r.Seq]
	if run == nil || r.Kind != guard.KindRetention || run.late {
		return ""
	}
	if run.n != run.d.Count || hex.EncodeToString(run.h.Sum(nil)) != run.d.KeptSHA256 {
		return fmt.Sprintf("the records retention record %d (id %s) names, %d to %d, were changed since it archived them: their ids, calls, kinds, times or hashes are not those it hashed",
			r.Seq, r.ID, run.d.First, run.d.Last)
	}
	return ""
}

// signedActive reports whether a signed retention record names the walk's
// record r, which was in its checkpoint and older than its cutoff.
func (c *RetentionCheck) signedActive(r *guard.Record) bool {
	at := FormatTime(r.Time)
	return slices.ContainsFunc(c.active, func(s retentionSpan) bool {
		return s.run.signed && r.Seq <= s.run.d.Checkpoint && at < s.run.d.Before
	})
}

// keyName names the key the retention records must be signed by.
func (c *RetentionCheck) keyName() string {
	if c.v == nil {
		return "none: there is no key"
	}
	return c.v.Name()
}
