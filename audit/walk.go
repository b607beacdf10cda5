package audit

import (
	"context"
	"errors"
	"fmt"
	"io"

	guard "github.com/guard-mcp/guard"
	"golang.org/x/mod/sumdb/tlog"
)

// A verification walks the log in order, recomputing every record's hash
// and link and its leaf in the Merkle tree, and the whole tree from the
// leaves, comparing every stored tree hash; it checks every checkpoint the
// log keeps and those it is given (the root of the tree at its size: two
// successive checkpoints are then consistent), the records' MACs after
// the last checkpoint, and that retention pruned only what a signed
// retention record names: reading each of the log's parts once, in order,
// with memory that does not grow with the log.

// Log is what a verification walks: the records of one log, its stored
// tree hashes and the checkpoints it keeps, each in order, all as of one
// moment (a commit between them would read as a truncation).
type Log interface {
	// NextRecord returns the next record by seq and its MAC (nil: it
	// has none); io.EOF after the last.
	NextRecord() (r *guard.Record, mac []byte, err error)
	// NextTreeHash returns the next stored tree hash by its
	// tlog.StoredHashIndex; io.EOF after the last.
	NextTreeHash() (idx int64, hash []byte, err error)
	// NextCheckpoint returns the next checkpoint the log keeps by size,
	// with the size it is filed under; io.EOF after the last.
	NextCheckpoint() (size int64, note []byte, err error)
	// SeqOf is the seq of the record with chain hash h, or 0 (it is
	// asked only once a link is broken).
	SeqOf(ctx context.Context, h string) int64
}

// LifecycleMACs is the event of the lifecycle record from which on every
// record carries a MAC: its reason says "MACs from seq N", N its own seq.
const LifecycleMACs = "macs"

// Anchor is a checkpoint the log is checked against while it is walked.
type Anchor struct {
	C     *Checkpoint
	Where string // where it comes from, for people
	Kept  bool   // from outside guard's files, its signature checked
}

// Walk is one verification's walk of a log, with what it checks besides
// the chain and the tree.
type Walk struct {
	// Checkpoints reads the checkpoints the log keeps.
	Checkpoints Checkpoints
	// Extra are the other checkpoints to check the log against, by size.
	Extra []Anchor
	// Retention checks the pruned records.
	Retention *RetentionCheck
	// MACs checks the records' MACs.
	MACs *MACWalk

	// Checked is how many checkpoints the walk matched; SeenCheckpoint
	// that the log keeps one.
	Checked        int
	SeenCheckpoint bool

	endedAt int64 // the record before whose leaf the stored tree ended
}

// Run walks log, adding what it finds to rep (its records, its pruned
// records, whether it was witnessed). An error is one of reading the
// log: the walk stops there.
func (wk *Walk) Run(ctx context.Context, log Log, rep *Report) error {
	cps := &checkpointStream{log: log, cs: wk.Checkpoints, extra: wk.Extra}
	macs := wk.MACs
	edge := &Edge{}
	var buf []byte
	var prev *guard.Record
	// Checkpoints of size 0 hold nothing to check.
	for cps.peek(rep.Fail) != nil && cps.peek(rep.Fail).C.Size == 0 {
		cps.next()
	}
	for {
		r, mac, err := log.NextRecord()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
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
			h, buf = HashInto(buf, r)
		}
		switch {
		case r.Pruned && HasBody(r):
			rep.Fail("record %d (id %s) was altered: it is marked as pruned but its row holds a body", r.Seq, r.ID)
		case !r.Pruned && h != r.Hash:
			rep.Fail("record %d (id %s) was altered: its contents do not match its hash", r.Seq, r.ID)
		case r.Seq != wantSeq:
			rep.Fail("records %d to %d were removed: record %d (id %s) follows record %d", wantSeq, r.Seq-1, r.Seq, r.ID, wantSeq-1)
		case r.PrevHash != prevHash:
			if s := log.SeqOf(ctx, r.PrevHash); r.PrevHash != "" && s > 0 {
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
		if p := wk.Retention.Record(ctx, r); p != "" {
			rep.Fail("%s", p)
			continue
		}
		var leaf *tlog.Hash
		if !r.Pruned {
			l := LeafHash(buf)
			leaf = &l
		}
		if macs.treeless {
			continue
		}
		if p := wk.checkLeaf(log, edge, r.Seq, leaf); p != "" {
			if wk.endedAt == r.Seq && cps.peek(rep.Fail) == nil {
				// The tree stops after the last checkpoint, as guard
				// stops it before a record whose MAC fails: the
				// records from there on are in no tree yet.
				macs.treeless = true
				continue
			}
			rep.Fail("%s", p)
			continue
		}
		for a := cps.peek(rep.Fail); a != nil && a.C.Size == edge.Size() && rep.Problem == ""; a = cps.peek(rep.Fail) {
			root, err := edge.Root()
			if err != nil {
				return err
			}
			if root != a.C.Root {
				rep.Fail("the checkpoint of %d records %s does not match the log: records up to %d were changed, removed or replaced", a.C.Size, a.Where, a.C.Size)
			}
			macs.checkpointed(a.C.Size)
			if a.Kept {
				rep.Witnessed = true
				rep.Extends = max(rep.Extends, a.C.Size)
			}
			wk.Checked++
			cps.next()
		}
	}
	if rep.Problem == "" {
		if idx, _, err := log.NextTreeHash(); err == nil {
			level, n := tlog.SplitStoredHashIndex(idx)
			rep.Fail("the log was truncated: the tree has a hash (level %d, node %d) beyond its %d records", level, n, rep.Records)
		}
	}
	if a := cps.peek(rep.Fail); a != nil && rep.Problem == "" {
		rep.Fail("the log was truncated: the checkpoint of %d records %s is ahead of the log's %d", a.C.Size, a.Where, rep.Records)
	}
	wk.SeenCheckpoint = cps.seen
	return cps.rerr
}

// checkLeaf adds record seq's leaf to the tree rebuilt from the records
// and compares the hashes it adds with the stored ones; it returns a
// problem, or "". A nil leaf is a pruned record's: the stored one is
// taken, and only the hashes it completes are compared.
func (wk *Walk) checkLeaf(log Log, edge *Edge, seq int64, leaf *tlog.Hash) string {
	first := tlog.StoredHashIndex(0, edge.Size())
	next := func(j int) ([]byte, string) {
		idx, got, err := log.NextTreeHash()
		if errors.Is(err, io.EOF) {
			if j == 0 {
				wk.endedAt = seq
			}
			return nil, fmt.Sprintf("the tree ends before record %d: its hashes from record %d on were removed", seq, seq)
		}
		if err != nil {
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

// checkpointStream merges the checkpoints the log keeps (in size order,
// each read by cs as it is read) with the others, by size.
type checkpointStream struct {
	log   Log
	cs    Checkpoints
	extra []Anchor
	head  *Anchor
	done  bool
	seen  bool // the log keeps a checkpoint
	rerr  error
}

// peek returns the next checkpoint by size, or nil.
func (s *checkpointStream) peek(problem func(string, ...any)) *Anchor {
	for s.head == nil && !s.done {
		size, text, err := s.log.NextCheckpoint()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				s.rerr = err
			}
			s.done = true
			break
		}
		s.seen = true
		c, err := s.cs.Open(text)
		if err == nil && c.Size != size {
			err = fmt.Errorf("it is filed under %d records", size)
		}
		if err != nil {
			problem("the checkpoint of %d records kept in the database: %v", size, err)
			continue
		}
		s.head = &Anchor{c, "kept in the database", false}
	}
	switch {
	case len(s.extra) > 0 && (s.head == nil || s.extra[0].C.Size < s.head.C.Size):
		return &s.extra[0]
	case s.head != nil:
		return s.head
	}
	return nil
}

// next drops the checkpoint peek returned.
func (s *checkpointStream) next() {
	if len(s.extra) > 0 && (s.head == nil || s.extra[0].C.Size < s.head.C.Size) {
		s.extra = s.extra[1:]
		return
	}
	s.head = nil
}

// MACWalk follows a verification's walk of the log: the records after
// the latest checkpoint, from where MACs start on, have their MACs checked
// when the verifier holds the MAC key; the records after the last
// checkpoint the walk matched that it could not check are the
// unauthenticated tail. Anyone who can write the log may have written
// them.
type MACWalk struct {
	m        *MACer // nil: the verifier holds only the public key
	from     int64  // where MACs start (0: not known yet)
	tail     int64  // the size of the latest checkpoint signed by the key verify trusts
	covered  int64  // the size of the last checkpoint matched
	unauth   int64  // records after covered whose MAC was not checked
	disabled bool   // the log has no MACs: a schema before them
	treeless bool   // the stored tree ended after the last checkpoint
}

// NewMACWalk prepares the MAC checks: m checks MACs (nil: the verifier
// holds only the public key), disabled says the log keeps no MACs, and
// signed are the checkpoints signed by the key the verification trusts,
// which say where MACs start; the largest says where the tail begins.
func NewMACWalk(m *MACer, disabled bool, signed []*Checkpoint) *MACWalk {
	w := &MACWalk{m: m, disabled: disabled}
	for _, c := range signed {
		w.tail = max(w.tail, c.Size)
		if c.MACsFrom > 0 && (w.from == 0 || c.MACsFrom < w.from) {
			w.from = c.MACsFrom
		}
	}
	return w
}

// record checks one record, whose hash and link the walk checked; it
// returns a problem, or "".
func (w *MACWalk) record(r *guard.Record, mac []byte) string {
	if w.from == 0 && r.Kind == guard.KindLifecycle && r.Decision == LifecycleMACs {
		w.from = r.Seq
	}
	if r.Seq <= w.tail {
		return "" // the latest checkpoint's signature covers it
	}
	if w.m == nil || w.from == 0 || r.Seq < w.from {
		w.unauth++
		return ""
	}
	if w.disabled || len(mac) == 0 {
		return fmt.Sprintf("record %d (id %s) carries no MAC: MACs start at record %d, so it was not written by guard (which holds the checkpoint key)", r.Seq, r.ID, w.from)
	}
	if !w.m.Valid(r.Seq, r.Hash, mac) {
		return fmt.Sprintf("record %d (id %s) carries a MAC that does not verify: it was not written by guard (which holds the checkpoint key), or its MAC was changed", r.Seq, r.ID)
	}
	return ""
}

// Authenticated is how far the walk of records records authenticated
// them: up to the end, or to the last checkpoint when the tail after it
// holds records whose MACs it could not check.
func (w *MACWalk) Authenticated(records int64) int64 {
	if w.unauth > 0 {
		return w.covered
	}
	return records
}

// Unauthenticated is how many records after the last checkpoint the walk
// matched (of after records) no signature and no MAC authenticated.
func (w *MACWalk) Unauthenticated() (n, after int64) { return w.unauth, w.covered }

// checkpointed notes that the walk matched a checkpoint of size records.
func (w *MACWalk) checkpointed(size int64) {
	w.covered, w.unauth = size, 0
}
