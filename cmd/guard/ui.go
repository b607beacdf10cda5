package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

func init() { register(uiCommand) }

// uiCommand is guard ui: the approval UI's address, and passkeys'
// enrolment.
func uiCommand(a *app) *cobra.Command {
	return a.group("ui", "the approval UI: its address with the login token, and passkey enrolment", "",
		uiURLCommand(a), uiEnrollCommand(a))
}

// uiURLCommand prints the address of the approval UI a running guard
// serves for this database, with the login token.
func uiURLCommand(a *app) *cobra.Command {
	c := leaf("url", "print the address the UI is served on, with its login token (exit 1 when none serves)", exactly())
	cf := addCommonFlags(c.Flags())
	c.RunE = a.runs(func(ctx context.Context, _ []string) int {
		st, status, ok := a.settingsOrExit(cf)
		if !ok {
			return status
		}
		return a.wiring().UIURL(ctx, st)
	})
	return c
}

// uiEnrollCommand prints a one-time link that enrols a passkey for the
// person running it. The code is kept in the database only (as its
// SHA-256): a process that holds the UI token and not the database cannot
// enrol.
func uiEnrollCommand(a *app) *cobra.Command {
	c := leaf("enroll", "print a one-time link that enrols a passkey", exactly())
	fs := c.Flags()
	cf := addCommonFlags(fs)
	name := fs.String("name", "", "whom the passkey is for, as decisions will name them (default: the user running this command)")
	valid := fs.Duration("valid", 5*time.Minute, "how long the link works (once)")
	c.RunE = a.runs(func(ctx context.Context, _ []string) int {
		if *valid <= 0 || *valid > time.Hour {
			fmt.Fprintln(a.stderr, "guard ui enroll: --valid: between 1s and 1h")
			return exitUsage
		}
		who := a.orCurrentUser(strings.TrimSpace(*name))
		db, st, status, ok := a.open(ctx, cf)
		if !ok {
			return status
		}
		defer db.Close()
		return a.wiring().UIEnroll(ctx, db, st, who, *valid)
	})
	return c
}
