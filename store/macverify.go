package store

import (
	"context"

	"github.com/guard-mcp/guard/audit"
	"golang.org/x/mod/sumdb/note"
)

// Verify checks the MACs of the records after the latest checkpoint (the
// tail: the signatures of checkpoints cover the rest) when it holds the
// MAC key, which the key file gives. A verifier with the public key only
// cannot, and says how many records of the tail it could not
// authenticate (Report.Unauthenticated): anyone who can write the
// database may have written them.

// newMACWalk prepares verify's MAC checks: where the checkpoints signed
// by v, the key verify trusts (the latest kept in the database, and the
// others verify checks), say MACs start, and where the tail begins.
func (vr Verifier) newMACWalk(ctx context.Context, v note.Verifier, others []audit.Anchor) (*audit.MACWalk, error) {
	m := vr.verifyMACer(v)
	if v == nil {
		return audit.NewMACWalk(m, vr.db.schema.noMAC, nil), nil // nothing to trust: verify says so
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
		cs = append(cs, a.C)
	}
	return audit.NewMACWalk(m, vr.db.schema.noMAC, cs), nil
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
