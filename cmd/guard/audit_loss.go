package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
)

// auditAcknowledgeLossCommand records that a person has seen a loss the
// log reports (a damaged journal of a process that stopped), so that it
// is no longer an alert; the acknowledgement is a record of its own.
func auditAcknowledgeLossCommand(a *app) *cobra.Command {
	c := leaf("acknowledge-loss ID", "record that a person has seen a loss guard audit verify names (ID: the loss's record)", exactly("ID"))
	fs := c.Flags()
	cf := addCommonFlags(fs)
	reason := fs.String("reason", "", "what was done about it: `TEXT` recorded with the acknowledgement")
	by := fs.String("by", "", "the `NAME` the acknowledgement is recorded under (default: the user running this command)")
	c.RunE = a.runs(func(ctx context.Context, args []string) int {
		id := args[0]
		who := a.orCurrentUser(*by)
		db, _, status, ok := a.open(ctx, cf)
		if !ok {
			return status
		}
		defer db.Close()
		rec, err := db.Integrity().AcknowledgeLoss(ctx, id, who, *reason)
		if err != nil {
			fmt.Fprintf(a.stderr, "guard audit acknowledge-loss: %v\n", err)
			return exitFailure
		}
		fmt.Fprintf(a.stdout, "%s: the loss is acknowledged by %s (record %s)\n", id, who, rec.ID)
		return exitOK
	})
	return c
}
