package main

import (
	"context"
	"fmt"
	"os/user"

	"github.com/spf13/cobra"
)

func init() { register(approvalsCommand) }

// approvalsCommand is guard approvals: the held calls, and the command
// line's decisions on them.
func approvalsCommand(a *app) *cobra.Command {
	return a.group("approvals", "list, show, approve and deny held calls", "",
		approvalsListCommand(a), approvalsShowCommand(a), approvalsDecideCommand(a, true), approvalsDecideCommand(a, false))
}

// approvalsListCommand lists the held calls, or every approval.
func approvalsListCommand(a *app) *cobra.Command {
	c := leaf("list", "list the held calls (--state all: every decision too)", exactly())
	fs := c.Flags()
	cf := addCommonFlags(fs)
	format := fs.String("format", "table", "table, jsonl or csv")
	state := fs.String("state", "pending", "pending, or all")
	oneOf(c, "format", "table", "jsonl", "csv")
	oneOf(c, "state", "pending", "all")
	c.RunE = a.runs(func(ctx context.Context, _ []string) int {
		if *format != "table" && *format != "jsonl" && *format != "csv" {
			fmt.Fprintf(a.stderr, "guard approvals list: --format %q: want table, jsonl or csv\n", *format)
			return exitUsage
		}
		db, _, status, ok := a.openReadOnly(ctx, cf)
		if !ok {
			return status
		}
		defer db.Close()
		return a.wiring().ApprovalsList(ctx, db, *state, *format)
	})
	return c
}

// approvalsDecideCommand is guard approvals approve, or deny: a person's
// decision on a held call, made at the command line.
func approvalsDecideCommand(a *app, approve bool) *cobra.Command {
	c := leaf("approve ID", "approve a held call: it passes once, when its client calls again", exactly("ID"))
	if !approve {
		c = leaf("deny ID --reason TEXT", "deny a held call: its client reads the reason", exactly("ID"))
	}
	fs := c.Flags()
	cf := addCommonFlags(fs)
	reason := fs.String("reason", "", "why: the `TEXT` the client reads")
	by := fs.String("by", "", "the `NAME` the decision is recorded under (default: the user running this command)")
	if !approve {
		_ = c.MarkFlagRequired("reason") // it exists
	}
	c.RunE = a.runs(func(ctx context.Context, args []string) int {
		id := args[0]
		if !approve && *reason == "" {
			fmt.Fprintln(a.stderr, "guard approvals deny: --reason is required: the client reads it")
			return exitUsage
		}
		who := a.orCurrentUser(*by)
		db, st, status, ok := a.open(ctx, cf)
		if !ok {
			return status
		}
		defer db.Close()
		return a.wiring().ApprovalsDecide(ctx, db, st, id, approve, who, *reason)
	})
	return c
}

// orCurrentUser is name, or when it is "" the user running guard: whom a
// decision at the command line is recorded under when --by does not say.
func (a *app) orCurrentUser(name string) string {
	if name != "" {
		return name
	}
	return currentUser(a.getenv)
}

func currentUser(getenv func(string) string) string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if u := getenv("USER"); u != "" {
		return u
	}
	return "unknown"
}
