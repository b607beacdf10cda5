package audit

import (
	"context"
	"crypto/sha256"
	"fmt"

	guard "github.com/guard-mcp/guard"

	"golang.org/x/mod/sumdb/tlog"
)

// MACsStartText is the reason and the detail of the LifecycleMACs record
// at seq: from it on, every record carries a MAC.
func MACsStartText(seq int64) (reason, detail string) {
	return fmt.Sprintf("MACs from seq %d: this record and every one after it carry a MAC under a key derived from the checkpoint key", seq),
		fmt.Sprintf(`{"macs_from":%d}`, seq)
}

// Tree is the Merkle tree's right edge as a writer holds it, with the
// stored hashes its new leaves added that are still to be written.
type Tree struct {
	// Edge is the tree's right edge; nil when it must be read again.
	Edge *Edge
	// Hashes are the stored hashes to write, from stored index First on
	// (their indexes follow one another).
	First  int64
	Hashes []tlog.Hash
}

// Add appends a record's leaf, from its canonical form, and returns it.
func (t *Tree) Add(canonical []byte) (tlog.Hash, error) {
	if len(t.Hashes) == 0 {
		t.First = tlog.StoredHashIndex(0, t.Edge.n)
	}
	leaf := LeafHash(canonical)
	hs, err := t.Edge.Append(leaf)
	if err != nil {
		return leaf, err
	}
	t.Hashes = append(t.Hashes, hs...)
	return leaf, nil
}

// Written drops the hashes once written.
func (t *Tree) Written() { t.Hashes = t.Hashes[:0] }

// maxHashBuf is the largest buffer for canonical forms a Batch keeps from
// one batch to the next.
const maxHashBuf = 64 << 10

// Batch works out the rows a batch of records becomes, the same for
// every engine: each record's seq, links and chain hash, its MAC, its
// leaf and the tree hashes it adds, and the call index's rows and words.
// An engine begins a batch inside its write transaction with the chain's
// tail, adds the records in order, and writes what each Add and the
// batch's end leave; it is reused from one batch to the next, and is not
// safe for concurrent use.
type Batch struct {
	mac    *MACer
	buf    []byte // the last record's canonical form
	macBuf [sha256.Size]byte
	seq    int64
	prev   string
	tree   *Tree // nil: the records go on outside the tree
	// Leaves are the leaves of the batch's records in the tree.
	Leaves []tlog.Hash
	// Calls are the call index's rows the batch changes.
	Calls CallIndex
}

// NewBatch returns a Batch whose records' MACs are made by mac.
func NewBatch(mac *MACer) *Batch { return &Batch{mac: mac} }

// Begin starts a batch after record seq, whose chain hash is prev. The
// records' leaves go into tree when its edge ends at seq; a tree that
// stops before (at a record whose MAC fails) stays so: the records go
// on in the chain, with their MACs, and outside the tree. The call
// index is read through calls.
func (b *Batch) Begin(seq int64, prev string, tree *Tree, calls CallReader) {
	b.seq, b.prev, b.tree, b.Leaves = seq, prev, nil, nil
	if tree != nil && tree.Edge != nil && tree.Edge.n == seq {
		b.tree = tree
	}
	b.Calls.Reset(calls)
}

// Add makes r the chain's next record (its Seq, PrevHash and Hash; the
// LifecycleMACs record, macStart, gets the text that names its seq
// first), adds its leaf to the tree and applies it to the call index.
// It returns r's MAC, valid until the next Add.
func (b *Batch) Add(ctx context.Context, r *guard.Record, macStart bool) ([]byte, error) {
	b.seq++
	if macStart {
		r.Reason, r.Detail = MACsStartText(b.seq)
	}
	r.Seq, r.PrevHash = b.seq, b.prev
	r.Hash, b.buf = HashInto(b.buf, r)
	b.prev = r.Hash
	mac := b.mac.Sum(b.macBuf[:0], b.seq, r.Hash)
	if b.tree != nil {
		leaf, err := b.tree.Add(b.buf)
		if err != nil {
			return nil, err
		}
		b.Leaves = append(b.Leaves, leaf)
	}
	return mac, b.Calls.Add(ctx, r)
}

// Tail is the chain's tail after the records added: the last one's seq
// and hash.
func (b *Batch) Tail() (int64, string) { return b.seq, b.prev }

// End ends the batch; a large record's buffer is not kept.
func (b *Batch) End() {
	if cap(b.buf) > maxHashBuf {
		b.buf = nil
	}
}
