package audit

import (
	"context"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"

	"golang.org/x/mod/sumdb/tlog"
)

// calls is a CallReader over rows held in memory.
type calls struct {
	rows map[string]Call
	keys []int64
}

func (c *calls) Call(_ context.Context, id string) (Call, bool, error) {
	r, ok := c.rows[id]
	return r, ok, nil
}

func (c *calls) Keys(_ context.Context, base int64) (next, last int64, err error) {
	next = base
	for _, k := range c.keys {
		if k >= base && k < base+1<<KeyRankBits {
			next = max(next, k+1)
		}
		last = max(last, k)
	}
	return next, last, nil
}

func TestBatchChainsTreeAndMACs(t *testing.T) {
	ctx := context.Background()
	key := []byte("0123456789abcdef0123456789abcdef")
	b := NewBatch(NewMACer(key))
	edge, err := LoadEdge(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	tree := &Tree{Edge: edge}
	var recs []*guard.Record
	var leaves []tlog.Hash
	prev := ""
	for i := range 2 {
		b.Begin(int64(len(recs)), prev, tree, &calls{})
		for j := range 3 {
			r := &guard.Record{ID: "r", Kind: guard.KindLifecycle, Time: time.Unix(int64(10*i+j), 0)}
			mac, err := b.Add(ctx, r, i == 1 && j == 0)
			if err != nil {
				t.Fatal(err)
			}
			if !NewMACer(key).Valid(r.Seq, r.Hash, mac) {
				t.Fatalf("record %d: the MAC does not verify", r.Seq)
			}
			recs = append(recs, r)
		}
		leaves = append(leaves, b.Leaves...)
		seq, h := b.Tail()
		if seq != int64(len(recs)) || h != recs[len(recs)-1].Hash {
			t.Fatalf("tail %d %s, want %d %s", seq, h, len(recs), recs[len(recs)-1].Hash)
		}
		prev = h
		b.End()
	}
	for i, r := range recs {
		if r.Seq != int64(i+1) || HashRecord(r) != r.Hash {
			t.Fatalf("record %d: seq %d, hash %s, want %s", i+1, r.Seq, r.Hash, HashRecord(r))
		}
		if i > 0 && r.PrevHash != recs[i-1].Hash {
			t.Fatalf("record %d does not link to the one before", r.Seq)
		}
		if leaves[i] != LeafHash(AppendCanonical(nil, r)) {
			t.Fatalf("record %d: leaf is not its canonical form's", r.Seq)
		}
	}
	if want, _ := MACsStartText(4); recs[3].Reason != want {
		t.Fatalf("the MACs' start record reads %q", recs[3].Reason)
	}
	// The stored hashes the tree gathered are those tlog stores.
	stored := map[int64]tlog.Hash{}
	for i, h := range tree.Hashes {
		stored[tree.First+int64(i)] = h
	}
	root, err := tlog.TreeHash(int64(len(recs)), tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		for i, x := range idx {
			out[i] = stored[x]
		}
		return out, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := tree.Edge.Root(); got != root {
		t.Fatalf("edge root %x, want %x", got, root)
	}
}

func TestCallIndex(t *testing.T) {
	ctx := context.Background()
	at := time.UnixMilli(1_700_000_000_000)
	base := KeyMillis(at)
	rec := func(seq int64, kind, call string, set func(*guard.Record)) *guard.Record {
		r := &guard.Record{Seq: seq, Kind: kind, CallID: call, Time: at}
		if set != nil {
			set(r)
		}
		return r
	}
	tests := []struct {
		name string
		read *calls
		recs []*guard.Record
		want []CallChange
	}{{
		name: "a new call ranks after the millisecond's calls committed and those before it in the batch",
		read: &calls{keys: []int64{base, base + 1}},
		recs: []*guard.Record{
			rec(1, guard.KindRequest, "a", func(r *guard.Record) { r.Arguments, r.Decision = "{}", "allow" }),
			rec(2, guard.KindRequest, "b", nil),
			rec(3, guard.KindRequest, "a", nil), // a later request changes nothing
			rec(4, guard.KindOutcome, "a", func(r *guard.Record) { r.Outcome, r.Result = "ok", "done" }),
		},
		want: []CallChange{
			{Call: Call{K: base + 2, ID: "a", ReqSeq: 1, OutSeq: 4, DecSeq: 1, Decision: "allow", Outcome: "ok"}, New: true,
				Words: true, Args: "{}", Result: "done", HasResult: true},
			{Call: Call{K: base + 3, ID: "b", ReqSeq: 2, DecSeq: 2}, New: true, Words: true},
		},
	}, {
		name: "a committed call's decision and approval, from its latest records",
		read: &calls{rows: map[string]Call{"c": {K: 7, ID: "c", ReqSeq: 1, DecSeq: 1, Decision: "held"}}},
		recs: []*guard.Record{
			rec(10, guard.KindDecision, "c", func(r *guard.Record) { r.Approval = "ap" }),
			rec(11, guard.KindDecision, "c", nil), // neither: nothing
			rec(12, guard.KindDecision, "c", func(r *guard.Record) { r.Decision, r.DecidedBy = "allow", "ui" }),
			rec(13, guard.KindOutcome, "x", nil), // a call without a row
		},
		want: []CallChange{
			{Call: Call{K: 7, ID: "c", ReqSeq: 1, DecSeq: 12, Decision: "allow", DecidedBy: "ui", Approval: "ap"},
				Was: Call{K: 7, ID: "c", ReqSeq: 1, DecSeq: 1, Decision: "held"}},
		},
	}, {
		name: "a millisecond whose keys are all taken: after every key",
		read: &calls{keys: []int64{base + 1<<KeyRankBits - 1, base + 5<<KeyRankBits}},
		recs: []*guard.Record{rec(1, guard.KindRequest, "d", nil)},
		want: []CallChange{{Call: Call{K: base + 5<<KeyRankBits + 1, ID: "d", ReqSeq: 1, DecSeq: 1}, New: true, Words: true}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var x CallIndex
			x.Reset(tt.read)
			for _, r := range tt.recs {
				if err := x.Add(ctx, r); err != nil {
					t.Fatal(err)
				}
			}
			if len(x.Changes) != len(tt.want) {
				t.Fatalf("%d changes, want %d", len(x.Changes), len(tt.want))
			}
			for i, c := range x.Changes {
				got := *c
				got.dirty = false
				if got != tt.want[i] {
					t.Errorf("change %d:\n got %+v\nwant %+v", i, got, tt.want[i])
				}
			}
		})
	}
}
