package main

import (
	"context"
	"fmt"

	"github.com/guard-mcp/guard/store"
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

// printAlerts says, after a verification, what losses the log reports
// that no one has acknowledged. The log holds them consistently, so they
// do not fail the verification.
func printAlerts(ctx context.Context, a *app, db *store.DB) error {
	alerts, err := db.Alerts(ctx)
	if err != nil {
		return err
	}
	for _, al := range alerts {
		fmt.Fprintf(a.stdout, "WARNING: unacknowledged loss %s (%s): %s\n  once seen to, record it: guard audit acknowledge-loss %s --reason TEXT\n",
			al.ID, al.Time.Format("2006-01-02T15:04:05.000Z07:00"), al.Text, al.ID)
	}
	return nil
}

// unchainedLine is what guard audit verify says in place of "ok" while
// journals of guard processes that stopped hold acknowledged records the
// chain does not: the log it verified is not the whole log.
func unchainedLine(u store.Unchained, rep store.Report) string {
	s := fmt.Sprintf("NOT VERIFIED: %d acknowledged records not yet in the chain (journals of stopped processes); any writable guard command moves them in", u.Records)
	if u.DamagedBytes > 0 {
		s += fmt.Sprintf("; %d bytes of those journals cannot be read, which that command records as a possible loss", u.DamagedBytes)
	}
	return s + fmt.Sprintf(" (the %d records in the chain verify%s)", rep.Records, prunedNote(rep))
}
