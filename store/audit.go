package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	guard "github.com/guard-mcp/guard"
)

// hashVersion names the canonical form a record's hash covers. Version 2
// adds the members later versions of guard record (approval), each present
// only when it is not empty; a record without any of them is hashed in
// version 1's form, so the hashes of records written before stay valid.
// Version 3 adds the caller the front authenticated: user, user_email
// and user_groups (an array of strings, in the order recorded), all
// three present when any of them is set; approval stays present only
// when set. A record without a user is hashed as before.
const (
	hashVersion1 = 1
	hashVersion2 = 2
	hashVersion3 = 3
)

// HashRecord returns the hex SHA-256 of a record's canonical form: an
// RFC 8785 object of every field but seq and hash, with "v" naming the
// form (see hashVersion1). Text fields are hashed as the exact text stored (JSON held in text
// fields is not re-canonicalised); bytes that are not valid UTF-8 are
// hashed as they are.
func HashRecord(r *guard.Record) string {
	h, _ := hashRecord(nil, r)
	return h
}

// hashRecord is HashRecord writing the canonical form into buf, which it
// returns for the next record.
func hashRecord(buf []byte, r *guard.Record) (string, []byte) {
	buf = appendCanonical(buf[:0], r)
	sum := sha256.Sum256(buf)
	return hex.EncodeToString(sum[:]), buf
}

// appendCanonical appends a record's canonical form to b.
func appendCanonical(b []byte, r *guard.Record) []byte {
	b = slices.Grow(b, 512+len(r.Arguments)+len(r.Result)+len(r.Detail))
	// Members in the order RFC 8785 sorts them (all names are ASCII).
	v := int64(hashVersion1)
	b = append(b, '{')
	if r.Approval != "" {
		v = hashVersion2
		b = append(b, `"approval":`...)
		b = appendString(b, r.Approval)
		b = append(b, ',')
	}
	b = append(b, `"arguments":`...)
	b = appendString(b, r.Arguments)
	b = field(b, "call_id", r.CallID)
	b = field(b, "client", r.Client)
	b = field(b, "decided_by", r.DecidedBy)
	b = field(b, "decision", r.Decision)
	b = field(b, "detail", r.Detail)
	b = field(b, "direction", r.Direction)
	b = number(b, "duration_ms", r.DurationMS)
	b = field(b, "id", r.ID)
	b = field(b, "kind", r.Kind)
	b = field(b, "method", r.Method)
	b = field(b, "outcome", r.Outcome)
	b = field(b, "pin", r.Pin)
	b = field(b, "prev_hash", r.PrevHash)
	b = field(b, "protocol", r.Protocol)
	b = field(b, "reason", r.Reason)
	b = number(b, "request_size", r.RequestSize)
	b = number(b, "response_size", r.ResponseSize)
	b = field(b, "result", r.Result)
	b = field(b, "server", r.Server)
	b = field(b, "session", r.Session)
	b = field(b, "time", fmtTime(r.Time))
	b = field(b, "tool", r.Tool)
	if hasUser(r) {
		v = hashVersion3
		b = field(b, "user", r.User)
		b = field(b, "user_email", r.UserEmail)
		b = append(b, `,"user_groups":`...)
		b = appendStrings(b, r.UserGroups)
	}
	b = number(b, "v", v)
	return append(b, '}')
}

// hasUser reports whether a record names the caller the front
// authenticated.
func hasUser(r *guard.Record) bool {
	return r.User != "" || r.UserEmail != "" || len(r.UserGroups) > 0
}

// appendStrings appends an array of strings as RFC 8785 serialises it.
func appendStrings(b []byte, ss []string) []byte {
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	return append(b, ']')
}

// groupsText is how a record's user_groups are stored in their column:
// the JSON array the canonical form holds, or "" for none.
func groupsText(gs []string) string {
	if len(gs) == 0 {
		return ""
	}
	return string(appendStrings(nil, gs))
}

// parseGroups reads a user_groups column, the array groupsText wrote:
// strings whose bytes are kept as they are (UTF-8 or not, as every text
// field is hashed), with only what appendString escapes unescaped. Text
// that is not such an array (a column someone changed) is kept as the one
// group it reads as, so that the record's hash no longer matches.
func parseGroups(s string) []string {
	if s == "" {
		return nil
	}
	var gs []string
	rest, ok := strings.CutPrefix(s, "[")
	for ok {
		var g string
		if g, rest, ok = cutString(rest); !ok {
			break
		}
		gs = append(gs, g)
		if rest == "]" {
			break
		}
		rest, ok = strings.CutPrefix(rest, ",")
	}
	if !ok || len(gs) == 0 {
		return []string{s}
	}
	return gs
}

// cutString reads the JSON string appendString wrote at the start of s,
// and returns it and what follows it.
func cutString(s string) (string, string, bool) {
	if !strings.HasPrefix(s, `"`) {
		return "", s, false
	}
	var b []byte
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			return string(b), s[i+1:], true
		case c != '\\':
			b = append(b, c)
		case i+1 >= len(s):
			return "", s, false
		default:
			i++
			switch s[i] {
			case '"', '\\':
				b = append(b, s[i])
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				n, err := strconv.ParseUint(s[i+1:min(i+5, len(s))], 16, 8)
				if err != nil || i+5 > len(s) {
					return "", s, false
				}
				b = append(b, byte(n))
				i += 4
			default:
				return "", s, false
			}
		}
	}
	return "", s, false
}

func field(b []byte, name, v string) []byte {
	b = append(b, `,"`...)
	b = append(b, name...)
	b = append(b, `":`...)
	return appendString(b, v)
}

func number(b []byte, name string, v int64) []byte {
	b = append(b, `,"`...)
	b = append(b, name...)
	b = append(b, `":`...)
	return strconv.AppendInt(b, v, 10)
}

// appendString appends a JSON string as RFC 8785 serialises it: only the
// quote, the backslash and control characters are escaped.
func appendString(b []byte, s string) []byte {
	const hexd = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"':
			b = append(b, `\"`...)
		case '\\':
			b = append(b, `\\`...)
		case '\b':
			b = append(b, `\b`...)
		case '\f':
			b = append(b, `\f`...)
		case '\n':
			b = append(b, `\n`...)
		case '\r':
			b = append(b, `\r`...)
		case '\t':
			b = append(b, `\t`...)
		default:
			b = append(b, `\u00`...)
			b = append(b, hexd[c>>4], hexd[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

const selectRecord = `SELECT seq, id, call_id, kind, time, session, client, protocol, server, direction, method,
 tool, arguments, pin, decision, decided_by, reason, outcome, result, request_size, response_size,
 duration_ms, detail, approval, prev_hash, hash, pruned, user_subject, user_email, user_groups FROM records`

// noUserColumns are the user columns as a database without them reads.
const noUserColumns = `'' AS user_subject, '' AS user_email, '' AS user_groups`

// selectRecords is selectRecord for this database: one a read-only open
// found without the retention migration has no pruned column, and no
// record of it is pruned; one without the user migration has no user
// columns, and no record of it names a user.
func (db *DB) selectRecords() string {
	q := selectRecord
	if db.noPruned {
		q = strings.Replace(q, "hash, pruned,", "hash, 0 AS pruned,", 1)
	}
	if db.noUser {
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
	r.UserGroups = parseGroups(groups)
	return &r, err
}

// Records calls fn for every record in seq order (events included).
func (db *DB) Records(ctx context.Context, fn func(*guard.Record) error) error {
	db.caughtUp(ctx)
	rows, err := db.r.QueryContext(ctx, db.selectRecords()+` ORDER BY seq`)
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
func (db *DB) Decisions(ctx context.Context, since time.Time, fn func(*Decided) error) error {
	db.caughtUp(ctx)
	users := `r.user_subject, r.user_email, r.user_groups`
	if db.noUser {
		users = noUserColumns
	}
	rows, err := db.r.QueryContext(ctx, `SELECT r.call_id, r.time, r.client, r.protocol, r.server, r.method, r.tool,
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
		d.Time, d.Caller.Groups = parseTime(at), parseGroups(groups)
		if err := fn(&d); err != nil {
			return err
		}
	}
	return rows.Err()
}
