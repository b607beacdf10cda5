package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/guard-mcp/guard/config/read"
	"github.com/guard-mcp/guard/metrics"
	"github.com/guard-mcp/guard/store"
	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/note"
)

// The audit log's Merkle tree, seen from the command line: the key to pin,
// the latest checkpoint to keep, verification against them, inclusion
// proofs, exports, and the offline check of proofs and exports
// (docs/tree.md).

// storeOptions are the database options of the resolved settings.
func (a *app) storeOptions(st *settings) store.Options {
	return store.Options{Path: st.DBPath, Durability: st.Config.Durability, Logger: a.logger,
		KeyPath: keyPath(st), CheckpointEvery: st.Config.Audit.Checkpoints.Every,
		Witnesses: st.Config.Audit.Checkpoints.Witness}
}

// keyPath is the checkpoint key file: audit.key_file (relative to the
// configuration's directory), else audit.key beside the database.
func keyPath(st *settings) string {
	p := st.Config.Audit.KeyFile
	if p == "" {
		return filepath.Join(st.DataDir, "audit.key")
	}
	if !filepath.IsAbs(p) && st.ConfigPath != "" {
		p = filepath.Join(filepath.Dir(st.ConfigPath), p)
	}
	return p
}

// retentionOptions are the retention job's options of the resolved
// settings: audit.retention, and audit.archive_dir (relative to the
// configuration's directory), else archive/ beside the database (on
// PostgreSQL, beside the checkpoint key).
func retentionOptions(st *settings) store.RetentionOptions {
	return store.RetentionOptions{Retention: st.Config.Audit.Retention, ArchiveDir: archiveDir(st)}
}

// archiveDir is where retention writes its archives.
func archiveDir(st *settings) string {
	p := st.Config.Audit.ArchiveDir
	if p == "" && st.Postgres {
		return filepath.Join(filepath.Dir(keyPath(st)), "archive")
	}
	if p == "" {
		return store.ArchiveDir(st.DBPath)
	}
	if !filepath.IsAbs(p) && st.ConfigPath != "" {
		p = filepath.Join(filepath.Dir(st.ConfigPath), p)
	}
	return p
}

// treeMetrics adds the tree's counters to a serving process's metrics.
func treeMetrics(reg *metrics.Registry, db *store.DB) {
	reg.Gauge("guard_audit_checkpoints_refused_total", "Checkpoints not signed because the log did not extend the last one (it was truncated or rewritten).", func() (float64, error) {
		return float64(db.CheckpointRefusals()), nil
	})
	reg.Gauge("guard_audit_witness_failures_total", "Checkpoints a witness (file, syslog, HTTP) did not get.", func() (float64, error) {
		return float64(db.WitnessFailures()), nil
	})
}

// auditKeyCommand prints the verifier key of the log's checkpoint key.
func auditKeyCommand(a *app) *cobra.Command {
	c := leaf("key", "print the verifier key to pin (C2SP note verifier form)", exactly())
	cf := addCommonFlags(c.Flags())
	c.RunE = a.runs(func(_ context.Context, _ []string) int {
		st, status, ok := a.settingsOrExit(cf)
		if !ok {
			return status
		}
		k, err := store.VerifierKeyOf(keyPath(st))
		if err != nil {
			fmt.Fprintf(a.stderr, "guard audit key: %v\n", err)
			return exitFailure
		}
		fmt.Fprintln(a.stdout, k)
		return exitOK
	})
	return c
}

// auditCheckpointCommand prints the latest signed checkpoint.
func auditCheckpointCommand(a *app) *cobra.Command {
	c := leaf("checkpoint", "print the latest signed checkpoint, to keep elsewhere", exactly())
	cf := addCommonFlags(c.Flags())
	c.RunE = a.runs(func(ctx context.Context, _ []string) int {
		db, _, status, ok := a.openReadOnly(ctx, cf)
		if !ok {
			return status
		}
		defer db.Close()
		c, err := db.LatestCheckpoint(ctx)
		if err != nil {
			fmt.Fprintf(a.stderr, "guard audit checkpoint: %v\n", err)
			return exitFailure
		}
		_, _ = a.stdout.Write(c.Note)
		return exitOK
	})
	return c
}

// auditVerifyCommand verifies the log: the chain, the tree, every
// checkpoint, and what it is given to check against.
func auditVerifyCommand(a *app) *cobra.Command {
	c := leaf("verify", "verify the whole log, its tree and checkpoints (exit 0 verified, 1 failed, 3 cannot verify here)", exactly())
	fs := c.Flags()
	cf := addCommonFlags(fs)
	cpFile := fs.String("checkpoint", "", "a checkpoint kept elsewhere (`FILE`, as guard audit checkpoint printed it) that the log must extend")
	key := fs.String("key", "", "the pinned verifier `KEY` (as guard audit key printed it, or a file holding it); default: the log's own key")
	c.RunE = a.runs(func(ctx context.Context, _ []string) int {
		var o store.VerifyOptions
		if *key != "" {
			v, err := store.ParseVerifier(*key)
			if err != nil {
				fmt.Fprintf(a.stderr, "guard audit verify: --key: %v\n", err)
				return exitUsage
			}
			o.Key = v
		}
		if *cpFile != "" {
			b, err := os.ReadFile(*cpFile)
			if err != nil {
				fmt.Fprintf(a.stderr, "guard audit verify: --checkpoint: %v\n", err)
				return exitUsage
			}
			o.Kept = append(o.Kept, store.KeptCheckpoint{Name: "in " + *cpFile, Note: b})
		}
		// A log that cannot be opened or read here (a database that cannot
		// be reached, a file that is not a guard database) is not one that
		// failed: exit 1 says the log is not intact, and only the log's
		// contents say that.
		cannot := func(err error) int {
			fmt.Fprintf(a.stdout, "CANNOT VERIFY: %v\n", err)
			return exitUnverifiable
		}
		st, status, ok := a.settingsOrExit(cf)
		if !ok {
			return status
		}
		db, err := a.openReadOnlyWith(ctx, st)
		if err != nil {
			return cannot(err)
		}
		defer db.Close()
		// Every checkpoint a file witness holds, not only its latest: a
		// history signed after a truncation gets witnessed too.
		held, err := store.WitnessedCheckpoints(st.Config.Audit.Checkpoints.Witness)
		if err != nil {
			return cannot(err)
		}
		o.Kept = append(o.Kept, held...)
		rep, err := db.VerifyWith(ctx, o)
		if err != nil {
			return cannot(err)
		}
		fmt.Fprintln(a.stdout, verifiedLine(rep))
		return verdictStatus(rep.Verdict())
	})
	return c
}

// verdictStatus is the exit status of a verification's verdict.
func verdictStatus(v store.Verdict) int {
	switch v {
	case store.VerdictFailed:
		return exitFailure
	case store.VerdictUnverifiable:
		return exitUnverifiable
	}
	return exitOK
}

// verifiedLine is what guard audit verify says of a verification: its
// verdict first (ok, FAILED, CANNOT VERIFY), then one line for each
// reason it could not verify and each note.
func verifiedLine(rep store.Report) string {
	var lines []string
	switch rep.Verdict() {
	case store.VerdictFailed:
		lines = append(lines, fmt.Sprintf("FAILED after %d records: %s", rep.Records, rep.Problem))
	case store.VerdictUnverifiable:
	case store.VerdictVerified:
		if rep.Witnessed {
			lines = append(lines, fmt.Sprintf("ok: %d records%s, extends checkpoint %d", rep.Records, prunedNote(rep), rep.Extends))
		} else {
			lines = append(lines, fmt.Sprintf("ok, unwitnessed: %d records%s", rep.Records, prunedNote(rep)))
		}
	}
	lines = append(lines, unverifiedLines(rep.Findings)...)
	if rep.Verdict() == store.VerdictUnverifiable && rep.Records > 0 {
		lines = append(lines, fmt.Sprintf("all else holds: %d records%s, each record's hash, link and leaf, the tree, and the size and root of each checkpoint",
			rep.Records, prunedNote(rep)))
	}
	return strings.Join(lines, "\n")
}

// unverifiedLines are the lines of what could not be verified, and of
// the notes.
func unverifiedLines(f store.Findings) []string {
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
func prunedNote(rep store.Report) string {
	if rep.Pruned == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d pruned by retention)", rep.Pruned)
}

// auditProveCommand prints the inclusion proof of a record, or of a
// call's records, in the latest checkpoint.
func auditProveCommand(a *app) *cobra.Command {
	c := leaf("prove ID", "print an inclusion proof of a record (or of a call's two), checkable offline", exactly("ID"))
	cf := addCommonFlags(c.Flags())
	c.RunE = a.runs(func(ctx context.Context, args []string) int {
		db, _, status, ok := a.openReadOnly(ctx, cf)
		if !ok {
			return status
		}
		defer db.Close()
		p, err := db.Prove(ctx, args[0])
		if err != nil {
			fmt.Fprintf(a.stderr, "guard audit prove: %v\n", err)
			return exitFailure
		}
		_, _ = a.stdout.Write(p)
		return exitOK
	})
	return c
}

// auditExportCommand writes the records with what re-verifies them.
func auditExportCommand(a *app) *cobra.Command {
	c := leaf("export", "write the records, their hashes and proofs (jsonl or csv)", exactly())
	fs := c.Flags()
	cf := addCommonFlags(fs)
	format := fs.String("format", "jsonl", "jsonl or csv")
	since := fs.String("since", "", "only records since `DUR|TIME` (7d, 1h, or RFC 3339); the export then carries each record's proof")
	until := fs.String("until", "", "only records until `TIME` (RFC 3339, or a duration back from now)")
	oneOf(c, "format", "jsonl", "csv")
	c.RunE = a.runs(func(ctx context.Context, _ []string) int {
		o := store.ExportOptions{Format: *format}
		if o.Format != "jsonl" && o.Format != "csv" {
			fmt.Fprintf(a.stderr, "guard audit export: --format %q: want jsonl or csv\n", o.Format)
			return exitUsage
		}
		now := time.Now()
		for _, t := range []struct {
			flag, v string
			dst     *time.Time
		}{{"since", *since, &o.Since}, {"until", *until, &o.Until}} {
			if t.v == "" {
				continue
			}
			v, err := read.ParseSince(t.v, now)
			if err != nil {
				fmt.Fprintf(a.stderr, "guard audit export: --%s: %v\n", t.flag, err)
				return exitUsage
			}
			*t.dst = v
		}
		db, _, status, ok := a.openReadOnly(ctx, cf)
		if !ok {
			return status
		}
		defer db.Close()
		if err := db.Export(ctx, a.stdout, o); err != nil {
			fmt.Fprintf(a.stderr, "guard audit export: %v\n", err)
			return exitFailure
		}
		return exitOK
	})
	return c
}

// auditCheckCommand verifies proofs, exports and checkpoints offline,
// with no database.
func auditCheckCommand(a *app) *cobra.Command {
	c := leaf("check FILE...", "check proofs, exports and checkpoints offline, without a database", atLeastOne("FILE"))
	fs := c.Flags()
	cf := addCommonFlags(fs)
	key := fs.String("key", "", "the verifier `KEY` (as guard audit key printed it, or a file holding it); default: this machine's log's key")
	c.RunE = a.runs(func(_ context.Context, args []string) int {
		var v note.Verifier
		local := "" // the key file read for want of --key
		if *key != "" {
			var err error
			if v, err = store.ParseVerifier(*key); err != nil {
				fmt.Fprintf(a.stderr, "guard audit check: --key: %v\n", err)
				return exitUsage
			}
		} else {
			// This machine's log's key, where there is one: the check
			// says when it is another log's than the files', and when
			// there is none, and checks all else.
			st, status, ok := a.settingsOrExit(cf)
			if !ok {
				return status
			}
			if k, err := store.VerifierKeyOf(keyPath(st)); err == nil {
				v, _ = note.NewVerifier(k) // guard's own form: it parses
				local = keyPath(st)
			} else if !errors.Is(err, os.ErrNotExist) {
				fmt.Fprintf(a.stderr, "guard audit check: %v\n", err)
				return exitUsage
			}
		}
		var files []store.File
		for _, name := range args {
			b, err := os.ReadFile(name)
			if err != nil {
				fmt.Fprintf(a.stderr, "guard audit check: %v\n", err)
				return exitUsage
			}
			files = append(files, store.File{Name: name, Data: b})
		}
		lines, f := store.CheckFiles(v, files)
		for _, l := range lines {
			fmt.Fprintln(a.stdout, l)
		}
		if f.Problem != "" {
			fmt.Fprintf(a.stdout, "FAILED: %s\n", f.Problem)
		}
		for _, l := range unverifiedLines(f) {
			fmt.Fprintln(a.stdout, l)
		}
		if local != "" && len(f.Unverifiable) > 0 {
			fmt.Fprintf(a.stdout, "note: the key was this machine's checkpoint key, at %s: no --key was given\n", local)
		}
		return verdictStatus(f.Verdict())
	})
	return c
}
