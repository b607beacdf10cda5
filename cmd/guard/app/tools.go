package app

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/approvals"
	"github.com/guard-mcp/guard/store"
)

// ToolsList is guard tools list: every tool of the catalog (of server
// only, when not ""), its review state, annotations and flags.
func (m *Main) ToolsList(ctx context.Context, db *store.DB, server string) int {
	tools, err := db.Catalog().Tools(ctx, server)
	if err != nil {
		fmt.Fprintf(m.Stderr, "guard tools list: %v\n", err)
		return ExitFailure
	}
	tw := tabwriter.NewWriter(m.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tTOOL\tSTATE\tCAUSE\tPIN\tANNOTATIONS\tFLAGS")
	for _, t := range tools {
		r, err := db.Catalog().Review(ctx, t.Server, t.Name, t.Pin)
		if err != nil {
			fmt.Fprintf(m.Stderr, "guard tools list: %v\n", err)
			return ExitFailure
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
	return ExitOK
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

// ToolsDiff is guard tools diff: what changed in a tool's definition since
// the one last accepted.
func (m *Main) ToolsDiff(ctx context.Context, db *store.DB, server, tool string) int {
	cur, err := currentTool(ctx, db, server, tool)
	if err != nil {
		fmt.Fprintf(m.Stderr, "guard tools diff: %v\n", err)
		return ExitFailure
	}
	old, err := db.Catalog().AcceptedTool(ctx, server, tool)
	if err != nil {
		fmt.Fprintf(m.Stderr, "guard tools diff: %v\n", err)
		return ExitFailure
	}
	r, _ := db.Catalog().Review(ctx, server, tool, cur.Pin)
	if r != nil {
		fmt.Fprintf(m.Stdout, "%s/%s %s: %s (%s)\n", server, tool, cur.Pin, r.State, r.Cause)
		if len(r.Flags) > 0 {
			fmt.Fprintf(m.Stdout, "flagged: %s\n", guard.FlagText(r.Flags))
		}
	}
	if old == nil {
		fmt.Fprintln(m.Stdout, "no definition of this tool was ever accepted; the current one:")
		fmt.Fprint(m.Stdout, guard.LineDiff(nil, cur.Def))
		return ExitOK
	}
	if old.Pin == cur.Pin {
		fmt.Fprintln(m.Stdout, "the current definition is the accepted one")
		return ExitOK
	}
	fmt.Fprintf(m.Stdout, "accepted %s → current %s\n", old.Pin, cur.Pin)
	for _, c := range guard.DiffTools(old.Def, cur.Def) {
		mark := "  "
		if c.Weakens {
			mark = "! "
		}
		fmt.Fprintln(m.Stdout, mark+c.Text)
	}
	fmt.Fprintln(m.Stdout)
	fmt.Fprint(m.Stdout, guard.LineDiff(old.Def, cur.Def))
	return ExitOK
}

func currentTool(ctx context.Context, db *store.DB, server, name string) (*guard.Tool, error) {
	tools, err := db.Catalog().Tools(ctx, server)
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

// ToolsDecide is guard tools accept (accept) and reject: it decides a
// tool's current definition as who, and settles the calls held for its
// review, saying what became of them.
func (m *Main) ToolsDecide(ctx context.Context, db *store.DB, st *Settings, server, tool string, accept bool, who, reason string) int {
	verb := "reject"
	if accept {
		verb = "accept"
	}
	if m.refuseCLIDecision(st.Config, "tools "+verb) { // it decides the calls held for the tool
		return ExitFailure
	}
	cur, err := currentTool(ctx, db, server, tool)
	if err != nil {
		fmt.Fprintf(m.Stderr, "guard tools %s: %v\n", verb, err)
		return ExitFailure
	}
	// Calls held for this definition's review: rejected, they are denied;
	// accepted, they go on to the rules, or wait for a decision each
	// when the change weakens the tool's declared caution or the scanner
	// flagged it (approvals.ReleasesHeld).
	holds := approvals.New(db.Holds(), approvals.Options{Timeout: st.Config.Approval.Timeout})
	r, settled, err := approvals.DecideDefinition(ctx, db.Catalog(), db.Holds(), holds, server, tool, cur.Pin, accept, approvals.Named(who), reason)
	if r == nil {
		fmt.Fprintf(m.Stderr, "guard tools %s: %v\n", verb, err)
		return ExitFailure
	}
	fmt.Fprintf(m.Stdout, "%s/%s %s: %s by %s\n", server, tool, r.Pin, r.State, who)
	if text := settled.String(); text != "" {
		fmt.Fprintln(m.Stdout, text)
	}
	if err != nil {
		fmt.Fprintf(m.Stderr, "guard tools %s: %v\n", verb, err)
		return ExitFailure
	}
	return ExitOK
}
