package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"strconv"
	"text/tabwriter"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
)

// recordColumns are the columns of guard audit query --kind KIND --format
// csv: the records' own names.
var recordColumns = []string{"seq", "id", "call_id", "kind", "time", "session", "client", "user", "user_email", "user_groups",
	"server", "method", "tool",
	"decision", "decided_by", "reason", "approval", "detail", "hash"}

// auditRecords is guard audit query --kind KIND for a kind that is not a
// call's: the records themselves, newest first.
func auditRecords(ctx context.Context, a *app, db *store.DB, kind string, f store.Filter, format string) int {
	var err error
	switch format {
	case "jsonl":
		enc := json.NewEncoder(a.stdout)
		enc.SetEscapeHTML(false)
		err = db.QueryRecords(ctx, kind, f, func(r *guard.Record) error { return enc.Encode(r) })
	case "csv":
		w := csv.NewWriter(a.stdout)
		_ = w.Write(recordColumns)
		err = db.QueryRecords(ctx, kind, f, func(r *guard.Record) error {
			// The log's text is written inert (inertCells); the sequence
			// number as it is.
			return w.Write(append([]string{strconv.FormatInt(r.Seq, 10)}, inertCells(r.ID, r.CallID, r.Kind,
				r.Time.UTC().Format(time3339ms), r.Session, r.Client, r.User, r.UserEmail, groupsCell(r.UserGroups),
				r.Server, r.Method, r.Tool, r.Decision, r.DecidedBy,
				r.Reason, r.Approval, r.Detail, r.Hash)...))
		})
		w.Flush()
		if err == nil {
			err = w.Error()
		}
	default:
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TIME\tKIND\tSERVER\tWHAT\tDECISION\tDECIDED BY\tREASON")
		err = db.QueryRecords(ctx, kind, f, func(r *guard.Record) error {
			what := r.Tool
			if what == "" {
				what = r.Method
			}
			_, werr := fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Time.UTC().Format(time3339ms), r.Kind, dash(r.Server),
				dash(clip(what, 40)), dash(r.Decision), dash(r.DecidedBy), dash(clip(r.Reason, 60)))
			return werr
		})
		tw.Flush()
	}
	if err != nil {
		fmt.Fprintf(a.stderr, "guard audit query: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// time3339ms is how records' times are written: RFC 3339, UTC, milliseconds.
const time3339ms = "2006-01-02T15:04:05.000Z07:00"

// inertCells returns cells, text from the log, each made inert for a
// spreadsheet (see inert): a cell that starts with =, +, -, @, a tab or a
// carriage return is written after a "'".
func inertCells(cells ...string) []string {
	for i, c := range cells {
		cells[i] = inert(c)
	}
	return cells
}
