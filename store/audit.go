package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
)

const selectRecord = `SELECT seq, id, call_id, kind, time, session, client, protocol, server, direction, method,
 tool, arguments, pin, decision, decided_by, reason, outcome, result, request_size, response_size,
 duration_ms, detail, approval, prev_hash, hash, pruned, user_subject, user_email, user_groups FROM records`

// noUserColumns are the user columns as a database without them reads.
const noUserColumns = `'' AS user_subject, '' AS user_email, '' AS user_groups`

// selectRecords is selectRecord for this database: one a read-only open
// found without the retention migration has no pruned column, and no
// record of it is pruned; one without the user migration has no user
// columns, and no record of it names a user.
func (g *schemaGaps) selectRecords() string {
	q := selectRecord
	if g.noPruned {
		q = strings.Replace(q, "hash, pruned,", "hash, 0 AS pruned,", 1)
	}
	if g.noUser {
		q = strings.Replace(q, "user_subject, user_email, user_groups FROM", noUserColumns+" FROM", 1)
	}
	return q
}

// scanRecord reads a row of selectRecord; extra receive the columns a
// query selects after those (selectRecordMAC's mac).
func scanRecord(rows *sql.Rows, extra ...any) (*guard.Record, error) {
	var r guard.Record
	var t, groups string
	err := rows.Scan(append([]any{&r.Seq, &r.ID, &r.CallID, &r.Kind, &t, &r.Session, &r.Client, &r.Protocol, &r.Server,
		&r.Direction, &r.Method, &r.Tool, &r.Arguments, &r.Pin, &r.Decision, &r.DecidedBy, &r.Reason,
		&r.Outcome, &r.Result, &r.RequestSize, &r.ResponseSize, &r.DurationMS, &r.Detail, &r.Approval, &r.PrevHash, &r.Hash, &r.Pruned,
		&r.User, &r.UserEmail, &groups}, extra...)...)
	r.Time = parseTime(t)
	r.UserGroups = audit.ParseGroups(groups)
	return &r, err
}

// Records calls fn for every record in seq order (events included).
func (rd Reader) Records(ctx context.Context, fn func(*guard.Record) error) error {
	rd.db.ing.caughtUp(ctx)
	rows, err := rd.db.r.QueryContext(ctx, rd.db.schema.selectRecords()+` ORDER BY seq`)
	if err != nil {
		return fmt.Errorf("records: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return fmt.Errorf("records: %w", err)
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Decided is how policy decided one call, from its first request record.
type Decided struct {
	CallID string
	Time   time.Time
	Client string
	// Caller is who the front authenticated for the call's session
	// (zero where no one did), for rules that name users.
	Caller    guard.Identity
	Protocol  string
	Server    string
	Method    string
	Tool      string
	Arguments string
	Pin       string
	Decision  string
	DecidedBy string
	Reason    string
	Detail    string
}

// Decisions calls fn for each call that policy decided since the given
// time, oldest first: the decision of its first request record (a held
// call's is "held", whoever decided it later). The first record is found
// by its seq and joined, in words both engines take (PostgreSQL has no
// columns beside an aggregate taken from its row, as SQLite has).
func (rd Reader) Decisions(ctx context.Context, since time.Time, fn func(*Decided) error) error {
	rd.db.ing.caughtUp(ctx)
	users := `r.user_subject, r.user_email, r.user_groups`
	if rd.db.schema.noUser {
		users = noUserColumns
	}
	rows, err := rd.db.r.QueryContext(ctx, `SELECT r.call_id, r.time, r.client, r.protocol, r.server, r.method, r.tool,
		r.arguments, r.pin, r.decision, r.decided_by, r.reason, r.detail, r.seq, `+users+`
		FROM (SELECT MIN(seq) AS seq FROM records WHERE kind = 'request' AND decision != '' AND time >= ? GROUP BY call_id) f
		JOIN records r ON r.seq = f.seq
		ORDER BY r.seq`, fmtTime(since))
	if err != nil {
		return fmt.Errorf("decisions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var d Decided
		var at, groups string
		var seq int64
		if err := rows.Scan(&d.CallID, &at, &d.Client, &d.Protocol, &d.Server, &d.Method, &d.Tool, &d.Arguments,
			&d.Pin, &d.Decision, &d.DecidedBy, &d.Reason, &d.Detail, &seq, &d.Caller.Subject, &d.Caller.Email, &groups); err != nil {
			return fmt.Errorf("decisions: %w", err)
		}
		d.Time, d.Caller.Groups = parseTime(at), audit.ParseGroups(groups)
		if err := fn(&d); err != nil {
			return err
		}
	}
	return rows.Err()
}

// HashRecord returns the hex SHA-256 of a record's canonical form
// (audit.HashRecord).
func HashRecord(r *guard.Record) string { return audit.HashRecord(r) }
