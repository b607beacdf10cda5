package main

import (
	"context"
	"fmt"

	"github.com/guard-mcp/guard/store"
	"github.com/guard-mcp/guard/store/postgres"
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
		if postgres.URLHasPassword(*to) {
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
		return a.wiring().StoreCopy(ctx, st, *from, *to)
	})
	return c
}
