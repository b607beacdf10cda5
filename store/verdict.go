package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"

	"github.com/guard-mcp/guard/audit"
	"golang.org/x/mod/sumdb/note"
)

// logOrigin names the log this database holds: the origin of the first
// checkpoint kept in it, else of the checkpoint file beside it; "" when
// there is neither. A key must name it to be this log's key. where says
// which, for people.
func (db *DB) logOrigin(ctx context.Context) (origin, where string, err error) {
	var text string
	err = db.r.QueryRowContext(ctx, `SELECT note FROM checkpoints ORDER BY size LIMIT 1`).Scan(&text)
	switch {
	case err == nil:
		if o := audit.OriginOfNote([]byte(text)); o != "" {
			return o, "its first checkpoint, kept in the database", nil
		}
	case !errors.Is(err, sql.ErrNoRows):
		return "", "", fmt.Errorf("checkpoints: %w", err)
	}
	if b, err := os.ReadFile(db.opts.CheckpointPath); err == nil {
		if o := audit.OriginOfNote(b); o != "" {
			return o, "its checkpoint file " + db.opts.CheckpointPath, nil
		}
	}
	return "", "", nil
}

// verifyKey is the key VerifyWith checks signatures with: the one given
// (pinned), else the log's own key file's; had reports that there was
// one. It is nil when there is none, or when it is another log's: such a
// key is used for nothing (no signature is checked with it), and f says
// so, naming both logs and how to pass the right key. A missing key is
// reported by the caller, which knows whether there was anything to check
// with it.
func (vr Verifier) verifyKey(pinned note.Verifier, origin, where string, f *audit.Findings) (v note.Verifier, had bool) {
	v, which := pinned, "the key given"
	if v == nil && vr.db.signer != nil {
		v, which = vr.db.signer.Verifier(), "the checkpoint key at "+vr.db.opts.KeyPath
	}
	if v == nil || origin == "" || v.Name() == origin {
		return v, v != nil
	}
	hint := ""
	if pinned != nil {
		hint = "; if it is the key you pinned for this log, the log was signed with another key since: check it against a checkpoint you kept (--checkpoint)"
	}
	f.Cannot("%s is another log's key: it signs as %s, and this log's checkpoints as %s (%s). Nothing was checked with it: %s%s",
		which, v.Name(), origin, where, audit.PassKey, hint)
	return nil, true
}

// noKey is why a log's signatures could not be checked when there is no
// key at all.
func (vr Verifier) noKey(f *audit.Findings) {
	f.Cannot("there is no key for this log (none at %s, and none given): the checkpoints' signatures were not checked: %s", vr.db.opts.KeyPath, audit.PassKey)
}
