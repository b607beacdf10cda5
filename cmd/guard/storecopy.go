package main

import (
	"context"
	"fmt"
	"path/filepath"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/policy"
	"github.com/guard-mcp/guard/store"
	"github.com/spf13/cobra"
)

// guard store copy moves an SQLite database into an empty PostgreSQL
// database (store.Copy): what it moved, the checkpoint the moved log
// extends, and the key and checkpoint file guard on PostgreSQL reads.

func init() { register(storeCommand) }

// storeCommand is guard store: moving the database.
func storeCommand(a *app) *cobra.Command {
	return a.group("store", "move the database: store copy --from PATH.db --to postgres://USER@HOST/DB", "", storeCopyCommand(a))
}

// storeCopyCommand moves the database. --from and --to default to the database
// the settings name (--db, GUARD_DB, the configuration's db), when it is
// an SQLite file and a PostgreSQL URL respectively: after db: in the
// configuration names the new database, --from alone moves the old one.
// The checkpoint key is audit.key_file, else audit.key beside the SQLite
// file: the log keeps its key, which guard on PostgreSQL must be given.
// The rules learned from approvals move from approved.yaml into the
// database, where PostgreSQL mode keeps them.
func storeCopyCommand(a *app) *cobra.Command {
	c := leaf("copy", "move the SQLite database into an empty PostgreSQL database", exactly())
	fs := c.Flags()
	cf := addCommonFlags(fs)
	from := fs.String("from", "", "the SQLite database `PATH` to move (default: the database --db or the configuration names, when it is a file)")
	to := fs.String("to", "", "the empty PostgreSQL database, `postgres://USER@HOST/DB`, without its password: PGPASSWORD or ~/.pgpass gives it (default: the database --db or the configuration names, when it is a URL)")
	c.RunE = a.runs(func(ctx context.Context, _ []string) int {
		// A command line shows in the process list to every user.
		if store.URLHasPassword(*to) {
			fmt.Fprintln(a.stderr, "guard store copy: --to: the URL holds a password, which every user of this machine can read in the process list: give it in PGPASSWORD or a .pgpass file, or name the database in the configuration's db (where ${PGPASSWORD} is expanded) and leave --to out")
			return exitUsage
		}
		st, status, ok := a.settingsOrExit(cf)
		if !ok {
			return status
		}
		if *from == "" && !st.Postgres {
			*from = st.DBPath
		}
		if *to == "" && st.Postgres {
			*to = st.DBPath
		}
		switch {
		case *from == "" || store.IsPostgres(*from):
			fmt.Fprintln(a.stderr, "guard store copy: --from: want the SQLite database file to move")
			return exitUsage
		case *to == "" || !store.IsPostgres(*to):
			fmt.Fprintln(a.stderr, "guard store copy: --to: want the PostgreSQL database to move it into, a postgres:// URL")
			return exitUsage
		}
		src, err := filepath.Abs(*from)
		if err != nil {
			fmt.Fprintf(a.stderr, "guard store copy: --from: %v\n", err)
			return exitUsage
		}
		key := filepath.Join(filepath.Dir(src), "audit.key")
		if st.Config.Audit.KeyFile != "" {
			key = keyPath(st)
		}
		// Rules learned from approvals: on SQLite in approved.yaml, in the
		// rules.d that settings name for an SQLite database (the
		// configuration's, else the one beside the database); on
		// PostgreSQL in the database.
		rulesDir := filepath.Join(filepath.Dir(src), "rules.d")
		if st.ConfigPath != "" {
			rulesDir = filepath.Join(filepath.Dir(st.ConfigPath), "rules.d")
		}
		approved := filepath.Join(rulesDir, policy.ApprovedRulesFile)
		rules, err := policy.LoadRules(approved, a.getenv)
		if err != nil {
			fmt.Fprintf(a.stderr, "guard store copy: the rules learned from approvals: %v\n", err)
			return exitUsage // a configuration file that does not parse
		}
		var o store.CopyOptions
		for _, r := range rules {
			o.Learned = append(o.Learned, store.LearnedRule{Name: r.Name, Server: r.Server, Tool: r.Tool, Method: r.Method,
				URI: r.URI, When: r.When, Action: r.Action, Reason: r.Reason})
		}
		fromOpts := a.storeOptions(st)
		fromOpts.Path, fromOpts.KeyPath = src, key
		toOpts := a.storeOptions(st)
		toOpts.Path, toOpts.KeyPath = *to, key

		rep, err := store.Copy(ctx, fromOpts, toOpts, o)
		if rep == nil {
			fmt.Fprintf(a.stderr, "guard store copy: %v\nnothing was moved\n", err)
			return exitFailure
		}
		fmt.Fprintf(a.stdout, "moved %s to %s:\n", src, guard.DisplayURL(*to))
		for _, t := range rep.Rows {
			fmt.Fprintf(a.stdout, "  %-20s %10d\n", t.Table, t.Rows)
		}
		if rep.Learned > 0 {
			fmt.Fprintf(a.stdout, "  %d rules learned from approvals, from %s (guard on PostgreSQL reads them from the database, not from the file)\n", rep.Learned, approved)
		}
		if c := rep.Checkpoint; c != nil {
			fmt.Fprintf(a.stdout, "checkpoint: %d records, root %s\n", c.Size, c.Root)
		}
		if err != nil {
			fmt.Fprintf(a.stderr, "guard store copy: %v\n", err)
			return exitFailure
		}
		fmt.Fprintf(a.stdout, "verify: %s\n", verifiedLine(rep.Verified))
		fmt.Fprintf(a.stdout, "checkpoint key: %s\ncheckpoint file: %s\n", rep.KeyPath, rep.CheckpointPath)
		if st.Config.Audit.KeyFile == "" {
			fmt.Fprintf(a.stdout, "guard on PostgreSQL reads the log's key from audit.key_file: set it to %s in the configuration\n", rep.KeyPath)
		}
		return exitOK
	})
	return c
}
