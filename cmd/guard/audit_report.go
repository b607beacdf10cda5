package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	guardapp "github.com/guard-mcp/guard/cmd/guard/app"
	"github.com/guard-mcp/guard/config/read"
	"github.com/spf13/cobra"
)

// auditReportCommand writes the activity of a period and whether the
// whole log verifies, for people who read rather than query.
func auditReportCommand(a *app) *cobra.Command {
	c := leaf("report", "a period's activity and the log's verification, as text, HTML or CSV", exactly())
	fs := c.Flags()
	cf := addCommonFlags(fs)
	since := fs.String("since", "30d", "the period starts `DUR|TIME` (30d, 12h, or RFC 3339)")
	until := fs.String("until", "", "the period ends at `TIME` (RFC 3339, or a duration back from now; default now)")
	format := fs.String("format", "text", "text, html or csv")
	oneOf(c, "format", "text", "html", "csv")
	c.RunE = a.runs(func(ctx context.Context, _ []string) int {
		now := time.Now().UTC()
		from, err := read.ParseSince(*since, now)
		if err != nil {
			fmt.Fprintf(a.stderr, "guard audit report: --since: %v\n", err)
			return exitUsage
		}
		to := now
		if *until != "" {
			if to, err = read.ParseSince(*until, now); err != nil {
				fmt.Fprintf(a.stderr, "guard audit report: --until: %v\n", err)
				return exitUsage
			}
		}
		if to.Before(from) {
			fmt.Fprintf(a.stderr, "guard audit report: the period ends (%s) before it starts (%s)\n", to.UTC().Format(time.RFC3339), from.UTC().Format(time.RFC3339))
			return exitUsage
		}
		if !slices.Contains([]string{"text", "html", "csv"}, *format) {
			fmt.Fprintf(a.stderr, "guard audit report: --format %q: want text, html or csv\n", *format)
			return exitUsage
		}
		db, st, status, ok := a.openReadOnly(ctx, cf)
		if !ok {
			return status
		}
		defer db.Close()
		return a.wiring().AuditReport(ctx, db, st, guardapp.ReportOptions{From: from, To: to, Now: now, Format: *format})
	})
	return c
}
