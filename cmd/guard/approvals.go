package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"os/user"
	"text/tabwriter"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/approvals"
	"github.com/guard-mcp/guard/config"
	"github.com/guard-mcp/guard/web"
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
		switch *format {
		case "jsonl":
			enc := json.NewEncoder(a.stdout)
			enc.SetEscapeHTML(false)
			for _, x := range list {
				_ = enc.Encode(lineOf(x))
			}
			return exitOK
		case "csv":
			w := csv.NewWriter(a.stdout)
			_ = w.Write(approvalColumns)
			for _, x := range list {
				_ = w.Write(inertCells(lineOf(x).cells()...))
			}
			w.Flush()
			if err := w.Error(); err != nil {
				fmt.Fprintf(a.stderr, "guard approvals list: %v\n", err)
				return exitFailure
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
	})
	return c
}

// approvalLine is an approval as approvals list writes it in jsonl and csv:
// under the audit records' names, its times as the records write theirs
// (RFC 3339, UTC, milliseconds; empty when it has not happened).
type approvalLine struct {
	ID            string `json:"id"`
	CallID        string `json:"call_id"`
	State         string `json:"state"`
	Session       string `json:"session"`
	Client        string `json:"client"`
	Server        string `json:"server"`
	Tool          string `json:"tool"`
	Arguments     string `json:"arguments"`
	Digest        string `json:"digest"`
	Pin           string `json:"pin"`
	PolicyVersion string `json:"policy_version"`
	Rule          string `json:"rule"`
	HeldReason    string `json:"held_reason"`
	DecidedBy     string `json:"decided_by"`
	Reason        string `json:"reason"`
	Created       string `json:"created"`
	Expires       string `json:"expires"`
	Decided       string `json:"decided"`
	Used          string `json:"used"`
	Scope         string `json:"scope"`
	SessionEnded  string `json:"session_ended"`
	// RequiredVia is how whoever decides must have been verified, as the
	// configuration said when the call was held (oidc, passkey); "" for
	// any way, a typed name too.
	RequiredVia string `json:"required_via,omitempty"`
	// Requester is who the front authenticated for the held call; the
	// approval's rules, its reviews, and what it still needs follow.
	Requester *guard.Identity        `json:"requester,omitempty"`
	Approvers *guard.Approvers       `json:"approvers,omitempty"`
	Reviews   []guard.ApprovalReview `json:"reviews,omitempty"`
	// Approvals and Needed count the distinct people who approved and
	// how many must; Waiting says what a pending approval still needs.
	Approvals int    `json:"approvals"`
	Needed    int    `json:"needed"`
	Waiting   string `json:"waiting,omitempty"`
}

// approvalColumns are the csv header: approvalLine's names, in its order.
var approvalColumns = []string{"id", "call_id", "state", "session", "client", "server", "tool", "arguments", "digest",
	"pin", "policy_version", "rule", "held_reason", "decided_by", "reason", "created", "expires", "decided", "used",
	"scope", "session_ended"}

func lineOf(x *guard.Approval) approvalLine {
	l := approvalLine{ID: x.ID, CallID: x.CallID, State: x.State, Session: x.Session, Client: x.Client,
		Server: x.Server, Tool: x.Tool, Arguments: x.Arguments, Digest: x.Digest, Pin: x.Pin,
		PolicyVersion: x.PolicyVersion, Rule: x.Rule, HeldReason: x.HeldReason, DecidedBy: x.DecidedBy,
		Reason: x.Reason, Created: recordTime(x.CreatedAt), Expires: recordTime(x.ExpiresAt),
		Decided: recordTime(x.DecidedAt), Used: recordTime(x.UsedAt), Scope: x.Scope, SessionEnded: recordTime(x.SessionEnded),
		RequiredVia: x.RequiredVia, Reviews: x.Reviews, Approvals: guard.Approvals(x.Reviews), Needed: x.Approvers.Needed()}
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

// cells are the line's values in approvalColumns' order.
func (l approvalLine) cells() []string {
	return []string{l.ID, l.CallID, l.State, l.Session, l.Client, l.Server, l.Tool, l.Arguments, l.Digest,
		l.Pin, l.PolicyVersion, l.Rule, l.HeldReason, l.DecidedBy, l.Reason, l.Created, l.Expires, l.Decided, l.Used,
		l.Scope, l.SessionEnded}
}

// recordTime writes a time as audit records do; "" for the zero time.
func recordTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time3339ms)
}

// approvalsDecideCommand is guard approvals approve, or deny: a person's
// decision on a held call, made at the command line.
func approvalsDecideCommand(a *app, approve bool) *cobra.Command {
	verb := "deny"
	if approve {
		verb = "approve"
	}
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
	})
	return c
}

// refuseCLIDecision says why, and reports true, where the configuration
// turns decisions on the command line off. A name typed here proves
// nothing: where the UI needs a verified identity, anyone who can run
// guard (a process that stole the UI token, say) could otherwise decide
// as anyone.
func refuseCLIDecision(a *app, c *config.Config, cmd string) bool {
	if c.CLIDecisions() {
		return false
	}
	fmt.Fprintf(a.stderr, "guard %s: refused: %s, so decisions need a verified identity and a name typed here is not one; "+
		"decide in the UI (guard ui url), or set approval.cli: true to allow the command line\n", cmd, cliOffBecause(c))
	return true
}

// cliOffBecause says why the configuration turns command-line decisions
// off.
func cliOffBecause(c *config.Config) string {
	switch {
	case c.Approval.CLISet:
		return "approval.cli is false"
	case c.UI.Passkey == web.PasskeyRequired:
		return "ui.passkey is required"
	}
	return "the UI logs in only through the identity provider (ui.oidc, ui.token_login: false)"
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
