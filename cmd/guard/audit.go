package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/config/read"
	"github.com/guard-mcp/guard/store"
	"github.com/spf13/cobra"
)

func init() { register(auditCommand) }

// auditCommand is guard audit: the log's queries, proofs, exports and
// reports, and its verification.
func auditCommand(a *app) *cobra.Command {
	return a.group("audit", "query, verify, prove, export and report on the audit log", "",
		auditQueryCommand(a), auditVerifyCommand(a), auditKeyCommand(a), auditCheckpointCommand(a), auditProveCommand(a),
		auditExportCommand(a), auditCheckCommand(a), auditReportCommand(a), auditPruneCommand(a), auditAcknowledgeLossCommand(a))
}

// open resolves the settings and opens their database, or says why not and
// returns the status to exit with.
func (a *app) open(ctx context.Context, cf *commonFlags) (*store.DB, *settings, int, bool) {
	return a.openWith(ctx, cf, a.wiring().OpenStore)
}

// openReadOnly is open for commands that only read: the database is opened
// read-only (no migration, no file created, nothing written), so that they
// work on a full disk.
func (a *app) openReadOnly(ctx context.Context, cf *commonFlags) (*store.DB, *settings, int, bool) {
	return a.openWith(ctx, cf, a.wiring().OpenReadOnly)
}

func (a *app) openWith(ctx context.Context, cf *commonFlags, openDB func(context.Context, *settings) (*store.DB, error)) (*store.DB, *settings, int, bool) {
	st, status, ok := a.settingsOrExit(cf)
	if !ok {
		return nil, nil, status, false
	}
	db, err := openDB(ctx, st)
	if err != nil {
		fmt.Fprintf(a.stderr, "guard: %v\n", err)
		return nil, nil, exitFailure, false
	}
	return db, st, 0, true
}

// decisions and outcomes are the values a call's record can hold, which
// the query's filters accept.
var (
	decisions = []string{guard.DecisionAllowed, guard.DecisionDenied, guard.DecisionHeld,
		guard.ApprovalApproved, guard.ApprovalExpired, guard.ApprovalWithdrawn}
	outcomes = []string{guard.OutcomeOK, guard.OutcomeToolError, guard.OutcomeProtocolError, guard.OutcomeDenied,
		guard.OutcomeExpired, guard.OutcomeCancelled, guard.OutcomeInvalid, guard.OutcomeUpstreamFailed,
		guard.OutcomeInputRequired, guard.OutcomeAwaitingApproval}
)

// auditQueryCommand lists the calls the log holds, newest first.
func auditQueryCommand(a *app) *cobra.Command {
	c := leaf("query", "list the calls (or other records) the log holds, newest first", exactly())
	fs := c.Flags()
	cf := addCommonFlags(fs)
	since := fs.String("since", "", "only calls since `DUR|TIME` (7d, 1h, or RFC 3339)")
	until := fs.String("until", "", "only calls until `TIME` (RFC 3339, or a duration back from now)")
	var f store.Filter
	fs.StringVar(&f.Server, "server", "", "only this `server`")
	fs.StringVar(&f.Tool, "tool", "", "only this `tool`")
	fs.StringVar(&f.Client, "client", "", "only calls of this `client` (a token's name, or clientInfo name/version)")
	fs.StringVar(&f.User, "user", "", "only calls of the caller the front authenticated with this `subject or email`")
	fs.StringVar(&f.Session, "session", "", "only calls of this `session`")
	fs.StringVar(&f.DecidedBy, "decided-by", "", "only calls decided by this `rule or person` (\"default\": the default policy)")
	fs.StringVar(&f.Decision, "decision", "", "only this `decision` ("+strings.Join(decisions, ", ")+")")
	fs.StringVar(&f.Outcome, "outcome", "", "only this `outcome` ("+strings.Join(outcomes, ", ")+")")
	fs.StringVar(&f.Approval, "approval", "", "only calls whose records carry this approval `id`")
	fs.StringVar(&f.Text, "text", "", "only calls whose arguments or result hold all these `words` (\"a phrase\", prefix*; no operators)")
	kind := fs.String("kind", "call", "what to list: `call` (invocations), or the records of a kind that is not a call's ("+strings.Join(store.RecordKinds, ", ")+")")
	limit := fs.Int("limit", -1, "at most `N` rows (table: 100 by default; jsonl and csv: all)")
	format := fs.String("format", "table", "table, jsonl or csv")
	oneOf(c, "format", "table", "jsonl", "csv")
	oneOf(c, "decision", decisions...)
	oneOf(c, "outcome", outcomes...)
	oneOf(c, "kind", append([]string{"call"}, store.RecordKinds...)...)
	c.RunE = a.runs(func(ctx context.Context, _ []string) int {
		for _, e := range []struct {
			flag, v string
			allowed []string
		}{{"decision", f.Decision, decisions}, {"outcome", f.Outcome, outcomes}, {"kind", *kind, append([]string{"call"}, store.RecordKinds...)}} {
			if e.v != "" && !slices.Contains(e.allowed, e.v) {
				fmt.Fprintf(a.stderr, "guard audit query: --%s %q: want one of %s\n", e.flag, e.v, strings.Join(e.allowed, ", "))
				return exitUsage
			}
		}
		if *kind != "call" && (f.Outcome != "" || f.Text != "") {
			fmt.Fprintf(a.stderr, "guard audit query: --outcome and --text apply to calls only, not to --kind %s\n", *kind)
			return exitUsage
		}
		if f.Text != "" {
			if _, err := store.MatchExpr(f.Text); err != nil {
				fmt.Fprintf(a.stderr, "guard audit query: --text %q: %v\n", f.Text, err)
				return exitUsage
			}
		}
		now := time.Now()
		var err error
		if *since != "" {
			if f.Since, err = read.ParseSince(*since, now); err != nil {
				fmt.Fprintf(a.stderr, "guard audit query: --since: %v\n", err)
				return exitUsage
			}
		}
		if *until != "" {
			if f.Until, err = read.ParseSince(*until, now); err != nil {
				fmt.Fprintf(a.stderr, "guard audit query: --until: %v\n", err)
				return exitUsage
			}
		}
		switch *format {
		case "table":
			f.Limit = 100
		case "jsonl", "csv":
		default:
			fmt.Fprintf(a.stderr, "guard audit query: --format %q: want table, jsonl or csv\n", *format)
			return exitUsage
		}
		if *limit >= 0 {
			f.Limit = *limit
		}
		db, _, status, ok := a.openReadOnly(ctx, cf)
		if !ok {
			return status
		}
		defer db.Close()
		return a.wiring().AuditQuery(ctx, db, f, *kind, *format)
	})
	return c
}
