package main

import (
	"context"

	"github.com/spf13/cobra"
)

func init() { register(policyCommand) }

// policyCommand is guard policy: the configuration's rules checked,
// tried on a call, replayed over past calls, and reloaded.
func policyCommand(a *app) *cobra.Command {
	return a.group("policy", "check, test, replay and reload the policy", "",
		policyCheckCommand(a), policyTestCommand(a), policyReplayCommand(a), policyReloadCommand(a))
}

// policyCheckCommand validates the configuration and prints the rules in
// the order they apply.
func policyCheckCommand(a *app) *cobra.Command {
	c := leaf("check", "validate the configuration; print the rules in order", exactly())
	cf := addCommonFlags(c.Flags())
	c.RunE = a.runs(func(ctx context.Context, _ []string) int {
		st, status, ok := a.settingsOrExit(cf)
		if !ok {
			return status
		}
		return a.wiring().PolicyCheck(st)
	})
	return c
}

// policyReloadCommand applies the configuration on disk in every running
// guard on the database: a change that alters decisions waits for a
// person, and the person running this command is that person. It prints
// what changed (as the running guards noted it) and the digest it
// applies, so that a file changed after the review is not what gets
// applied: a running guard applies only files with that digest. It
// applies the change as the UI does (store.ApplyConfig): a change
// dismissed already stays dismissed.
func policyReloadCommand(a *app) *cobra.Command {
	c := leaf("reload", "apply a configuration change that waits for a person, in every running guard", exactly())
	fs := c.Flags()
	cf := addCommonFlags(fs)
	by := fs.String("by", "", "the `NAME` the change is applied under (default: the user running this command)")
	c.RunE = a.runs(func(ctx context.Context, _ []string) int {
		st, status, ok := a.settingsOrExit(cf)
		if !ok {
			return status
		}
		return a.wiring().PolicyReload(ctx, st, a.orCurrentUser(*by))
	})
	return c
}
