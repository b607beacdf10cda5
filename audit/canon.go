// Package audit is guard's ledger without SQL: a record's canonical form
// and chain hash, the records' MACs, the Merkle tree over them, and the
// rows a batch of records becomes (Batch: chain, MACs, tree hashes, call
// index) computed once for every engine, which only writes them; the
// checkpoint key and its signed checkpoints, their witnesses, the walk
// that verifies a log (over Log) and its findings, exports and proofs
// and their offline check, a report's figures, and retention's signed
// statements. The engines (package store) read and write the rows.
package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"time"

	guard "github.com/guard-mcp/guard"
)

// timeLayout is how times are stored and hashed: RFC 3339, UTC,
// milliseconds; it sorts as text.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// FormatTime is t as records store and hash it ("" for the zero time).
func FormatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(timeLayout)
}

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
	h, _ := HashInto(nil, r)
	return h
}

// HashInto is HashRecord writing the canonical form into buf, which it
// returns for the next record.
func HashInto(buf []byte, r *guard.Record) (string, []byte) {
	buf = AppendCanonical(buf[:0], r)
	sum := sha256.Sum256(buf)
	return hex.EncodeToString(sum[:]), buf
}

// AppendCanonical appends a record's canonical form to b.
func AppendCanonical(b []byte, r *guard.Record) []byte {
	b = slices.Grow(b, 512+len(r.Arguments)+len(r.Result)+len(r.Detail))
	// Members in the order RFC 8785 sorts them (all names are ASCII).
	v := int64(hashVersion1)
	b = append(b, '{')
	if r.Approval != "" {
		v = hashVersion2
		b = append(b, `"approval":`...)
		b = AppendString(b, r.Approval)
		b = append(b, ',')
	}
	b = append(b, `"arguments":`...)
	b = AppendString(b, r.Arguments)
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
	b = field(b, "time", FormatTime(r.Time))
	b = field(b, "tool", r.Tool)
	if HasUser(r) {
		v = hashVersion3
		b = field(b, "user", r.User)
		b = field(b, "user_email", r.UserEmail)
		b = append(b, `,"user_groups":`...)
		b = appendStrings(b, r.UserGroups)
	}
	b = number(b, "v", v)
	return append(b, '}')
}

// HasUser reports whether a record names the caller the front
// authenticated.
func HasUser(r *guard.Record) bool {
	return r.User != "" || r.UserEmail != "" || len(r.UserGroups) > 0
}

// appendStrings appends an array of strings as RFC 8785 serialises it.
func appendStrings(b []byte, ss []string) []byte {
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendString(b, s)
	}
	return append(b, ']')
}

// GroupsText is how a record's user_groups are stored in their column:
// the JSON array the canonical form holds, or "" for none.
func GroupsText(gs []string) string {
	if len(gs) == 0 {
		return ""
	}
	return string(appendStrings(nil, gs))
}

// ParseGroups reads a user_groups column, the array GroupsText wrote:
// strings whose bytes are kept as they are (UTF-8 or not, as every text
// field is hashed), with only what AppendString escapes unescaped. Text
// that is not such an array (a column someone changed) is kept as the one
// group it reads as, so that the record's hash no longer matches.
func ParseGroups(s string) []string {
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

// cutString reads the JSON string AppendString wrote at the start of s,
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
	return AppendString(b, v)
}

func number(b []byte, name string, v int64) []byte {
	b = append(b, `,"`...)
	b = append(b, name...)
	b = append(b, `":`...)
	return strconv.AppendInt(b, v, 10)
}

// AppendString appends a JSON string as RFC 8785 serialises it: only the
// quote, the backslash and control characters are escaped.
func AppendString(b []byte, s string) []byte {
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
