package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/guard-mcp/guard/audit"
	"golang.org/x/mod/sumdb/note"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Verdict is what a verification concludes from its findings. A failure
// outweighs everything: a log that fails what could be checked fails,
// whatever could not be. What could not be checked outweighs a pass.
type Verdict int

const (
	// VerdictVerified: everything was checked, and all of it holds.
	VerdictVerified Verdict = iota
	// VerdictUnverifiable: all that could be checked holds, but not
	// everything could be checked here (Findings.Unverifiable says why
	// and what to do). Not a pass.
	VerdictUnverifiable
	// VerdictFailed: the log, or a file of it, fails verification
	// (Findings.Problem): altered, removed, reordered, truncated.
	VerdictFailed
)

// Findings are what a verification found besides "it holds". VerifyWith
// and CheckFiles report in these terms, and whatever a check adds to them
// (a record's MAC, the journals of a process that stopped) says which of
// the three it is: a failure (fail), a reason the log cannot be verified
// here (cannot), or a note that changes nothing (note).
type Findings struct {
	// Problem is the first failure found: the record altered, removed or
	// reordered, the tree hash that does not match, the checkpoint the
	// log does not extend. "" when nothing failed.
	Problem string
	// Unverifiable are the reasons the log, or part of it, could not be
	// verified here, each saying what would let it be: no key of this
	// log, a key of another log, no database at that path. Everything
	// else is still checked.
	Unverifiable []string
	// Notes are what a reader should know and is no failure, such as
	// records that only the checkpoint key's holder could authenticate.
	Notes []string
}

// fail records a failure; only the first is kept, since what follows a
// broken record is read in its light.
func (f *Findings) fail(format string, args ...any) {
	if f.Problem == "" {
		f.Problem = fmt.Sprintf(format, args...)
	}
}

// cannot records a reason the log cannot be verified here, once.
func (f *Findings) cannot(format string, args ...any) {
	if s := fmt.Sprintf(format, args...); !slices.Contains(f.Unverifiable, s) {
		f.Unverifiable = append(f.Unverifiable, s)
	}
}

// note records a note, once.
func (f *Findings) note(format string, args ...any) {
	if s := fmt.Sprintf(format, args...); !slices.Contains(f.Notes, s) {
		f.Notes = append(f.Notes, s)
	}
}

// Verdict concludes from the findings.
func (f Findings) Verdict() Verdict {
	switch {
	case f.Problem != "":
		return VerdictFailed
	case len(f.Unverifiable) > 0:
		return VerdictUnverifiable
	}
	return VerdictVerified
}

// Why is what stands between the findings and a pass, on one line (for
// logs and the record of a scheduled verification): the failure, else
// the reasons it cannot verify. "" when verified.
func (f Findings) Why() string {
	if f.Problem != "" {
		return f.Problem
	}
	return strings.Join(f.Unverifiable, "; ")
}

// passKey says how to give verify or check this log's key.
const passKey = "pass this log's verifier key (--key, as guard audit key prints it where the log's key is), or the configuration that names its key file (--config, audit.key_file)"

// checkpoints reads the checkpoints of one log. With a key (v) each must
// be signed by it; without one (none at hand, or one of another log,
// which is used for nothing) each is read as it stands, and must name the
// log's origin: its size and root are still compared with the log, which
// catches a truncation or a rewrite, not a forgery.
type checkpoints struct {
	v      note.Verifier
	origin string // the log's origin; "" when unknown
}

// open reads a checkpoint of the log.
func (cs checkpoints) open(msg []byte) (*audit.Checkpoint, error) {
	if cs.v != nil {
		return audit.OpenCheckpoint(msg, cs.v)
	}
	c, err := audit.ReadUnsigned(msg)
	if err == nil && cs.origin != "" && c.Origin != cs.origin {
		return nil, fmt.Errorf("it is of %s, and this log's checkpoints of %s: if it was kept from this log, the log was replaced", c.Origin, cs.origin)
	}
	return c, err
}

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
func (vr Verifier) verifyKey(pinned note.Verifier, origin, where string, f *Findings) (v note.Verifier, had bool) {
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
	f.cannot("%s is another log's key: it signs as %s, and this log's checkpoints as %s (%s). Nothing was checked with it: %s%s",
		which, v.Name(), origin, where, passKey, hint)
	return nil, true
}

// damaged reports whether err is SQLite's word that the database file is
// corrupt, or not a database: a log that cannot be read because it was
// damaged fails verification, while one that cannot be reached (a
// refused connection) cannot be verified here.
func damaged(err error) bool {
	c := sqliteCode(err)
	return c == sqlite3.SQLITE_CORRUPT || c == sqlite3.SQLITE_NOTADB
}

// sqliteCode is the primary result code of an SQLite error, -1 for any
// other error.
func sqliteCode(err error) int {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return -1
	}
	return se.Code() & 0xff
}

// noKey is why a log's signatures could not be checked when there is no
// key at all.
func (vr Verifier) noKey(f *Findings) {
	f.cannot("there is no key for this log (none at %s, and none given): the checkpoints' signatures were not checked: %s", vr.db.opts.KeyPath, passKey)
}
