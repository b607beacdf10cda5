package audit

import (
	"fmt"

	"golang.org/x/mod/sumdb/tlog"
)

// The records form the leaves of a Merkle tree in the shape of RFC 6962
// and RFC 9162, as golang.org/x/mod/sumdb/tlog builds it: record seq N is
// leaf N-1, and its leaf hash is tlog.RecordHash of the record's canonical
// form (the bytes whose SHA-256 is its chain hash), so the tree commits to
// every record's content. The tree's stored hashes (tlog.StoredHashes:
// every leaf and every complete subtree) are kept in tree_hashes by their
// tlog.StoredHashIndex, inserted in the transaction that inserts their
// records. The writer keeps the tree's right edge (the roots of its
// complete subtrees, at most one per level) in memory, so an append costs
// only the hashes it adds: on average two per record.

// edgeNode is the root of one complete subtree on the tree's right edge.
type edgeNode struct {
	idx  int64 // its stored hash index
	hash tlog.Hash
}

// Edge is the right edge of a tree of n leaves: the roots of its
// complete subtrees, largest (leftmost) first, one per bit set in n.
type Edge struct {
	n     int64
	nodes []edgeNode
}

// edgeIndexes are the stored hash indexes of the right edge of a tree of
// n leaves, largest subtree first.
func edgeIndexes(n int64) []int64 {
	var out []int64
	var start int64
	for l := 62; l >= 0; l-- {
		if n&(1<<l) != 0 {
			out = append(out, tlog.StoredHashIndex(l, start>>l))
			start += 1 << l
		}
	}
	return out
}

// LoadEdge reads the right edge of a tree of n leaves with read.
func LoadEdge(n int64, read func([]int64) ([]tlog.Hash, error)) (*Edge, error) {
	idx := edgeIndexes(n)
	e := &Edge{n: n, nodes: make([]edgeNode, len(idx), len(idx)+1)}
	if len(idx) == 0 {
		return e, nil
	}
	hs, err := read(idx)
	if err != nil {
		return nil, fmt.Errorf("tree edge: %w", err)
	}
	if len(hs) != len(idx) {
		return nil, fmt.Errorf("tree edge: %d hashes for %d indexes", len(hs), len(idx))
	}
	for i := range idx {
		e.nodes[i] = edgeNode{idx[i], hs[i]}
	}
	return e, nil
}

// ReadHashes serves the edge's hashes to tlog, which asks for no other
// when it appends a leaf or computes the root.
func (e *Edge) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
next:
	for i, x := range indexes {
		for _, nd := range e.nodes {
			if nd.idx == x {
				out[i] = nd.hash
				continue next
			}
		}
		return nil, fmt.Errorf("tree hash %d is not on the right edge of a tree of %d leaves", x, e.n)
	}
	return out, nil
}

// Append adds leaf e.n and returns the hashes to store from
// tlog.StoredHashIndex(0, n) on: the leaf, then each subtree it completes.
func (e *Edge) Append(leaf tlog.Hash) ([]tlog.Hash, error) {
	hs, err := tlog.StoredHashesForRecordHash(e.n, leaf, e)
	if err != nil {
		return nil, fmt.Errorf("tree: %w", err)
	}
	// The leaf completed len(hs)-1 subtrees: the edge's last nodes merge
	// into one of the level above.
	k := len(hs) - 1
	e.nodes = e.nodes[:len(e.nodes)-k]
	e.nodes = append(e.nodes, edgeNode{tlog.StoredHashIndex(k, e.n>>k), hs[k]})
	e.n++
	return hs, nil
}

// Root is the tree's root hash.
func (e *Edge) Root() (tlog.Hash, error) {
	return tlog.TreeHash(e.n, e)
}

// TreeSize is the number of leaves of a tree whose last stored hash has
// index maxIdx: that hash is the root of the subtree its last leaf completed.
func TreeSize(maxIdx int64) int64 {
	level, n := tlog.SplitStoredHashIndex(maxIdx)
	return (n + 1) << level
}

// LeafIndex is the stored hash index of record seq's leaf.
func LeafIndex(seq int64) int64 { return tlog.StoredHashIndex(0, seq-1) }

// LeafHash is the tree's leaf hash of a record's canonical form.
func LeafHash(canonical []byte) tlog.Hash { return tlog.RecordHash(canonical) }

// Size is the number of leaves of the edge's tree.
func (e *Edge) Size() int64 { return e.n }
