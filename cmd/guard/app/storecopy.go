package app

import (
	"context"
	"fmt"
	"path/filepath"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/policy"
	"github.com/guard-mcp/guard/store"
)

// StoreCopy is guard store copy: it moves the SQLite database at from, its
// learned rules and its log's key, into the empty PostgreSQL database at to.
func (m *Main) StoreCopy(ctx context.Context, st *Settings, from, to string) int {
	src, err := filepath.Abs(from)
	if err != nil {
		fmt.Fprintf(m.Stderr, "guard store copy: --from: %v\n", err)
		return ExitUsage
	}
	key := filepath.Join(filepath.Dir(src), "audit.key")
	if st.Config.Audit.KeyFile != "" {
		key = st.KeyPath()
	}
	// Rules learned from approvals: on SQLite in approved.yaml, in the
	// rules.d that settings name for an SQLite database (the
	// configuration's, else the one beside the database); on
	// PostgreSQL in the database.
	rulesDir := filepath.Join(filepath.Dir(src), "rules.d")
	if st.ConfigPath != "" {
		rulesDir = filepath.Join(filepath.Dir(st.ConfigPath), "rules.d")
	}
	approved := filepath.Join(rulesDir, policy.ApprovedRulesFile)
	rules, err := policy.LoadRules(approved, m.Getenv)
	if err != nil {
		fmt.Fprintf(m.Stderr, "guard store copy: the rules learned from approvals: %v\n", err)
		return ExitUsage // a configuration file that does not parse
	}
	var o store.CopyOptions
	for _, r := range rules {
		o.Learned = append(o.Learned, store.LearnedRule{Name: r.Name, Server: r.Server, Tool: r.Tool, Method: r.Method,
			URI: r.URI, When: r.When, Action: r.Action, Reason: r.Reason})
	}
	fromOpts := m.storeOptions(st)
	fromOpts.Path, fromOpts.KeyPath = src, key
	toOpts := m.storeOptions(st)
	toOpts.Path, toOpts.KeyPath = to, key

	rep, err := store.Copy(ctx, fromOpts, toOpts, o)
	if rep == nil {
		fmt.Fprintf(m.Stderr, "guard store copy: %v\nnothing was moved\n", err)
		return ExitFailure
	}
	fmt.Fprintf(m.Stdout, "moved %s to %s:\n", src, guard.DisplayURL(to))
	for _, t := range rep.Rows {
		fmt.Fprintf(m.Stdout, "  %-20s %10d\n", t.Table, t.Rows)
	}
	if rep.Learned > 0 {
		fmt.Fprintf(m.Stdout, "  %d rules learned from approvals, from %s (guard on PostgreSQL reads them from the database, not from the file)\n", rep.Learned, approved)
	}
	if c := rep.Checkpoint; c != nil {
		fmt.Fprintf(m.Stdout, "checkpoint: %d records, root %s\n", c.Size, c.Root)
	}
	if err != nil {
		fmt.Fprintf(m.Stderr, "guard store copy: %v\n", err)
		return ExitFailure
	}
	fmt.Fprintf(m.Stdout, "verify: %s\n", verifiedLine(rep.Verified))
	fmt.Fprintf(m.Stdout, "checkpoint key: %s\ncheckpoint file: %s\n", rep.KeyPath, rep.CheckpointPath)
	if st.Config.Audit.KeyFile == "" {
		fmt.Fprintf(m.Stdout, "guard on PostgreSQL reads the log's key from audit.key_file: set it to %s in the configuration\n", rep.KeyPath)
	}
	return ExitOK
}
