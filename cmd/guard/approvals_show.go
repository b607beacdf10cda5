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
)

// approvalLine is one approval as approvals list --format jsonl and
// approvals show --format jsonl print it: the audit records' snake_case
// names, with the approval's rules and reviews.
type approvalLine struct {
	ID         string                 `json:"id"`
	CallID     string                 `json:"call_id,omitempty"`
	State      string                 `json:"state"`
	Session    string                 `json:"session,omitempty"`
	Client     string                 `json:"client,omitempty"`
	Server     string                 `json:"server"`
	Tool       string                 `json:"tool"`
	Arguments  string                 `json:"arguments,omitempty"`
	Digest     string                 `json:"digest,omitempty"`
	Pin        string                 `json:"pin,omitempty"`
	Rule       string                 `json:"rule,omitempty"`
	HeldReason string                 `json:"held_reason,omitempty"`
	DecidedBy  string                 `json:"decided_by,omitempty"`
	Reason     string                 `json:"reason,omitempty"`
	Created    string                 `json:"created"`
	Expires    string                 `json:"expires"`
	Decided    string                 `json:"decided,omitempty"`
	Used       string                 `json:"used,omitempty"`
	Requester  *guard.Identity        `json:"requester,omitempty"`
	Approvers  *guard.Approvers       `json:"approvers,omitempty"`
	Reviews    []guard.ApprovalReview `json:"reviews,omitempty"`
	// Approvals and Needed count the distinct people who approved and
	// how many must; Waiting says what a pending approval still needs.
	Approvals int    `json:"approvals"`
	Needed    int    `json:"needed"`
	Waiting   string `json:"waiting,omitempty"`
}

func lineOf(x *guard.Approval) approvalLine {
	l := approvalLine{ID: x.ID, CallID: x.CallID, State: x.State, Session: x.Session, Client: x.Client, Server: x.Server,
		Tool: x.Tool, Arguments: x.Arguments, Digest: x.Digest, Pin: x.Pin, Rule: x.Rule, HeldReason: x.HeldReason,
		DecidedBy: x.DecidedBy, Reason: x.Reason, Created: rfc3339(x.CreatedAt), Expires: rfc3339(x.ExpiresAt),
		Decided: rfc3339(x.DecidedAt), Used: rfc3339(x.UsedAt), Reviews: x.Reviews,
		Approvals: guard.Approvals(x.Reviews), Needed: x.Approvers.Needed()}
	if !x.Caller.IsZero() {
		l.Requester = &x.Caller
	}
	if !x.Approvers.IsZero() {
		l.Approvers = &x.Approvers
	}
	if x.State == guard.ApprovalPending {
		l.Waiting = approvals.Waiting(x)
	}
	return l
}

// rfc3339 writes a time as the audit records do (RFC 3339, UTC,
// milliseconds); "" for none.
func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time3339ms)
}

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

// approvalsShow prints one approval: the held call, who made it, its
// rules, each review, and what it still needs.
func approvalsShow(ctx context.Context, a *app, args []string) int {
	fs := a.flagSet("approvals show")
	cf := addCommonFlags(fs)
	format := fs.String("format", "text", "text or jsonl")
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
		fmt.Fprintln(a.stderr, "usage: guard approvals show ID [--format text|jsonl]")
		return exitUsage
	}
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
	row("held at", rfc3339(x.CreatedAt))
	row("expires", rfc3339(x.ExpiresAt))
	if !x.Caller.IsZero() {
		row("requested by", x.Caller.Name()+" (cannot decide on it)")
	}
	if !x.Approvers.IsZero() {
		row("needs", x.Approvers.String()+", each a verified identity")
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
		line := fmt.Sprintf("%s %s at %s (%s)", r.By.Name(), verb, rfc3339(r.Time), how)
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
		row("decided by", x.DecidedBy+" at "+rfc3339(x.DecidedAt))
		row("reason", dash(x.Reason))
	}
	if x.Arguments != "" {
		row("arguments", x.Arguments)
	}
	tw.Flush()
	return exitOK
}
