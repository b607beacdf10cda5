package app

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
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
func (m *Main) auditRecords(ctx context.Context, db *store.DB, kind string, f store.Filter, format string) int {
	var err error
	switch format {
	case "jsonl":
		enc := json.NewEncoder(m.Stdout)
		enc.SetEscapeHTML(false)
		err = db.Reader().QueryRecords(ctx, kind, f, func(r *guard.Record) error { return enc.Encode(r) })
	case "csv":
		w := csv.NewWriter(m.Stdout)
		_ = w.Write(recordColumns)
		err = db.Reader().QueryRecords(ctx, kind, f, func(r *guard.Record) error {
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
		tw := tabwriter.NewWriter(m.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TIME\tKIND\tSERVER\tWHAT\tDECISION\tDECIDED BY\tREASON")
		err = db.Reader().QueryRecords(ctx, kind, f, func(r *guard.Record) error {
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
		fmt.Fprintf(m.Stderr, "guard audit query: %v\n", err)
		return ExitFailure
	}
	return ExitOK
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

// AuditQuery is guard audit query: the calls of db that f selects (or,
// with a kind other than "call", the records of that kind), newest first,
// as a table, jsonl or csv.
func (m *Main) AuditQuery(ctx context.Context, db *store.DB, f store.Filter, kind, format string) int {
	var err error
	if kind != "call" {
		return m.auditRecords(ctx, db, kind, f, format)
	}
	switch format {
	case "jsonl":
		enc := json.NewEncoder(m.Stdout)
		enc.SetEscapeHTML(false)
		err = db.Reader().Query(ctx, f, func(c *store.Call) error { return enc.Encode(c) })
	case "csv":
		w := csv.NewWriter(m.Stdout)
		_ = w.Write(store.CallColumns)
		err = db.Reader().Query(ctx, f, func(c *store.Call) error {
			// The log's text is written inert; the figures as they are.
			row := inertCells(c.ID, c.Time, c.Session, c.Client, c.User, c.UserEmail, groupsCell(c.UserGroups), c.Protocol, c.Server, c.Direction, c.Method,
				c.Tool, c.Arguments, c.Pin, c.Decision, c.DecidedBy, c.Reason, c.Approval, c.Outcome, c.Result)
			row = append(row, strconv.FormatInt(c.RequestSize, 10), strconv.FormatInt(c.ResponseSize, 10),
				strconv.FormatInt(c.DurationMS, 10), inert(c.Detail), inert(c.Hash))
			return w.Write(row)
		})
		w.Flush()
		if err == nil {
			err = w.Error()
		}
	default:
		tw := tabwriter.NewWriter(m.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TIME\tUSER\tSERVER\tCALL\tDECISION\tDECIDED BY\tOUTCOME\tMS")
		err = db.Reader().Query(ctx, f, func(c *store.Call) error {
			what := c.Method
			if c.Tool != "" {
				what = c.Tool
			}
			_, werr := fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", c.Time, dash(clip(userOf(c.User, c.UserEmail), 30)), c.Server, clip(what, 40),
				dash(c.Decision), dash(c.DecidedBy), dash(c.Outcome), c.DurationMS)
			return werr
		})
		tw.Flush()
	}
	if err != nil {
		fmt.Fprintf(m.Stderr, "guard audit query: %v\n", err)
		return ExitFailure
	}
	return ExitOK
}

// userOf is how a table names the caller the front authenticated: the
// email where the token had one, else the subject ("" for no one).
func userOf(subject, email string) string {
	if email != "" {
		return email
	}
	return subject
}

// groupsCell is a caller's groups in a CSV cell: a JSON array of strings
// ("" for none), as the export writes them.
func groupsCell(groups []string) string {
	if len(groups) == 0 {
		return ""
	}
	b, _ := json.Marshal(groups) // strings: cannot fail
	return string(b)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func clip(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
