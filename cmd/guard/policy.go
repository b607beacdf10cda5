package main

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/config"
	"github.com/guard-mcp/guard/policy"
	"github.com/guard-mcp/guard/sandbox"
	"github.com/guard-mcp/guard/store"
	"github.com/guard-mcp/guard/web"
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
		p, status, ok := a.loadPolicy(st)
		if !ok {
			return status
		}
		src := st.ConfigPath
		if src == "" {
			src = "built-in defaults"
		}
		fmt.Fprintf(a.stdout, "configuration: %s (ok)\ndatabase: %s\npolicy version: %s\n\n", src, st.dbName(), p.Version())
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
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
			fmt.Fprintf(a.stdout, "\nguard serve's clients: access tokens of %s for %s", au.Issuer, au.Audience)
			if len(au.Scopes) > 0 {
				fmt.Fprintf(a.stdout, " with the scopes %s", strings.Join(au.Scopes, " "))
			}
			if len(st.Config.Clients) > 0 {
				fmt.Fprintf(a.stdout, ", or a static token of clients: (%d)", len(st.Config.Clients))
			}
			email := "email where the token says email_verified: true"
			if au.TrustEmail {
				email = "email where the token says email_verified: true or leaves it out (auth.trust_email)"
			}
			fmt.Fprintln(a.stdout, "; rules see the caller as user (sub, "+email+", groups from the claim "+au.GroupsClaim+")")
		}
		if st.Config.Policy.Mode == "monitor" {
			fmt.Fprintln(a.stdout, "\nmode: monitor (every call is allowed; records say what enforcement would do)")
		}
		if notes := listingNotes(st.Config); len(notes) > 0 {
			fmt.Fprintln(a.stdout, "\ntools/list through guard:")
			for _, n := range notes {
				fmt.Fprintf(a.stdout, "  %s\n", n)
			}
		}
		if need := st.Config.NeedVerified(); len(need) > 0 {
			fmt.Fprintln(a.stdout, "\napprovals that take verified identities only (a login to the UI through the identity provider, or a passkey; not a typed name, nor approvals approve --by):")
			for _, e := range need {
				fmt.Fprintf(a.stdout, "  %s\n", e)
			}
			if st.Config.UI.OIDC.Issuer == "" && st.Config.UI.Passkey != web.PasskeyRequired {
				fmt.Fprintln(a.stdout, "  warning: neither ui.oidc nor ui.passkey is configured: no one can approve these calls, which can only expire")
			}
		}
		checkIsolation(a, st)
		if len(st.Config.Limits) > 0 {
			fmt.Fprintln(a.stdout, "\nrate limits (after the rules, before approval):")
			for _, l := range st.Config.Limits {
				scope := "the server as a whole"
				if l.Tool != "" {
					scope = "each tool matching " + l.Tool
				}
				fmt.Fprintf(a.stdout, "  server %s, %s: %d per %s, burst %d (%s:%d)\n", l.Server, scope, l.Count, l.Per, l.Burst, l.File, l.Line)
			}
		}
		return exitOK
	})
	return c
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

// checkIsolation says, for each configured stdio server, whether it would
// run isolated from guard's files, probing the sandbox once (it runs
// nothing); it says so on stderr too when a server would not, or would
// not be started.
func checkIsolation(a *app, st *settings) {
	if !sandbox.OSSupported {
		// Whatever the configuration names: the servers of clients that
		// guard wraps are not in it.
		fmt.Fprintf(a.stdout, "\nisolation of stdio servers from guard's files: NOT AVAILABLE: %s\n", notOnThisOS)
		fmt.Fprintf(a.stderr, "guard: WARNING: %s\n", notOnThisOS)
	}
	var names []string
	for name, srv := range st.Config.Servers {
		if len(srv.Command) > 0 {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return
	}
	sort.Strings(names)
	r := a.newIsolation(st, slog.New(slog.DiscardHandler), false).probe()
	fmt.Fprintln(a.stdout, "\nisolation of stdio servers from guard's files:")
	for _, name := range names {
		srv := st.Config.Servers[name]
		switch {
		case srv.Sandbox == "off":
			fmt.Fprintf(a.stdout, "  %s: OFF (sandbox: off): the server can reach guard's files\n", name)
			fmt.Fprintf(a.stderr, "guard: WARNING: server %s is not isolated (sandbox: off): it can reach guard's files\n", name)
		case r.none != nil && srv.MustIsolate():
			fmt.Fprintf(a.stdout, "  %s: REFUSED: sandbox: on, and this system cannot isolate servers: %v\n", name, r.none)
			fmt.Fprintf(a.stderr, "guard: WARNING: server %s would not be started (sandbox: on): %v\n", name, r.none)
		case r.none != nil:
			fmt.Fprintf(a.stdout, "  %s: NOT AVAILABLE: %v\n", name, r.none)
			fmt.Fprintf(a.stderr, "guard: WARNING: server %s would run without isolation: %v\n", name, r.none)
		case r.failed != nil:
			fmt.Fprintf(a.stdout, "  %s: REFUSED: guard's files cannot be hidden from it: %v\n", name, r.failed)
			fmt.Fprintf(a.stderr, "guard: WARNING: server %s would not be started: it cannot be isolated from guard's files: %v\n", name, r.failed)
		default:
			fmt.Fprintf(a.stdout, "  %s: in force (setup %v)\n", name, r.took.Round(10*time.Microsecond))
		}
	}
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
		if _, status, ok := a.loadPolicy(st); !ok { // the files must be valid
			return status
		}
		db, err := a.openStore(ctx, st)
		if err != nil {
			fmt.Fprintf(a.stderr, "guard: %v\n", err)
			return exitFailure
		}
		defer db.Close()
		digest := policy.FilesDigest(st.ConfigPath, st.RulesDir, st.Config)
		c, err := db.ConfigChangeByDigest(ctx, digest)
		if err != nil {
			fmt.Fprintf(a.stderr, "guard: %v\n", err)
			return exitFailure
		}
		switch {
		case c == nil, c.State == store.ConfigSuperseded:
			// Noted here, it is the pending change (files back as they were
			// are pending again), and is applied the one way every change is.
			if c == nil {
				fmt.Fprintf(a.stdout, "No running guard has noted a change to these files; applying them as they are.\n")
			} else {
				printChanges(a, c.Summary)
			}
			if err := db.NoteConfigChange(ctx, digest, ""); err != nil {
				fmt.Fprintf(a.stderr, "guard: %v\n", err)
				return exitFailure
			}
		case c.State == store.ConfigApplied:
			fmt.Fprintf(a.stdout, "Already applied by %s at %s.\n", c.DecidedBy, c.DecidedAt)
			return exitOK
		case c.State == store.ConfigDismissed:
			fmt.Fprintf(a.stderr, "guard: this change was dismissed by %s at %s: the running guards keep the policy in force. "+
				"A later change of the files is noted anew.\n", c.DecidedBy, c.DecidedAt)
			return exitFailure
		default:
			printChanges(a, c.Summary)
		}
		who := a.orCurrentUser(*by)
		if _, err := db.ApplyConfig(ctx, digest, who); err != nil {
			fmt.Fprintf(a.stderr, "guard: not applied: %v\n", err)
			return exitFailure
		}
		fmt.Fprintf(a.stdout, "Applied %s (by %s): running guards take it within seconds.\n", digest, who)
		return exitOK
	})
	return c
}

// printChanges prints what a configuration change changes, one line each.
func printChanges(a *app, summary string) {
	if summary == "" {
		return
	}
	fmt.Fprintf(a.stdout, "Changes:\n")
	for line := range strings.SplitSeq(summary, "\n") {
		fmt.Fprintf(a.stdout, "  %s\n", line)
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
