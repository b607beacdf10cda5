package store

import (
	"context"
	"fmt"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
	"golang.org/x/mod/sumdb/note"
)

// Verify checks the MACs of the records after the latest checkpoint (the
// tail: the signatures of checkpoints cover the rest) when it holds the
// MAC key, which the key file gives. A verifier with the public key only
// cannot, and says how many records of the tail it could not
// authenticate (Report.Unauthenticated): anyone who can write the
// database may have written them.

// macWalk follows verify's walk of the log: the records after the
// latest checkpoint, from where MACs start on, have their MACs checked
// when the verifier holds the MAC key; the records after the last
// checkpoint the walk matched that it could not check are the
// unauthenticated tail.
type macWalk struct {
	m        *audit.MACer // nil: the verifier holds only the public key
	from     int64        // where MACs start (0: not known yet)
	tail     int64        // the size of the latest checkpoint signed by the key verify trusts
	covered  int64        // the size of the last checkpoint matched
	unauth   int64        // records after covered whose MAC was not checked
	disabled bool         // the database has no mac column: a schema before MACs
	treeless bool         // the stored tree ended after the last checkpoint
}

// newMACWalk prepares verify's MAC checks: where the checkpoints signed
// by v, the key verify trusts (the latest kept in the database, and the
// others verify checks), say MACs start, and where the tail begins.
func (vr Verifier) newMACWalk(ctx context.Context, v note.Verifier, others []anchor) (*macWalk, error) {
	w := &macWalk{m: vr.verifyMACer(v), disabled: vr.db.schema.noMAC}
	if v == nil {
		return w, nil // nothing to trust: verify says so
	}
	c, err := latestSigned(ctx, vr.db.r, v)
	if err != nil {
		return nil, err
	}
	var cs []*audit.Checkpoint
	if c != nil {
		cs = append(cs, c)
	}
	for _, a := range others {
		cs = append(cs, a.c)
	}
	for _, c := range cs {
		w.tail = max(w.tail, c.Size)
		if c.MACsFrom > 0 && (w.from == 0 || c.MACsFrom < w.from) {
			w.from = c.MACsFrom
		}
	}
	return w, nil
}

// verifyMACer is the macer verify checks MACs with: the MAC key of the
// log's key file, when v, the key verify trusts, is that file's.
func (vr Verifier) verifyMACer(v note.Verifier) *audit.MACer {
	if v == nil || vr.db.signer == nil || vr.db.auth.key == nil ||
		v.KeyHash() != vr.db.signer.Verifier().KeyHash() || v.Name() != vr.db.signer.Verifier().Name() {
		return nil // none, or a pinned key that is not this key file's
	}
	return audit.NewMACer(vr.db.auth.key)
}

// record checks one record, whose hash and link the walk checked; it
// returns a problem, or "".
func (w *macWalk) record(r *guard.Record, mac []byte) string {
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

// authenticated is how far the walk of records records authenticated
// them: up to the end, or to the last checkpoint when the tail after it
// holds records whose MACs it could not check.
func (w *macWalk) authenticated(records int64) int64 {
	if w.unauth > 0 {
		return w.covered
	}
	return records
}

// checkpointed notes that the walk matched a checkpoint of size records.
func (w *macWalk) checkpointed(size int64) {
	w.covered, w.unauth = size, 0
}
