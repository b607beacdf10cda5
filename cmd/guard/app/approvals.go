package app

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/approvals"
	"github.com/guard-mcp/guard/config"
	"github.com/guard-mcp/guard/store"
	"github.com/guard-mcp/guard/web"
)

// ApprovalsList is guard approvals list: the held calls of db (with state
// "all", every approval), as a table, jsonl or csv.
func (m *Main) ApprovalsList(ctx context.Context, db *store.DB, state, format string) int {
	s := guard.ApprovalPending
	if state == "all" {
		s = ""
	}
	all, err := db.Holds().Approvals(ctx, s)
	if err != nil {
		fmt.Fprintf(m.Stderr, "guard approvals list: %v\n", err)
		return ExitFailure
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
	switch format {
	case "jsonl":
		enc := json.NewEncoder(m.Stdout)
		enc.SetEscapeHTML(false)
		for _, x := range list {
			_ = enc.Encode(lineOf(x))
		}
		return ExitOK
	case "csv":
		w := csv.NewWriter(m.Stdout)
		_ = w.Write(approvalColumns)
		for _, x := range list {
			_ = w.Write(inertCells(lineOf(x).cells()...))
		}
		w.Flush()
		if err := w.Error(); err != nil {
			fmt.Fprintf(m.Stderr, "guard approvals list: %v\n", err)
			return ExitFailure
		}
		return ExitOK
	}
	tw := tabwriter.NewWriter(m.Stdout, 0, 4, 2, ' ', 0)
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
	return ExitOK
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

// ApprovalsDecide is guard approvals approve (approve) and deny: who's
// decision on the held call id, made at the command line.
func (m *Main) ApprovalsDecide(ctx context.Context, db *store.DB, st *Settings, id string, approve bool, who, reason string) int {
	verb := "deny"
	if approve {
		verb = "approve"
	}
	if m.refuseCLIDecision(st.Config, "approvals "+verb) {
		return ExitFailure
	}
	holds := approvals.New(db.Holds(), approvals.Options{Timeout: st.Config.Approval.Timeout})
	x, err := holds.Decide(ctx, id, approve, who, reason)
	switch {
	case errors.Is(err, guard.ErrNotFound):
		fmt.Fprintf(m.Stderr, "guard approvals %s: no held call with id %s\n", verb, id)
		return ExitFailure
	case err != nil:
		fmt.Fprintf(m.Stderr, "guard approvals %s: %v\n", verb, err)
		return ExitFailure
	}
	if x.State == guard.ApprovalPending {
		fmt.Fprintf(m.Stdout, "%s: your approval of %s on %s is recorded; it waits for %s\n", x.ID, x.Tool, x.Server, approvals.Waiting(x))
		return ExitOK
	}
	fmt.Fprintf(m.Stdout, "%s: %s %s on %s (by %s)\n", x.ID, x.State, x.Tool, x.Server, x.DecidedBy)
	return ExitOK
}

// refuseCLIDecision says why, and reports true, where the configuration
// turns decisions on the command line off. A name typed here proves
// nothing: where the UI needs a verified identity, anyone who can run
// guard (a process that stole the UI token, say) could otherwise decide
// as anyone.
func (m *Main) refuseCLIDecision(c *config.Config, cmd string) bool {
	if c.CLIDecisions() {
		return false
	}
	fmt.Fprintf(m.Stderr, "guard %s: refused: %s, so decisions need a verified identity and a name typed here is not one; "+
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

// ApprovalsShow is guard approvals show: one approval of db, as text or
// jsonl: the held call, who made it, its rules, each review, and what it
// still needs.
func (m *Main) ApprovalsShow(ctx context.Context, db *store.DB, id, format string) int {
	x, err := db.Holds().Approval(ctx, id)
	switch {
	case errors.Is(err, guard.ErrNotFound):
		fmt.Fprintf(m.Stderr, "guard approvals show: no held call with id %s\n", id)
		return ExitFailure
	case err != nil:
		fmt.Fprintf(m.Stderr, "guard approvals show: %v\n", err)
		return ExitFailure
	}
	if x.State == guard.ApprovalPending && !time.Now().Before(x.ExpiresAt) {
		x.State = guard.ApprovalExpired // as approvals list shows it: reading writes nothing
	}
	if format == "jsonl" {
		enc := json.NewEncoder(m.Stdout)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(lineOf(x))
		return ExitOK
	}
	tw := tabwriter.NewWriter(m.Stdout, 0, 4, 2, ' ', 0)
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
		r, err := db.Catalog().Review(ctx, x.Server, x.Tool, x.Pin)
		if err != nil {
			fmt.Fprintf(m.Stderr, "guard approvals show: %v\n", err)
			return ExitFailure
		}
		if kept := approvals.KeptAfterReview(x, r, recordTime); kept != "" {
			row("review", kept)
		}
	}
	if x.Arguments != "" {
		row("arguments", x.Arguments)
	}
	tw.Flush()
	return ExitOK
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
