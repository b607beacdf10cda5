package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/user"
	"text/tabwriter"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/approvals"
	"github.com/guard-mcp/guard/policy"
)

func init() {
	commands["approvals"] = command{summary: "list, show, approve and deny held calls: approvals list|show|approve|deny", run: cmdApprovals}
}

func cmdApprovals(ctx context.Context, a *app, args []string) int {
	if status, ok := a.subcommandUsage(args, "usage: guard approvals list | show ID | approve ID [--reason TEXT] | deny ID --reason TEXT"); !ok {
		return status
	}
	switch args[0] {
	case "list":
		return approvalsList(ctx, a, args[1:])
	case "show":
		return approvalsShow(ctx, a, args[1:])
	case "approve":
		return approvalsDecide(ctx, a, args[1:], true)
	case "deny":
		return approvalsDecide(ctx, a, args[1:], false)
	}
	fmt.Fprintf(a.stderr, "guard approvals: unknown subcommand %q (list, show, approve, deny)\n", args[0])
	return exitUsage
}

func approvalsList(ctx context.Context, a *app, args []string) int {
	fs := a.flagSet("approvals list")
	cf := addCommonFlags(fs)
	format := fs.String("format", "table", "table or jsonl")
	state := fs.String("state", "pending", "pending, or all")
	if status, ok := a.parseFlags(fs, args); !ok {
		return status
	}
	if *format != "table" && *format != "jsonl" {
		fmt.Fprintf(a.stderr, "guard approvals list: --format %q: want table or jsonl\n", *format)
		return exitUsage
	}
	db, _, status, ok := a.openReadOnly(ctx, cf)
	if !ok {
		return status
	}
	defer db.Close()
	s := guard.ApprovalPending
	if *state == "all" {
		s = ""
	}
	all, err := db.Approvals(ctx, s)
	if err != nil {
		fmt.Fprintf(a.stderr, "guard approvals list: %v\n", err)
		return exitFailure
	}
	// Listing writes nothing: a pending hold past its expiry is shown as
	// expired (the relay or the UI records the expiry itself).
	now := time.Now()
	var list []*guard.Approval
	for _, x := range all {
		if x.State == guard.ApprovalPending && !now.Before(x.ExpiresAt) {
			if s == guard.ApprovalPending {
				continue
			}
			x.State = guard.ApprovalExpired
		}
		list = append(list, x)
	}
	if *format == "jsonl" {
		enc := json.NewEncoder(a.stdout)
		enc.SetEscapeHTML(false)
		for _, x := range list {
			_ = enc.Encode(lineOf(x))
		}
		return exitOK
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tAGE\tLEFT\tSERVER\tTOOL\tCLIENT\tHELD BECAUSE\tAPPROVALS\tARGUMENTS")
	for _, x := range list {
		left := "-"
		if x.State == guard.ApprovalPending {
			left = guard.HumanDuration(x.ExpiresAt.Sub(now))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", x.ID, x.State, guard.HumanDuration(now.Sub(x.CreatedAt)),
			left, x.Server, x.Tool, dash(x.Client), clip(x.HeldReason, 40), approvalsNeeds(x), clip(x.Arguments, 60))
	}
	tw.Flush()
	return exitOK
}

func approvalsDecide(ctx context.Context, a *app, args []string, approve bool) int {
	verb := "deny"
	if approve {
		verb = "approve"
	}
	fs := a.flagSet("approvals " + verb)
	cf := addCommonFlags(fs)
	reason := fs.String("reason", "", "why (required to deny)")
	by := fs.String("by", "", "who decides (default: the user running this command)")
	// The id may come before or after the flags.
	var id string
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		id, args = args[0], args[1:]
	}
	if status, ok := a.parseFlags(fs, args); !ok {
		return status
	}
	if id == "" && fs.NArg() == 1 {
		id = fs.Arg(0)
	}
	if id == "" {
		fmt.Fprintf(a.stderr, "usage: guard approvals %s ID [--reason TEXT]\n", verb)
		return exitUsage
	}
	if !approve && *reason == "" {
		fmt.Fprintln(a.stderr, "guard approvals deny: --reason is required: the client reads it")
		return exitUsage
	}
	who := *by
	if who == "" {
		who = currentUser(a.getenv)
	}
	db, st, status, ok := a.open(ctx, cf)
	if !ok {
		return status
	}
	defer db.Close()
	if refuseCLIDecision(a, st.Config, "approvals "+verb) {
		return exitFailure
	}
	m := approvals.New(db, approvals.Options{Timeout: st.Config.Approval.Timeout})
	x, err := m.Decide(ctx, id, approve, who, *reason)
	switch {
	case errors.Is(err, guard.ErrNotFound):
		fmt.Fprintf(a.stderr, "guard approvals %s: no held call with id %s\n", verb, id)
		return exitFailure
	case err != nil:
		fmt.Fprintf(a.stderr, "guard approvals %s: %v\n", verb, err)
		return exitFailure
	}
	if x.State == guard.ApprovalPending {
		fmt.Fprintf(a.stdout, "%s: your approval of %s on %s is recorded; it waits for %s\n", x.ID, x.Tool, x.Server, approvals.Waiting(x))
		return exitOK
	}
	fmt.Fprintf(a.stdout, "%s: %s %s on %s (by %s)\n", x.ID, x.State, x.Tool, x.Server, x.DecidedBy)
	return exitOK
}

// refuseCLIDecision says why, and reports true, where the configuration
// turns decisions on the command line off. A name typed here proves
// nothing: where the UI needs a verified identity, anyone who can run
// guard (a process that stole the UI token, say) could otherwise decide
// as anyone.
func refuseCLIDecision(a *app, c *policy.Config, cmd string) bool {
	if c.CLIDecisions() {
		return false
	}
	fmt.Fprintf(a.stderr, "guard %s: refused: %s, so decisions need a verified identity and a name typed here is not one; "+
		"decide in the UI (guard ui url), or set approval.cli: true to allow the command line\n", cmd, cliOffBecause(c))
	return true
}

// cliOffBecause says why the configuration turns command-line decisions
// off.
func cliOffBecause(c *policy.Config) string {
	switch {
	case c.Approval.CLISet:
		return "approval.cli is false"
	case c.UI.Passkey == policy.PasskeyRequired:
		return "ui.passkey is required"
	}
	return "the UI logs in only through the identity provider (ui.oidc, ui.token_login: false)"
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
