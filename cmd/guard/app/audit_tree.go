package app

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/guard-mcp/guard/audit"
	"golang.org/x/mod/sumdb/note"
)

// AuditVerify is guard audit verify: it verifies the log of st's database,
// its tree and checkpoints, against what o gives and what its file
// witnesses hold, and returns 0 verified, 1 failed, 3 cannot verify here.
func (m *Main) AuditVerify(ctx context.Context, st *Settings, o audit.VerifyOptions) int {
	cannot := func(err error) int {
		fmt.Fprintf(m.Stdout, "CANNOT VERIFY: %v\n", err)
		return ExitUnverifiable
	}
	db, err := m.OpenReadOnly(ctx, st)
	if err != nil {
		return cannot(err)
	}
	defer db.Close()
	// Every checkpoint a file witness holds, not only its latest: a
	// history signed after a truncation gets witnessed too.
	held, err := audit.WitnessedCheckpoints(st.Config.Audit.Checkpoints.Witness)
	if err != nil {
		return cannot(err)
	}
	o.Kept = append(o.Kept, held...)
	rep, err := db.Verifier().VerifyWith(ctx, o)
	if err != nil {
		return cannot(err)
	}
	fmt.Fprintln(m.Stdout, verifiedLine(rep))
	return verdictStatus(rep.Verdict())
}

// verdictStatus is the exit status of a verification's verdict.
func verdictStatus(v audit.Verdict) int {
	switch v {
	case audit.VerdictFailed:
		return ExitFailure
	case audit.VerdictUnverifiable:
		return ExitUnverifiable
	}
	return ExitOK
}

// verifiedLine is what guard audit verify says of a verification: its
// verdict first (ok, FAILED, CANNOT VERIFY), then one line for each
// reason it could not verify and each note.
func verifiedLine(rep audit.Report) string {
	var lines []string
	switch rep.Verdict() {
	case audit.VerdictFailed:
		lines = append(lines, fmt.Sprintf("FAILED after %d records: %s", rep.Records, rep.Problem))
	case audit.VerdictUnverifiable:
	case audit.VerdictVerified:
		if rep.Witnessed {
			lines = append(lines, fmt.Sprintf("ok: %d records%s, extends checkpoint %d", rep.Records, prunedNote(rep), rep.Extends))
		} else {
			lines = append(lines, fmt.Sprintf("ok, unwitnessed: %d records%s", rep.Records, prunedNote(rep)))
		}
	}
	lines = append(lines, unverifiedLines(rep.Findings)...)
	if rep.Verdict() == audit.VerdictUnverifiable && rep.Records > 0 {
		lines = append(lines, fmt.Sprintf("all else holds: %d records%s, each record's hash, link and leaf, the tree, and the size and root of each checkpoint",
			rep.Records, prunedNote(rep)))
	}
	return strings.Join(lines, "\n")
}

// unverifiedLines are the lines of what could not be verified, and of
// the notes.
func unverifiedLines(f audit.Findings) []string {
	var lines []string
	for _, r := range f.Unverifiable {
		lines = append(lines, "CANNOT VERIFY: "+r)
	}
	for _, n := range f.Notes {
		lines = append(lines, "note: "+n)
	}
	return lines
}

// prunedNote says how many of the records verified retention pruned.
func prunedNote(rep audit.Report) string {
	if rep.Pruned == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d pruned by retention)", rep.Pruned)
}

// AuditCheck is guard audit check: it checks the proofs, exports and
// checkpoints in the files named, offline, against v (nil: none), the key
// read from the file local when no --key was given.
func (m *Main) AuditCheck(v note.Verifier, local string, names []string) int {
	var files []audit.File
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			fmt.Fprintf(m.Stderr, "guard audit check: %v\n", err)
			return ExitUsage
		}
		files = append(files, audit.File{Name: name, Data: b})
	}
	lines, f := audit.CheckFiles(v, files)
	for _, l := range lines {
		fmt.Fprintln(m.Stdout, l)
	}
	if f.Problem != "" {
		fmt.Fprintf(m.Stdout, "FAILED: %s\n", f.Problem)
	}
	for _, l := range unverifiedLines(f) {
		fmt.Fprintln(m.Stdout, l)
	}
	if local != "" && len(f.Unverifiable) > 0 {
		fmt.Fprintf(m.Stdout, "note: the key was this machine's checkpoint key, at %s: no --key was given\n", local)
	}
	return verdictStatus(f.Verdict())
}
