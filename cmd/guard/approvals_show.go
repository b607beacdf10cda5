package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/approvals"
	"github.com/spf13/cobra"
)

// approvalsNeeds is the NEEDS column of approvals list: approvals so far
// of those needed, and who may give them; "-" for one by anyone.
func approvalsNeeds(x *guard.Approval) string {
	if x.Approvers.IsZero() {
		return "-"
	}
	s := fmt.Sprintf("%d/%d", guard.Approvals(x.Reviews), x.Approvers.Needed())
	if who := x.Approvers.Who(); who != "anyone" {
		s += " " + who
	}
	return s
}

// approvalsShowCommand prints one approval: the held call, who made it, its
// rules, each review, and what it still needs.
func approvalsShowCommand(a *app) *cobra.Command {
	c := leaf("show ID", "show one held call: its arguments, approval rules and reviews", exactly("ID"))
	fs := c.Flags()
	cf := addCommonFlags(fs)
	format := fs.String("format", "text", "text or jsonl")
	oneOf(c, "format", "text", "jsonl")
	c.RunE = a.runs(func(ctx context.Context, args []string) int {
		id := args[0]
		if *format != "text" && *format != "jsonl" {
			fmt.Fprintf(a.stderr, "guard approvals show: --format %q: want text or jsonl\n", *format)
			return exitUsage
		}
		db, _, status, ok := a.openReadOnly(ctx, cf)
		if !ok {
			return status
		}
		defer db.Close()
		x, err := db.Approval(ctx, id)
		switch {
		case errors.Is(err, guard.ErrNotFound):
			fmt.Fprintf(a.stderr, "guard approvals show: no held call with id %s\n", id)
			return exitFailure
		case err != nil:
			fmt.Fprintf(a.stderr, "guard approvals show: %v\n", err)
			return exitFailure
		}
		if x.State == guard.ApprovalPending && !time.Now().Before(x.ExpiresAt) {
			x.State = guard.ApprovalExpired // as approvals list shows it: reading writes nothing
		}
		if *format == "jsonl" {
			enc := json.NewEncoder(a.stdout)
			enc.SetEscapeHTML(false)
			_ = enc.Encode(lineOf(x))
			return exitOK
		}
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
		row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
		row("id", x.ID)
		row("state", x.State)
		row("server", x.Server)
		row("tool", x.Tool)
		row("client", dash(x.Client))
		row("held by", x.Rule+": "+x.HeldReason)
		row("held at", recordTime(x.CreatedAt))
		row("expires", recordTime(x.ExpiresAt))
		if !x.Caller.IsZero() {
			row("requested by", x.Caller.Name()+" (cannot decide on it)")
		}
		if !x.Approvers.IsZero() {
			row("needs", x.Approvers.String()+", each a verified identity")
		}
		if what, where := guard.RequiredViaText(x.RequiredVia); what != "" {
			row("decided with", what+", as configured when it was held: "+where+"; a name typed here cannot decide it")
		}
		for i, r := range x.Reviews {
			verb := "denied"
			if r.Approve {
				verb = "approved"
			}
			how := "typed name, unverified"
			if r.Via != "" {
				how = "verified: " + r.Via
			}
			if len(r.By.Groups) > 0 {
				how += "; groups " + strings.Join(r.By.Groups, ", ")
			}
			line := fmt.Sprintf("%s %s at %s (%s)", r.By.Name(), verb, recordTime(r.Time), how)
			if r.Reason != "" {
				line += ": " + r.Reason
			}
			row(fmt.Sprintf("review %d", i+1), line)
		}
		if x.State == guard.ApprovalPending {
			if w := approvals.Waiting(x); w != "" {
				row("still needed", w)
			}
		}
		if x.DecidedBy != "" {
			row("decided by", x.DecidedBy+" at "+recordTime(x.DecidedAt))
			row("reason", dash(x.Reason))
		}
		// What approving does, where it is not what it seems: a call whose
		// client has gone is not run by it; one its tool's review left
		// pending needs a decision of its own.
		if gone := approvals.ClientGoneText(x, recordTime); gone != "" {
			row("client gone", gone)
		}
		if x.Rule == guard.ToolReviewRule && x.State == guard.ApprovalPending {
			r, err := db.Review(ctx, x.Server, x.Tool, x.Pin)
			if err != nil {
				fmt.Fprintf(a.stderr, "guard approvals show: %v\n", err)
				return exitFailure
			}
			if kept := approvals.KeptAfterReview(x, r, recordTime); kept != "" {
				row("review", kept)
			}
		}
		if x.Arguments != "" {
			row("arguments", x.Arguments)
		}
		tw.Flush()
		return exitOK
	})
	return c
}
