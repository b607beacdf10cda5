package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/guard-mcp/guard/store"
	"github.com/spf13/cobra"
)

// auditPruneCommand runs the retention job now (guard run and guard serve
// run it at start and hourly): the records past audit.retention are
// archived and their bodies removed from the database. With --dry-run it
// says which records would be, and writes nothing.
func auditPruneCommand(a *app) *cobra.Command {
	c := leaf("prune", "archive, then blank, what audit.retention says is past keeping", exactly())
	fs := c.Flags()
	cf := addCommonFlags(fs)
	dry := fs.Bool("dry-run", false, "say which records would be archived, and write nothing")
	c.RunE = a.runs(func(ctx context.Context, _ []string) int {
		st, status, ok := a.settingsOrExit(cf)
		if !ok {
			return status
		}
		o := st.RetentionOptions()
		if o.Retention <= 0 {
			fmt.Fprintln(a.stderr, "guard audit prune: audit.retention is off: records keep their bodies (set it, e.g. audit.retention: 400d)")
			return exitUsage
		}
		o.DryRun = *dry
		var db *store.DB
		var err error
		if o.DryRun {
			db, err = store.OpenReadOnly(ctx, store.Options{Path: st.DBPath, Logger: a.logger, KeyPath: st.KeyPath()})
		} else {
			db, err = a.wiring().OpenStore(ctx, st)
		}
		if err != nil {
			fmt.Fprintf(a.stderr, "guard: %v\n", err)
			return exitFailure
		}
		defer db.Close()
		var got []store.Pruned
		if o.DryRun {
			got, err = db.Pruning().Prune(ctx, o)
		} else {
			got, err = db.Pruning().PruneIfDue(ctx, o, 0)
		}
		var n int64
		for _, p := range got {
			n += p.Count
			if o.DryRun {
				fmt.Fprintf(a.stdout, "would archive %d records (%d to %d, in the checkpoint of %d records) in %s\n",
					p.Count, p.First, p.Last, p.Checkpoint, o.ArchiveDir)
				continue
			}
			fmt.Fprintf(a.stdout, "archived %d records (%d to %d) in %s (sha256 %s), retention record %s\n",
				p.Count, p.First, p.Last, filepath.Clean(p.Archive), p.SHA256, p.Record)
		}
		if err != nil {
			if errors.Is(err, store.ErrRetentionRunning) {
				fmt.Fprintf(a.stderr, "guard audit prune: %v: try again once it is done\n", err)
			} else {
				fmt.Fprintf(a.stderr, "guard audit prune: %v\n", err)
			}
			return exitFailure
		}
		switch {
		case n == 0:
			fmt.Fprintln(a.stdout, "nothing to prune: no record past audit.retention is in the latest checkpoint and done with")
		case o.DryRun:
			fmt.Fprintf(a.stdout, "would remove the bodies of %d records\n", n)
		default:
			fmt.Fprintf(a.stdout, "removed the bodies of %d records\n", n)
		}
		return exitOK
	})
	return c
}
