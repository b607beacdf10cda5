package audit

import (
	"context"
	"fmt"
	"time"

	guard "github.com/guard-mcp/guard"
)

// The calls of the audit log are queried through an index kept in the
// transaction that commits their records: one row per invocation with
// the columns the filters select on and the records that make the call
// up, and the call's words (its request's arguments and its latest
// outcome's result) in a text index. It is not part of the chain: it is
// derived from the records alone.
//
// A call's row is made by its first request record. Its latest outcome
// record gives its outcome and result; its decision (decision,
// decided_by, reason) is that of the latest record among its outcome and
// decision records that carries one, else its request's; its approval
// is the latest one any of its records carries.

// KeyRankBits is how many of a call's key's low bits hold its rank among
// the calls of the same millisecond.
const KeyRankBits = 20

// maxKeyMillis bounds the milliseconds a key holds (the year 2109), so
// that a key fits in 63 bits.
const maxKeyMillis = 1<<42 - 1

// KeyMillis is the first key of the calls made in t's millisecond; times
// before 1970 or after maxKeyMillis share the first or the last.
func KeyMillis(t time.Time) int64 {
	return min(max(t.UnixMilli(), 0), maxKeyMillis) << KeyRankBits
}

// Call is a row of the call index.
type Call struct {
	K                             int64
	ID                            string
	ReqSeq, OutSeq, DecSeq        int64 // OutSeq 0: no outcome yet
	Server, Tool, Client, Session string
	Decision, DecidedBy, Outcome  string
	Approval, User, UserEmail     string
}

// CallReader reads the call index as committed, inside the transaction
// that writes a batch: an engine either asks the database as a batch
// needs it (SQLite) or answers from rows it read for the whole batch at
// once (PostgreSQL).
type CallReader interface {
	// Call returns the row of the call id; ok is false when it has none.
	// A reader may leave the columns a batch never changes (server,
	// tool, client, session, user) empty.
	Call(ctx context.Context, id string) (c Call, ok bool, err error)
	// Keys returns the key after the largest in [base, base+1<<KeyRankBits)
	// (base when there is none) and the largest key of all (0: none).
	Keys(ctx context.Context, base int64) (next, last int64, err error)
}

// CallChange is a row of the call index as a batch leaves it.
type CallChange struct {
	Call
	// Was is the row as committed before the batch; New says there was
	// none (the batch's records hold the call's request).
	Was Call
	New bool
	// Words says the call's words changed: its request's arguments (Args,
	// when New) or its latest outcome's result (Result, when HasResult).
	Words     bool
	Args      string
	Result    string
	HasResult bool
	dirty     bool
}

// CallIndex works out the call index's rows a batch of records changes,
// as the batch's records arrive in chain order.
type CallIndex struct {
	read     CallReader
	calls    map[string]*CallChange // nil: the call has no row
	next     map[int64]int64        // key base → the next key free in its range
	last     int64                  // the largest key of all
	overflow []int64                // keys given outside their millisecond's range
	// Changes are the rows the batch changed, in the order it first
	// changed them.
	Changes []*CallChange
}

// Reset starts a batch read through read.
func (x *CallIndex) Reset(read CallReader) {
	x.read = read
	if x.calls == nil {
		x.calls, x.next = map[string]*CallChange{}, map[int64]int64{}
	}
	clear(x.calls)
	clear(x.next)
	x.last, x.overflow, x.Changes = 0, x.overflow[:0], x.Changes[:0]
}

func (x *CallIndex) touch(c *CallChange) {
	if !c.dirty {
		c.dirty = true
		x.Changes = append(x.Changes, c)
	}
}

// lookup returns the batch's state of call id, reading it the first time.
func (x *CallIndex) lookup(ctx context.Context, id string) (*CallChange, error) {
	if c, seen := x.calls[id]; seen {
		return c, nil
	}
	row, ok, err := x.read.Call(ctx, id)
	if err != nil {
		return nil, err
	}
	var c *CallChange
	if ok {
		c = &CallChange{Call: row, Was: row}
	}
	x.calls[id] = c
	return c, nil
}

// key gives a new call of base's millisecond its key: the first of its
// millisecond not yet taken, so that the calls of one millisecond rank in
// the order they arrive.
func (x *CallIndex) key(ctx context.Context, base int64) (int64, error) {
	const rank = 1 << KeyRankBits
	next, ok := x.next[base]
	if !ok {
		n, last, err := x.read.Keys(ctx, base)
		if err != nil {
			return 0, err
		}
		next, x.last = n, max(x.last, last)
		for _, k := range x.overflow {
			if k >= base && k < base+rank {
				next = max(next, k+1)
			}
		}
	}
	k := next
	if k >= base+rank {
		// A millisecond with more calls than a key can rank (a clock
		// that stood still): the call goes after every other.
		k = x.last + 1
		x.overflow = append(x.overflow, k)
		for b, n := range x.next {
			if k >= b && k < b+rank && k >= n {
				x.next[b] = k + 1
			}
		}
	} else {
		next = k + 1
	}
	x.next[base] = next
	x.last = max(x.last, k)
	return k, nil
}

// Add applies one record of the batch, chained (its Seq set).
func (x *CallIndex) Add(ctx context.Context, r *guard.Record) error {
	if err := x.add(ctx, r); err != nil {
		return fmt.Errorf("call index: record %d: %w", r.Seq, err)
	}
	return nil
}

func (x *CallIndex) add(ctx context.Context, r *guard.Record) error {
	switch r.Kind {
	case guard.KindRequest, guard.KindOutcome, guard.KindDecision:
	default:
		return nil
	}
	if r.Kind == guard.KindDecision && r.Decision == "" && r.Approval == "" {
		return nil
	}
	c, err := x.lookup(ctx, r.CallID)
	if err != nil {
		return err
	}
	switch r.Kind {
	case guard.KindRequest:
		if c != nil {
			return nil // a later request of a call already indexed
		}
		k, err := x.key(ctx, KeyMillis(r.Time))
		if err != nil {
			return err
		}
		c = &CallChange{New: true, Words: true, Args: r.Arguments, Call: Call{K: k, ID: r.CallID, ReqSeq: r.Seq,
			DecSeq: r.Seq, Server: r.Server, Tool: r.Tool, Client: r.Client, Session: r.Session, Decision: r.Decision,
			DecidedBy: r.DecidedBy, Approval: r.Approval, User: r.User, UserEmail: r.UserEmail}}
		x.calls[r.CallID] = c
	case guard.KindOutcome:
		if c == nil {
			return nil
		}
		c.OutSeq, c.Outcome = r.Seq, r.Outcome
		c.Words, c.Result, c.HasResult = true, r.Result, true
		c.decide(r)
	case guard.KindDecision:
		if c == nil {
			return nil
		}
		c.decide(r)
	}
	x.touch(c)
	return nil
}

// decide applies the approval and the decision an outcome or decision
// record carries.
func (c *CallChange) decide(r *guard.Record) {
	if r.Approval != "" {
		c.Approval = r.Approval
	}
	if r.Decision != "" {
		c.DecSeq, c.Decision, c.DecidedBy = r.Seq, r.Decision, r.DecidedBy
	}
}
