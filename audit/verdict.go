package audit

import (
	"fmt"
	"slices"
	"strings"

	"golang.org/x/mod/sumdb/note"
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

// Findings are what a verification found besides "it holds". A log's
// verification and the offline check of its files report in these terms,
// and whatever a check adds to them (a record's MAC, the journals of a
// process that stopped) says which of the three it is: a failure (Fail),
// a reason the log cannot be verified here (Cannot), or a note that
// changes nothing (Note).
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

// Fail records a failure; only the first is kept, since what follows a
// broken record is read in its light.
func (f *Findings) Fail(format string, args ...any) {
	if f.Problem == "" {
		f.Problem = fmt.Sprintf(format, args...)
	}
}

// Cannot records a reason the log cannot be verified here, once.
func (f *Findings) Cannot(format string, args ...any) {
	if s := fmt.Sprintf(format, args...); !slices.Contains(f.Unverifiable, s) {
		f.Unverifiable = append(f.Unverifiable, s)
	}
}

// Note records a note, once.
func (f *Findings) Note(format string, args ...any) {
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

// PassKey says how to give verify or check this log's key.
const PassKey = "pass this log's verifier key (--key, as guard audit key prints it where the log's key is), or the configuration that names its key file (--config, audit.key_file)"

// Report is what a log's verification found: its Findings (Problem names
// the first record that was altered, removed or reordered, a tree hash
// that does not match, or a checkpoint the log does not extend;
// Unverifiable why some of it could not be checked here) and what it
// checked.
type Report struct {
	// Records is how many records the log holds.
	Records int64
	// OK is set when the log verified: Verdict() is VerdictVerified.
	OK bool
	Findings
	// Witnessed is set when the log was checked against a checkpoint
	// kept elsewhere (VerifyOptions.Kept: an auditor's, or a witness's),
	// which its own files cannot forge, its signature checked with this
	// log's key. Extends is then the size of the largest such
	// checkpoint. A pinned key alone does not witness the log: whoever
	// truncates it and lets guard go on signing gets checkpoints of a
	// new history signed by that key.
	Witnessed bool
	Extends   int64
	// Pruned is how many records lost their bodies to retention: their
	// leaves and links are checked, and that a retention record signed
	// by the checkpoint key names them, but not their contents.
	Pruned int64
	// Unauthenticated is how many records after the checkpoint of
	// TailAfter records (the last one the log was checked against) no
	// signature and no MAC authenticated here: the verifier holds only
	// the public key, or they came before MACs started. Anyone who can
	// write the database may have written them; a note says so.
	Unauthenticated int64
	TailAfter       int64
}

// KeptCheckpoint is a checkpoint held outside guard's files: kept by an
// auditor, or by a witness.
type KeptCheckpoint struct {
	Name string // where it comes from, for people
	Note []byte
}

// VerifyOptions are what a verification checks the log against beyond
// its own files.
type VerifyOptions struct {
	// Key is the pinned verifier of the checkpoints (nil: the log's own
	// key, from its key file).
	Key note.Verifier
	// Kept are checkpoints kept elsewhere, which the log must extend.
	Kept []KeptCheckpoint
}

// Checkpoints reads the checkpoints of one log. With a key (V) each must
// be signed by it; without one (none at hand, or one of another log,
// which is used for nothing) each is read as it stands, and must name the
// log's origin: its size and root are still compared with the log, which
// catches a truncation or a rewrite, not a forgery.
type Checkpoints struct {
	// V is the log's verifier; nil when there is none to check with.
	V note.Verifier
	// Origin is the log's origin; "" when unknown.
	Origin string
}

// Open reads a checkpoint of the log.
func (cs Checkpoints) Open(msg []byte) (*Checkpoint, error) {
	if cs.V != nil {
		return OpenCheckpoint(msg, cs.V)
	}
	c, err := ReadUnsigned(msg)
	if err == nil && cs.Origin != "" && c.Origin != cs.Origin {
		return nil, fmt.Errorf("it is of %s, and this log's checkpoints of %s: if it was kept from this log, the log was replaced", c.Origin, cs.Origin)
	}
	return c, err
}
