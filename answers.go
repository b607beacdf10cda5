package guard

import (
	"fmt"
	"strings"
	"time"
)

// Built-in rules, which come before the configured ones. Their names are
// what audit records, held calls and denials carry in their rule.
const (
	// SelfProtectionRule keeps guard's own files and command line out of
	// a tool's reach.
	SelfProtectionRule = "guard-self-protection"
	// InputSchemaRule refuses arguments that break the tool's inputSchema.
	InputSchemaRule = "guard-input-schema"
	// ToolReviewRule holds calls to a tool whose definition is pending a
	// person's review (changed, new, or flagged) and denies calls to a
	// rejected one.
	ToolReviewRule = "guard-tool-review"
	// RateLimitRule refuses calls over a configured rate.
	RateLimitRule = "guard-rate-limit"
	// PendingLimitRule refuses a call that would be held while a session
	// already has approval.max_pending calls waiting.
	PendingLimitRule = "guard-pending-limit"
)

// WaitEnd is how the wait for a person's decision on a held call ended.
type WaitEnd int

// How a wait ends.
const (
	WaitApproved WaitEnd = iota + 1
	WaitDenied
	WaitExpired
	WaitWithdrawn
	// WaitLimit: no decision within the wait limit; the approval stays
	// open and the client is told to call again.
	WaitLimit
)

// WaitResult is how a wait ended, with the approval as it then was.
type WaitResult struct {
	End      WaitEnd
	Approval *Approval
}

// The texts below are what the client (and so the model) reads when guard
// answers a call itself (DESIGN.md, "What the client reads").

// DenialText is what the client reads for a call denied by policy.
func DenialText(v Verdict) string {
	switch {
	case v.Rule == RateLimitRule && strings.HasPrefix(v.Reason, "Rate limit: "):
		return v.Reason
	case v.Rule == "default":
		return "Denied by the default policy (deny)"
	case v.Reason == "":
		return fmt.Sprintf("Denied by policy rule %q", v.Rule)
	}
	return fmt.Sprintf("Denied by policy rule %q: %s", v.Rule, v.Reason)
}

// DeniedByPersonText is what the client reads when a person denied its call.
func DeniedByPersonText(a *Approval) string {
	if a.Reason == "" {
		return "Denied by " + a.DecidedBy
	}
	return "Denied by " + a.DecidedBy + ": " + a.Reason
}

// ExpiredText is what the client reads when no one decided in time.
func ExpiredText(timeout time.Duration) string {
	return "Expired: no one decided on this call within " + HumanDuration(timeout)
}

// RetryText is what the client reads when its call waited the wait limit:
// what to do, and which later call the approval lets through (Scope). A
// hold of the session-less revision (its Session names the client, "client:
// ...") lets the same client's call through.
func RetryText(a *Approval) string {
	text := "Waiting for approval (id " + a.ID + "): ask the user to approve it, then call the tool again with the same arguments"
	switch {
	case a.Scope == ScopeAny:
		return text + " (from this session or another)"
	case strings.HasPrefix(a.Session, ClientHold):
		return text
	}
	return text + " in this session (the approval holds for this session only: a client that starts a new session for each " +
		"request cannot use it; there the user should set approval.scope: any in guard's configuration and approve the call held next)"
}

// ClientGoneReason begins the reason of a withdrawal whose call's client
// went away: no later approval can release such a call, and whoever tries
// to approve it reads why.
const ClientGoneReason = "the call's client is gone"

// AuditFailedText is what the client reads for a message guard could not
// record, and so did not forward.
const AuditFailedText = "Refused: the audit log could not be written"

// HumanDuration writes a duration as people do: 10m, 1h30m, 45s, 2d.
func HumanDuration(d time.Duration) string {
	if d > 0 && d < time.Second {
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
	d = d.Round(time.Second)
	if d <= 0 {
		return "0s"
	}
	var b strings.Builder
	if days := d / (24 * time.Hour); days > 0 {
		fmt.Fprintf(&b, "%dd", days)
		d -= days * 24 * time.Hour
	}
	if h := d / time.Hour; h > 0 {
		fmt.Fprintf(&b, "%dh", h)
		d -= h * time.Hour
	}
	if m := d / time.Minute; m > 0 {
		fmt.Fprintf(&b, "%dm", m)
		d -= m * time.Minute
	}
	if d > 0 {
		fmt.Fprintf(&b, "%ds", d/time.Second)
	}
	return b.String()
}
