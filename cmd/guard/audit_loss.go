package main

import (
	"context"
	"fmt"
)

// auditAcknowledgeLoss records that a person has seen a loss the log
// reports (a damaged journal of a process that stopped), so that it is
// no longer an alert; the acknowledgement is a record of its own.
func auditAcknowledgeLoss(ctx context.Context, a *app, args []string) int {
	fs := a.flagSet("audit acknowledge-loss")
	cf := addCommonFlags(fs)
	reason := fs.String("reason", "", "what was done about it")
	by := fs.String("by", "", "who acknowledges (default: the user running this command)")
	id, status, ok := a.parseWithID(fs, args)
	if !ok {
		return status
	}
	if id == "" {
		fmt.Fprintln(a.stderr, "usage: guard audit acknowledge-loss ID [--reason TEXT] (ID: the loss's record, as guard audit verify names it)")
		return exitUsage
	}
	who := *by
	if who == "" {
		who = currentUser(a.getenv)
	}
	db, _, status, ok := a.open(ctx, cf)
	if !ok {
		return status
	}
	defer db.Close()
	rec, err := db.AcknowledgeLoss(ctx, id, who, *reason)
	if err != nil {
		fmt.Fprintf(a.stderr, "guard audit acknowledge-loss: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(a.stdout, "%s: the loss is acknowledged by %s (record %s)\n", id, who, rec.ID)
	return exitOK
}
