package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/guard-mcp/guard/audit"
	"github.com/guard-mcp/guard/config/read"
	"github.com/guard-mcp/guard/store"
	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/note"
)

// The audit log's Merkle tree, seen from the command line: the key to pin,
// the latest checkpoint to keep, verification against them, inclusion
// proofs, exports, and the offline check of proofs and exports
// (docs/tree.md).

// auditKeyCommand prints the verifier key of the log's checkpoint key.
func auditKeyCommand(a *app) *cobra.Command {
	c := leaf("key", "print the verifier key to pin (C2SP note verifier form)", exactly())
	cf := addCommonFlags(c.Flags())
	c.RunE = a.runs(func(_ context.Context, _ []string) int {
		st, status, ok := a.settingsOrExit(cf)
		if !ok {
			return status
		}
		k, err := audit.VerifierKeyOf(st.KeyPath())
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
		var o audit.VerifyOptions
		if *key != "" {
			v, err := audit.ParseVerifier(*key)
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
			o.Kept = append(o.Kept, audit.KeptCheckpoint{Name: "in " + *cpFile, Note: b})
		}
		// A log that cannot be opened or read here (a database that cannot
		// be reached, a file that is not a guard database) is not one that
		// failed: exit 1 says the log is not intact, and only the log's
		// contents say that.
		st, status, ok := a.settingsOrExit(cf)
		if !ok {
			return status
		}
		return a.wiring().AuditVerify(ctx, st, o)
	})
	return c
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
		p, err := db.Verifier().Prove(ctx, args[0])
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
		if err := db.Reader().Export(ctx, a.stdout, o); err != nil {
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
			if v, err = audit.ParseVerifier(*key); err != nil {
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
			if k, err := audit.VerifierKeyOf(st.KeyPath()); err == nil {
				v, _ = note.NewVerifier(k) // guard's own form: it parses
				local = st.KeyPath()
			} else if !errors.Is(err, os.ErrNotExist) {
				fmt.Fprintf(a.stderr, "guard audit check: %v\n", err)
				return exitUsage
			}
		}
		return a.wiring().AuditCheck(v, local, args)
	})
	return c
}
