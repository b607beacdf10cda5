package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/approvals"
	"github.com/guard-mcp/guard/store"
	"github.com/spf13/cobra"
)

func init() { register(toolsCommand) }

// toolsCommand is guard tools: the review of tool definitions.
func toolsCommand(a *app) *cobra.Command {
	return a.group("tools", "review tool definitions", "",
		toolsListCommand(a), toolsDiffCommand(a), toolsDecideCommand(a, true), toolsDecideCommand(a, false))
}

// toolsListCommand lists the catalog: every tool, its review state,
// annotations and flags.
func toolsListCommand(a *app) *cobra.Command {
	c := leaf("list", "list every tool, its review state, annotations and flags", exactly())
	fs := c.Flags()
	cf := addCommonFlags(fs)
	server := fs.String("server", "", "only this `server`'s tools")
	c.RunE = a.runs(func(ctx context.Context, _ []string) int {
		db, _, status, ok := a.openReadOnly(ctx, cf)
		if !ok {
			return status
		}
		defer db.Close()
		tools, err := db.Tools(ctx, *server)
		if err != nil {
			fmt.Fprintf(a.stderr, "guard tools list: %v\n", err)
			return exitFailure
		}
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SERVER\tTOOL\tSTATE\tCAUSE\tPIN\tANNOTATIONS\tFLAGS")
		for _, t := range tools {
			r, err := db.Review(ctx, t.Server, t.Name, t.Pin)
			if err != nil {
				fmt.Fprintf(a.stderr, "guard tools list: %v\n", err)
				return exitFailure
			}
			state, cause, flags := "-", "-", "-"
			if r != nil {
				state, cause = r.State, r.Cause
				if r.DecidedBy != "" && r.Cause != guard.CauseBaseline {
					state += " by " + r.DecidedBy
				}
				if len(r.Flags) > 0 {
					flags = clip(guard.FlagText(r.Flags), 60)
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Server, t.Name, state, cause, clip(t.Pin, 19),
				annotationText(t.Annotations), flags)
		}
		tw.Flush()
		return exitOK
	})
	return c
}

func annotationText(a guard.Annotations) string {
	ro, de, id, ow := a.Effective()
	var parts []string
	for _, h := range []struct {
		name string
		set  *bool
		v    bool
	}{{"readOnly", a.ReadOnlyHint, ro}, {"destructive", a.DestructiveHint, de}, {"idempotent", a.IdempotentHint, id}, {"openWorld", a.OpenWorldHint, ow}} {
		if h.v {
			name := h.name
			if h.set == nil {
				name += "(default)"
			}
			parts = append(parts, name)
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ",")
}

// toolsDiffCommand shows what changed in a tool's definition since the
// one last accepted.
func toolsDiffCommand(a *app) *cobra.Command {
	c := leaf("diff SERVER TOOL", "show what changed in a tool's definition since the one last accepted", exactly("SERVER", "TOOL"))
	cf := addCommonFlags(c.Flags())
	c.RunE = a.runs(func(ctx context.Context, args []string) int {
		server, tool := args[0], args[1]
		db, _, status, ok := a.openReadOnly(ctx, cf)
		if !ok {
			return status
		}
		defer db.Close()
		cur, err := currentTool(ctx, db, server, tool)
		if err != nil {
			fmt.Fprintf(a.stderr, "guard tools diff: %v\n", err)
			return exitFailure
		}
		old, err := db.AcceptedTool(ctx, server, tool)
		if err != nil {
			fmt.Fprintf(a.stderr, "guard tools diff: %v\n", err)
			return exitFailure
		}
		r, _ := db.Review(ctx, server, tool, cur.Pin)
		if r != nil {
			fmt.Fprintf(a.stdout, "%s/%s %s: %s (%s)\n", server, tool, cur.Pin, r.State, r.Cause)
			if len(r.Flags) > 0 {
				fmt.Fprintf(a.stdout, "flagged: %s\n", guard.FlagText(r.Flags))
			}
		}
		if old == nil {
			fmt.Fprintln(a.stdout, "no definition of this tool was ever accepted; the current one:")
			fmt.Fprint(a.stdout, guard.LineDiff(nil, cur.Def))
			return exitOK
		}
		if old.Pin == cur.Pin {
			fmt.Fprintln(a.stdout, "the current definition is the accepted one")
			return exitOK
		}
		fmt.Fprintf(a.stdout, "accepted %s → current %s\n", old.Pin, cur.Pin)
		for _, c := range guard.DiffTools(old.Def, cur.Def) {
			mark := "  "
			if c.Weakens {
				mark = "! "
			}
			fmt.Fprintln(a.stdout, mark+c.Text)
		}
		fmt.Fprintln(a.stdout)
		fmt.Fprint(a.stdout, guard.LineDiff(old.Def, cur.Def))
		return exitOK
	})
	return c
}

func currentTool(ctx context.Context, db *store.DB, server, name string) (*guard.Tool, error) {
	tools, err := db.Tools(ctx, server)
	if err != nil {
		return nil, err
	}
	for i := range tools {
		if tools[i].Name == name {
			return &tools[i], nil
		}
	}
	return nil, fmt.Errorf("no tool %q on server %q in the catalog (guard tools list shows what it holds)", name, server)
}

// toolsDecideCommand accepts or rejects a tool's current definition, and
// settles the calls held for its review, saying what became of them.
func toolsDecideCommand(a *app, accept bool) *cobra.Command {
	verb := "reject"
	if accept {
		verb = "accept"
	}
	c := leaf("accept SERVER TOOL", "accept a tool's current definition; releases its held calls, unless it weakens a hint or was flagged",
		exactly("SERVER", "TOOL"))
	if !accept {
		c = leaf("reject SERVER TOOL", "reject a tool's current definition: its calls are denied until it changes or is accepted",
			exactly("SERVER", "TOOL"))
	}
	fs := c.Flags()
	cf := addCommonFlags(fs)
	by := fs.String("by", "", "the `NAME` the decision is recorded under (default: the user running this command)")
	reason := fs.String("reason", "", "why: `TEXT` recorded with the decision on the calls held for this tool")
	c.RunE = a.runs(func(ctx context.Context, args []string) int {
		server, tool := args[0], args[1]
		who := a.orCurrentUser(*by)
		db, st, status, ok := a.open(ctx, cf)
		if !ok {
			return status
		}
		defer db.Close()
		if refuseCLIDecision(a, st.Config, "tools "+verb) { // it decides the calls held for the tool
			return exitFailure
		}
		cur, err := currentTool(ctx, db, server, tool)
		if err != nil {
			fmt.Fprintf(a.stderr, "guard tools %s: %v\n", verb, err)
			return exitFailure
		}
		// Calls held for this definition's review: rejected, they are denied;
		// accepted, they go on to the rules, or wait for a decision each
		// when the change weakens the tool's declared caution or the scanner
		// flagged it (approvals.ReleasesHeld).
		m := approvals.New(db, approvals.Options{Timeout: st.Config.Approval.Timeout})
		r, settled, err := approvals.DecideDefinition(ctx, db, m, server, tool, cur.Pin, accept, approvals.Named(who), *reason)
		if r == nil {
			fmt.Fprintf(a.stderr, "guard tools %s: %v\n", verb, err)
			return exitFailure
		}
		fmt.Fprintf(a.stdout, "%s/%s %s: %s by %s\n", server, tool, r.Pin, r.State, who)
		if text := settled.String(); text != "" {
			fmt.Fprintln(a.stdout, text)
		}
		if err != nil {
			fmt.Fprintf(a.stderr, "guard tools %s: %v\n", verb, err)
			return exitFailure
		}
		return exitOK
	})
	return c
}
