package app

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/config"
	"github.com/guard-mcp/guard/policy"
	"github.com/guard-mcp/guard/store"
	"github.com/guard-mcp/guard/web"
)

// PolicyCheck is guard policy check: it validates st's configuration and
// prints the rules in the order they apply, and what else decides calls.
func (m *Main) PolicyCheck(st *Settings) int {
	p, status, ok := m.loadPolicy(st)
	if !ok {
		return status
	}
	src := st.ConfigPath
	if src == "" {
		src = "built-in defaults"
	}
	fmt.Fprintf(m.Stdout, "configuration: %s (ok)\ndatabase: %s\npolicy version: %s\n\n", src, st.DBName(), p.Version())
	tw := tabwriter.NewWriter(m.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tRULE\tMETHOD\tSERVER\tTOOL\tACTION\tWHEN\tFROM")
	fmt.Fprintf(tw, "0\t%s\t*\t*\t*\tdeny\t-\tbuilt in: arguments that name guard's files or run its command line\n", guard.SelfProtectionRule)
	fmt.Fprintf(tw, "0\t%s\ttools/call\t*\t*\tdeny\t-\tbuilt in: arguments that break the tool's inputSchema\n", guard.InputSchemaRule)
	fmt.Fprintf(tw, "0\t%s\ttools/call\t*\t*\tapprove|deny\t-\tbuilt in: a definition changed, new or flagged (approve), or rejected (deny)\n", guard.ToolReviewRule)
	for i, r := range p.Rules() {
		from := r.File
		if r.Line > 0 {
			from = fmt.Sprintf("%s:%d", r.File, r.Line)
		}
		tool, when := r.Tool, "-"
		if r.URI != "" {
			tool = "uri " + r.URI
		}
		var who []string
		if len(r.Users) > 0 {
			who = append(who, "users: "+strings.Join(r.Users, ", "))
		}
		if len(r.Groups) > 0 {
			who = append(who, "groups: "+strings.Join(r.Groups, ", "))
		}
		if r.When != "" {
			who = append(who, r.When)
		}
		if len(who) > 0 {
			when = strings.Join(who, "; ")
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", i+1, r.Name, r.Method, r.Server, tool, ruleAction(r), when, from)
	}
	fmt.Fprintf(tw, "%d\tdefault\t*\t*\t*\t%s\t-\t%s\n", len(p.Rules())+1, p.DefaultAction(), src)
	tw.Flush()
	if au := st.Config.Auth; au.Issuer != "" {
		fmt.Fprintf(m.Stdout, "\nguard serve's clients: access tokens of %s for %s", au.Issuer, au.Audience)
		if len(au.Scopes) > 0 {
			fmt.Fprintf(m.Stdout, " with the scopes %s", strings.Join(au.Scopes, " "))
		}
		if len(st.Config.Clients) > 0 {
			fmt.Fprintf(m.Stdout, ", or a static token of clients: (%d)", len(st.Config.Clients))
		}
		email := "email where the token says email_verified: true"
		if au.TrustEmail {
			email = "email where the token says email_verified: true or leaves it out (auth.trust_email)"
		}
		fmt.Fprintln(m.Stdout, "; rules see the caller as user (sub, "+email+", groups from the claim "+au.GroupsClaim+")")
	}
	if st.Config.Policy.Mode == "monitor" {
		fmt.Fprintln(m.Stdout, "\nmode: monitor (every call is allowed; records say what enforcement would do)")
	}
	if notes := listingNotes(st.Config); len(notes) > 0 {
		fmt.Fprintln(m.Stdout, "\ntools/list through guard:")
		for _, n := range notes {
			fmt.Fprintf(m.Stdout, "  %s\n", n)
		}
	}
	if need := st.Config.NeedVerified(); len(need) > 0 {
		fmt.Fprintln(m.Stdout, "\napprovals that take verified identities only (a login to the UI through the identity provider, or a passkey; not a typed name, nor approvals approve --by):")
		for _, e := range need {
			fmt.Fprintf(m.Stdout, "  %s\n", e)
		}
		if st.Config.UI.OIDC.Issuer == "" && st.Config.UI.Passkey != web.PasskeyRequired {
			fmt.Fprintln(m.Stdout, "  warning: neither ui.oidc nor ui.passkey is configured: no one can approve these calls, which can only expire")
		}
	}
	m.CheckIsolation(st)
	if len(st.Config.Limits) > 0 {
		fmt.Fprintln(m.Stdout, "\nrate limits (after the rules, before approval):")
		for _, l := range st.Config.Limits {
			scope := "the server as a whole"
			if l.Tool != "" {
				scope = "each tool matching " + l.Tool
			}
			fmt.Fprintf(m.Stdout, "  server %s, %s: %d per %s, burst %d (%s:%d)\n", l.Server, scope, l.Count, l.Per, l.Burst, l.File, l.Line)
		}
	}
	return ExitOK
}

// PolicyReload is guard policy reload: it applies the configuration on
// disk, under the name by, in every running guard on st's database.
func (m *Main) PolicyReload(ctx context.Context, st *Settings, by string) int {
	if _, status, ok := m.loadPolicy(st); !ok { // the files must be valid
		return status
	}
	db, err := m.OpenStore(ctx, st)
	if err != nil {
		fmt.Fprintf(m.Stderr, "guard: %v\n", err)
		return ExitFailure
	}
	defer db.Close()
	digest := policy.FilesDigest(st.ConfigPath, st.RulesDir, st.Config)
	c, err := db.Configs().ConfigChangeByDigest(ctx, digest)
	if err != nil {
		fmt.Fprintf(m.Stderr, "guard: %v\n", err)
		return ExitFailure
	}
	switch {
	case c == nil, c.State == store.ConfigSuperseded:
		// Noted here, it is the pending change (files back as they were
		// are pending again), and is applied the one way every change is.
		if c == nil {
			fmt.Fprintf(m.Stdout, "No running guard has noted a change to these files; applying them as they are.\n")
		} else {
			m.printChanges(c.Summary)
		}
		if err := db.Configs().NoteConfigChange(ctx, digest, ""); err != nil {
			fmt.Fprintf(m.Stderr, "guard: %v\n", err)
			return ExitFailure
		}
	case c.State == store.ConfigApplied:
		fmt.Fprintf(m.Stdout, "Already applied by %s at %s.\n", c.DecidedBy, c.DecidedAt)
		return ExitOK
	case c.State == store.ConfigDismissed:
		fmt.Fprintf(m.Stderr, "guard: this change was dismissed by %s at %s: the running guards keep the policy in force. "+
			"A later change of the files is noted anew.\n", c.DecidedBy, c.DecidedAt)
		return ExitFailure
	default:
		m.printChanges(c.Summary)
	}
	who := by
	if _, err := db.Configs().ApplyConfig(ctx, digest, who); err != nil {
		fmt.Fprintf(m.Stderr, "guard: not applied: %v\n", err)
		return ExitFailure
	}
	fmt.Fprintf(m.Stdout, "Applied %s (by %s): running guards take it within seconds.\n", digest, who)
	return ExitOK
}

// listingNotes says where tools/list through guard shows more than by
// default: definitions no one accepted (review.listing: as_served), tools
// the rules deny (policy.hide_denied: false). Nothing when it does not.
func listingNotes(c *config.Config) []string {
	var notes, asServed, accepted []string
	for name := range c.Servers {
		if c.Listing(name) == policy.ListingAsServed {
			asServed = append(asServed, name)
		} else {
			accepted = append(accepted, name)
		}
	}
	sort.Strings(asServed)
	sort.Strings(accepted)
	const unaccepted = "definitions no one accepted and new tools waiting for review included"
	switch {
	case c.Review.Listing == policy.ListingAsServed && len(accepted) > 0:
		notes = append(notes, fmt.Sprintf("every server's listing as it is (review.listing: as_served), %s, but for %s (accepted)",
			unaccepted, strings.Join(accepted, ", ")))
	case c.Review.Listing == policy.ListingAsServed:
		notes = append(notes, fmt.Sprintf("every server's listing as it is (review.listing: as_served), %s", unaccepted))
	case len(asServed) > 0:
		notes = append(notes, fmt.Sprintf("the listing of %s as it is (review.listing: as_served), %s", strings.Join(asServed, ", "), unaccepted))
	}
	if !c.Policy.HideDenied {
		notes = append(notes, "every tool, those the rules deny to the caller included (policy.hide_denied: false)")
	}
	return notes
}

// printChanges prints what a configuration change changes, one line each.
func (m *Main) printChanges(summary string) {
	if summary == "" {
		return
	}
	fmt.Fprintf(m.Stdout, "Changes:\n")
	for line := range strings.SplitSeq(summary, "\n") {
		fmt.Fprintf(m.Stdout, "  %s\n", line)
	}
}

// ruleAction is a rule's action as policy check lists it: with, for one
// that holds calls under approvers, what their approval needs.
func ruleAction(r policy.Rule) string {
	if r.Approvers.IsZero() {
		return r.Action
	}
	return r.Action + " (" + r.Approvers.String() + ")"
}
