package app

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
	"github.com/guard-mcp/guard/store"
)

// auditReport is what guard audit report prints: the activity of a period
// and whether the whole log verifies.
type auditReport struct {
	*audit.Activity
	Database  string
	Generated time.Time
	Verified  audit.Report
	Changes   changeCounts
}

// changeCounts sums up the tool and policy changes of a period.
type changeCounts struct{ Definitions, Accepted, Rejected, Pending, Rules int }

// ReportOptions are what guard audit report reports on, and how.
type ReportOptions struct {
	From, To time.Time // the period
	Now      time.Time // when the report is made
	Format   string    // text, html or csv
}

// AuditReport is guard audit report: the activity of a period in db and
// whether the whole log verifies, for people who read rather than query.
// It returns the verification's status.
func (m *Main) AuditReport(ctx context.Context, db *store.DB, st *Settings, o ReportOptions) int {
	write := reportFormats[o.Format]
	r := &auditReport{Database: st.DBName(), Generated: o.Now}
	// Verification reads the whole log: it runs beside the period's
	// queries rather than after them.
	verified := make(chan error, 1)
	go func() {
		var err error
		r.Verified, err = db.Verifier().Verify(ctx)
		verified <- err
	}()
	var err error
	r.Activity, err = db.Reader().Activity(ctx, o.From.UTC(), o.To.UTC())
	if verr := <-verified; verr != nil {
		fmt.Fprintf(m.Stderr, "guard audit report: verify: %v\n", verr)
		return ExitFailure
	}
	if err != nil {
		fmt.Fprintf(m.Stderr, "guard audit report: %v\n", err)
		return ExitFailure
	}
	for _, c := range r.ToolChanges {
		r.Changes.Definitions++
		switch c.State {
		case "accepted":
			if c.Cause != "baseline" {
				r.Changes.Accepted++
			}
		case "rejected":
			r.Changes.Rejected++
		case "pending":
			r.Changes.Pending++
		}
	}
	for _, c := range r.PolicyChanges {
		if c.Kind == guard.KindRuleAdded {
			r.Changes.Rules++
		}
	}
	if err := write(m.Stdout, r); err != nil {
		fmt.Fprintf(m.Stderr, "guard audit report: %v\n", err)
		return ExitFailure
	}
	return verdictStatus(r.Verified.Verdict()) // the report says why
}

var reportFormats = map[string]func(io.Writer, *auditReport) error{
	"text": writeReportText,
	"html": writeReportHTML,
	"csv":  writeReportCSV,
}

// stamp is how a report writes a time: RFC 3339, UTC, to the second.
func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// waited is how a report writes a wait: to the second, or to the
// millisecond under one; "" when the call is undecided.
func waited(h audit.HeldCall) string {
	switch {
	case h.DecidedAt.IsZero():
		return ""
	case h.Waited < time.Second:
		return h.Waited.Round(time.Millisecond).String()
	}
	return h.Waited.Round(time.Second).String()
}

// thousands writes n with a comma between each group of three digits.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// verification is the report's statement on the log's integrity.
func (r *auditReport) verification() string {
	switch r.Verified.Verdict() {
	case audit.VerdictFailed:
		return fmt.Sprintf("FAILED after %s records: %s", thousands(r.Verified.Records), r.Verified.Problem)
	case audit.VerdictUnverifiable:
		return fmt.Sprintf("NOT VERIFIED: %s records were checked, and all that could be holds, but: %s", thousands(r.Verified.Records), r.Verified.Why())
	}
	return fmt.Sprintf("ok: all %s records of the log verify: each matches its hash, and the chain of hashes between them is unbroken", thousands(r.Verified.Records))
}

// VerifiedAs is the verification's verdict in a word or two, for the
// report's summary: ok, FAILED, NOT VERIFIED.
func (r *auditReport) VerifiedAs() string {
	switch r.Verified.Verdict() {
	case audit.VerdictFailed:
		return "FAILED"
	case audit.VerdictUnverifiable:
		return "NOT VERIFIED"
	}
	return "ok"
}

// verdicts sums up what became of the held calls.
func (r *auditReport) verdicts() string {
	var parts []string
	for _, c := range r.Verdicts() {
		if c.N > 0 {
			parts = append(parts, c.Value+" "+thousands(c.N))
		}
	}
	return strings.Join(parts, ", ")
}

// safe makes text from the log harmless in a terminal: control characters
// (an escape sequence, a carriage return) are written as \x escapes.
func safe(s string) string {
	if strings.IndexFunc(s, unicode.IsControl) < 0 {
		return s
	}
	var b strings.Builder
	for _, c := range s {
		if unicode.IsControl(c) {
			fmt.Fprintf(&b, `\x%02x`, c)
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// writeReportText writes the report for a terminal: a summary, then each
// section as aligned columns.
func writeReportText(w io.Writer, r *auditReport) error {
	var out bytes.Buffer
	tw := tabwriter.NewWriter(&out, 0, 4, 2, ' ', 0)
	row := func(cells ...string) {
		for i, c := range cells {
			cells[i] = dash(safe(c))
		}
		fmt.Fprintln(tw, "  "+strings.Join(cells, "\t"))
	}
	section := func(title string, empty bool, header ...string) bool {
		tw.Flush()
		fmt.Fprintf(tw, "\n%s\n", title)
		if empty {
			fmt.Fprintln(tw, "  (none)")
			return false
		}
		row(header...)
		return true
	}
	fmt.Fprintf(tw, "guard audit report\n\n")
	fmt.Fprintf(tw, "Database:\t%s\n", safe(r.Database))
	fmt.Fprintf(tw, "Period:\t%s to %s\n", stamp(r.Since), stamp(r.Until))
	fmt.Fprintf(tw, "Generated:\t%s\n", stamp(r.Generated))
	tw.Flush()
	fmt.Fprintf(tw, "\nSummary\n")
	fmt.Fprintf(tw, "  Calls\t%s\t(other requests: %s)\n", thousands(r.Calls), thousands(r.Requests-r.Calls))
	fmt.Fprintf(tw, "  Allowed by policy\t%s\t\n", thousands(r.Allowed))
	fmt.Fprintf(tw, "  Denied by policy\t%s\t\n", thousands(r.Denied))
	fmt.Fprintf(tw, "  Held for a person\t%s\t%s\n", thousands(r.Held), r.verdicts())
	fmt.Fprintf(tw, "  Errors\t%s\t\n", thousands(r.Errors))
	if r.Archived > 0 {
		fmt.Fprintf(tw, "  Archived\t%s\trequests whose records retention moved to archives, counted in no figure here\n", thousands(r.Archived))
	}
	fmt.Fprintf(tw, "  Tool definitions\t%d\tnew or changed; reviews: %d accepted, %d rejected, %d pending\n",
		r.Changes.Definitions, r.Changes.Accepted, r.Changes.Rejected, r.Changes.Pending)
	fmt.Fprintf(tw, "  Policy changes\t%d\trules learned: %d, configurations loaded: %d\n",
		len(r.PolicyChanges), r.Changes.Rules, len(r.PolicyChanges)-r.Changes.Rules)
	fmt.Fprintf(tw, "  Verification\t%s\t%s records\n", r.VerifiedAs(), thousands(r.Verified.Records))
	if section("Calls per server and tool", len(r.Tools) == 0, "SERVER", "TOOL", "CALLS", "ALLOWED", "DENIED", "HELD", "ERRORS") {
		for _, t := range r.Tools {
			row(t.Server, t.Tool, thousands(t.Calls), thousands(t.Allowed), thousands(t.Denied), thousands(t.Held), thousands(t.Errors))
		}
	}
	if section("Outcomes", len(r.Outcomes) == 0, "OUTCOME", "CALLS") {
		for _, o := range r.Outcomes {
			row(o.Value, thousands(o.N))
		}
	}
	if section("Decisions by rule", len(r.Decisions) == 0, "RULE", "ALLOWED", "DENIED", "HELD") {
		for _, d := range r.Decisions {
			row(d.DecidedBy, thousands(d.Allowed), thousands(d.Denied), thousands(d.Held))
		}
	}
	if section("Denials by rule", len(r.Denials) == 0, "RULE", "REASON", "SERVER", "TOOL", "CALLS") {
		for _, d := range r.Denials {
			row(d.DecidedBy, clip(d.Reason, 60), d.Server, d.Tool, thousands(d.N))
		}
	}
	if section("Approvals (calls held for a person)", len(r.Approvals) == 0,
		"HELD AT", "SERVER", "TOOL", "HELD BY", "VERDICT", "DECIDED BY", "WAITED", "REASON", "APPROVAL") {
		for _, h := range r.Approvals {
			row(stamp(h.HeldAt), h.Server, h.Tool, h.HeldBy, h.Verdict, h.DecidedBy, waited(h), clip(h.Reason, 40), h.Approval)
		}
	}
	if section("Tool definitions first seen or reviewed", len(r.ToolChanges) == 0,
		"FIRST SEEN", "SERVER", "TOOL", "CAUSE", "STATE", "DECIDED BY", "DECIDED AT", "PIN") {
		for _, c := range r.ToolChanges {
			row(stamp(c.FirstSeen), c.Server, c.Tool, c.Cause, c.State, c.DecidedBy, stamp(c.DecidedAt), c.Pin)
		}
	}
	if section("Policy changes (rules learned, configurations loaded)", len(r.PolicyChanges) == 0,
		"TIME", "KIND", "RULE OR LOAD", "DECIDED BY", "SERVER", "TOOL", "REASON") {
		for _, c := range r.PolicyChanges {
			row(stamp(c.Time), c.Kind, c.What, c.DecidedBy, c.Server, c.Tool, clip(c.Reason, 60))
		}
	}
	tw.Flush()
	fmt.Fprintf(tw, "\nVerification\n  %s\n", safe(r.verification()))
	tw.Flush()
	// The padding of a last column is not kept.
	for line := range strings.Lines(out.String()) {
		if _, err := io.WriteString(w, strings.TrimRight(line, " \n")+"\n"); err != nil {
			return err
		}
	}
	return nil
}

// csvColumns is the one layout of the CSV report: a row per line of every
// section, the section named in the first column, each row filling the
// columns that apply to it (see docs/report.md).
var csvColumns = []string{"section", "item", "server", "tool", "decided_by", "reason", "count",
	"allowed", "denied", "held", "errors", "time", "verdict", "decided_at", "wait_ms", "approval", "pin", "state"}

// writeReportCSV writes the report as one CSV table (csvColumns).
func writeReportCSV(w io.Writer, r *auditReport) error {
	cw := csv.NewWriter(w)
	put := func(section string, cells map[string]string) {
		rec := make([]string, len(csvColumns))
		rec[0] = section
		for i, c := range csvColumns[1:] {
			rec[i+1] = inert(cells[c])
		}
		_ = cw.Write(rec)
	}
	n := func(v int64) string { return strconv.FormatInt(v, 10) }
	_ = cw.Write(csvColumns)
	for _, m := range []struct{ item, v string }{{"database", r.Database}, {"since", stamp(r.Since)}, {"until", stamp(r.Until)},
		{"generated", stamp(r.Generated)}} {
		put("report", map[string]string{"item": m.item, "reason": m.v})
	}
	for _, m := range []struct {
		item string
		v    int64
	}{{"calls", r.Calls}, {"other_requests", r.Requests - r.Calls}, {"allowed", r.Allowed}, {"denied", r.Denied},
		{"held", r.Held}, {"errors", r.Errors}, {"archived", r.Archived}, {"tool_definitions", int64(r.Changes.Definitions)},
		{"reviews_accepted", int64(r.Changes.Accepted)}, {"reviews_rejected", int64(r.Changes.Rejected)},
		{"reviews_pending", int64(r.Changes.Pending)}, {"rules_learned", int64(r.Changes.Rules)},
		{"configurations_loaded", int64(len(r.PolicyChanges) - r.Changes.Rules)}} {
		put("summary", map[string]string{"item": m.item, "count": n(m.v)})
	}
	for _, c := range r.Verdicts() {
		put("summary", map[string]string{"item": "held_" + c.Value, "count": n(c.N)})
	}
	for _, t := range r.Tools {
		put("calls", map[string]string{"server": t.Server, "tool": t.Tool, "count": n(t.Calls), "allowed": n(t.Allowed),
			"denied": n(t.Denied), "held": n(t.Held), "errors": n(t.Errors)})
	}
	for _, o := range r.Outcomes {
		put("outcomes", map[string]string{"item": o.Value, "count": n(o.N)})
	}
	for _, d := range r.Decisions {
		put("decisions", map[string]string{"decided_by": d.DecidedBy, "count": n(d.Allowed + d.Denied + d.Held),
			"allowed": n(d.Allowed), "denied": n(d.Denied), "held": n(d.Held)})
	}
	for _, d := range r.Denials {
		put("denials", map[string]string{"decided_by": d.DecidedBy, "reason": d.Reason, "server": d.Server, "tool": d.Tool, "count": n(d.N)})
	}
	for _, h := range r.Approvals {
		wait := ""
		if !h.DecidedAt.IsZero() {
			wait = n(h.Waited.Milliseconds())
		}
		put("approvals", map[string]string{"item": h.CallID, "server": h.Server, "tool": h.Tool, "decided_by": h.DecidedBy,
			"reason": h.Reason, "time": stamp(h.HeldAt), "verdict": h.Verdict, "decided_at": stamp(h.DecidedAt),
			"wait_ms": wait, "approval": h.Approval, "state": h.HeldBy})
	}
	for _, c := range r.ToolChanges {
		put("tool_changes", map[string]string{"item": c.Cause, "server": c.Server, "tool": c.Tool, "decided_by": c.DecidedBy,
			"time": stamp(c.FirstSeen), "decided_at": stamp(c.DecidedAt), "pin": c.Pin, "state": c.State})
	}
	for _, c := range r.PolicyChanges {
		put("policy_changes", map[string]string{"item": c.Kind, "state": c.What, "time": stamp(c.Time), "decided_by": c.DecidedBy,
			"reason": c.Reason, "server": c.Server, "tool": c.Tool})
	}
	verdict := map[audit.Verdict]string{audit.VerdictVerified: "ok", audit.VerdictFailed: "failed", audit.VerdictUnverifiable: "unverifiable"}[r.Verified.Verdict()]
	put("verification", map[string]string{"item": "records", "count": n(r.Verified.Records), "verdict": verdict, "reason": r.Verified.Why()})
	cw.Flush()
	return cw.Error()
}

// inert keeps a spreadsheet from reading a value from the log as a
// formula: one that starts with =, +, -, @, a tab or a carriage return is
// written after a "'". (No figure of the report starts so.)
func inert(v string) string {
	if v != "" && strings.ContainsRune("=+-@\t\r", rune(v[0])) {
		return "'" + v
	}
	return v
}

// report.templ's Go code is generated and committed.
//go:generate go tool templ generate -include-version=false

// writeReportHTML writes the report as one self-contained HTML page
// (report.templ).
func writeReportHTML(w io.Writer, r *auditReport) error {
	if err := reportPage(r).Render(context.Background(), w); err != nil {
		return fmt.Errorf("html: %w", err)
	}
	return nil
}

// Verification is the report's statement on the log's integrity, for the
// page.
func (r *auditReport) Verification() string { return r.verification() }

// VerdictSummary sums up what became of the held calls, for the page.
func (r *auditReport) VerdictSummary() string { return r.verdicts() }

// OtherRequests counts the requests of the period that were not tool
// calls.
func (r *auditReport) OtherRequests() int64 { return r.Requests - r.Calls }

// ConfigLoads counts the configurations loaded in the period, for the
// page.
func (r *auditReport) ConfigLoads() int { return len(r.PolicyChanges) - r.Changes.Rules }
