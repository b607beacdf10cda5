package stream

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	guard "github.com/guard-mcp/guard"
)

// timeLayout is the audit record's: RFC 3339, UTC, milliseconds.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// appendRecord appends the record as the JSON object the stream sends:
// the audit record's fields under their names (empty ones left out but
// seq, id, call_id, kind, time, prev_hash and hash; user_groups an
// array of strings), with arguments,
// result and detail as JSON values (as strings when they do not hold
// JSON), so that a receiver can index into them.
func appendRecord(b []byte, r *guard.Record) []byte {
	b = append(b, `{"seq":`...)
	b = strconv.AppendInt(b, r.Seq, 10)
	b = member(b, "id", r.ID, true)
	b = member(b, "call_id", r.CallID, true)
	b = member(b, "kind", r.Kind, true)
	b = append(b, `,"time":"`...)
	b = r.Time.UTC().AppendFormat(b, timeLayout)
	b = append(b, '"')
	b = member(b, "session", r.Session, false)
	b = member(b, "client", r.Client, false)
	b = member(b, "user", r.User, false)
	b = member(b, "user_email", r.UserEmail, false)
	if len(r.UserGroups) > 0 {
		b = append(b, `,"user_groups":[`...)
		for i, g := range r.UserGroups {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, g)
		}
		b = append(b, ']')
	}
	b = member(b, "protocol", r.Protocol, false)
	b = member(b, "server", r.Server, false)
	b = member(b, "direction", r.Direction, false)
	b = member(b, "method", r.Method, false)
	b = member(b, "tool", r.Tool, false)
	b = value(b, "arguments", r.Arguments)
	b = member(b, "pin", r.Pin, false)
	b = member(b, "decision", r.Decision, false)
	b = member(b, "decided_by", r.DecidedBy, false)
	b = member(b, "approval", r.Approval, false)
	b = member(b, "reason", r.Reason, false)
	b = member(b, "outcome", r.Outcome, false)
	b = value(b, "result", r.Result)
	b = count(b, "request_size", r.RequestSize)
	b = count(b, "response_size", r.ResponseSize)
	b = count(b, "duration_ms", r.DurationMS)
	b = value(b, "detail", r.Detail)
	b = member(b, "prev_hash", r.PrevHash, true)
	b = member(b, "hash", r.Hash, true)
	if r.Pruned {
		// Retention removed its body: it is in an archive, not empty.
		b = append(b, `,"pruned":true`...)
	}
	return append(b, '}')
}

// encode returns the record's JSON object.
func encode(r *guard.Record) []byte { return appendRecord(nil, r) }

func member(b []byte, name, v string, always bool) []byte {
	if v == "" && !always {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return appendString(b, v)
}

func count(b []byte, name string, v int64) []byte {
	if v == 0 {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return strconv.AppendInt(b, v, 10)
}

// value appends text that holds JSON as that value (compacted: a record
// is one line), and other text as a string.
func value(b []byte, name, v string) []byte {
	if v == "" {
		return b
	}
	if !json.Valid([]byte(v)) {
		return member(b, name, v, true)
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 { // whitespace between tokens
			var buf bytes.Buffer
			_ = json.Compact(&buf, []byte(v))
			return append(b, buf.Bytes()...)
		}
	}
	return append(b, v...)
}

// appendString appends s as a JSON string; bytes that are not UTF-8
// become U+FFFD. Most of a record's strings need no escaping.
func appendString(b []byte, s string) []byte {
	plain := utf8.ValidString(s)
	for i := 0; i < len(s) && plain; i++ {
		c := s[i]
		plain = c >= 0x20 && c != '"' && c != '\\'
	}
	if !plain {
		q, _ := json.Marshal(s)
		return append(b, q...)
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// Severity is how much a record matters to whoever watches the stream.
type Severity int

// Severities, from RFC 5424's names.
const (
	// Info: a call allowed and answered, an event.
	Info Severity = iota
	// Notice: a call held for a person, a person's decision, a tool
	// definition reviewed, a rule learned, a configuration loaded, guard
	// starting or stopping.
	Notice
	// Warning: a call denied, expired or invalid, a server that failed.
	Warning
)

// severity grades a record by its kind and decision.
func severity(r *guard.Record) Severity {
	switch {
	case r.Decision == guard.DecisionDenied,
		r.Outcome == guard.OutcomeDenied, r.Outcome == guard.OutcomeExpired,
		r.Outcome == guard.OutcomeInvalid, r.Outcome == guard.OutcomeUpstreamFailed,
		r.Outcome == guard.OutcomeProtocolError:
		return Warning
	case r.Decision == guard.DecisionHeld, r.Kind == guard.KindDecision, r.Kind == guard.KindToolReview,
		r.Kind == guard.KindRuleAdded, r.Kind == guard.KindConfig, r.Kind == guard.KindLifecycle:
		return Notice
	}
	return Info
}

// String names the severity as RFC 5424 does.
func (s Severity) String() string {
	switch s {
	case Warning:
		return "warning"
	case Notice:
		return "notice"
	}
	return "info"
}
