package stream

import (
	"encoding/json"

	guard "github.com/guard-mcp/guard"
)

// wireRecord is a record as the stream sends it: the audit record's fields
// under their names, with arguments, result and detail as JSON values
// (as text when they do not hold JSON), so that a receiver can index
// into them.
type wireRecord struct {
	Seq          int64           `json:"seq"`
	ID           string          `json:"id"`
	CallID       string          `json:"call_id"`
	Kind         string          `json:"kind"`
	Time         string          `json:"time"`
	Session      string          `json:"session,omitempty"`
	Client       string          `json:"client,omitempty"`
	Protocol     string          `json:"protocol,omitempty"`
	Server       string          `json:"server,omitempty"`
	Direction    string          `json:"direction,omitempty"`
	Method       string          `json:"method,omitempty"`
	Tool         string          `json:"tool,omitempty"`
	Arguments    json.RawMessage `json:"arguments,omitempty"`
	Pin          string          `json:"pin,omitempty"`
	Decision     string          `json:"decision,omitempty"`
	DecidedBy    string          `json:"decided_by,omitempty"`
	Approval     string          `json:"approval,omitempty"`
	Reason       string          `json:"reason,omitempty"`
	Outcome      string          `json:"outcome,omitempty"`
	Result       json.RawMessage `json:"result,omitempty"`
	RequestSize  int64           `json:"request_size,omitempty"`
	ResponseSize int64           `json:"response_size,omitempty"`
	DurationMS   int64           `json:"duration_ms,omitempty"`
	Detail       json.RawMessage `json:"detail,omitempty"`
	PrevHash     string          `json:"prev_hash"`
	Hash         string          `json:"hash"`
}

// timeLayout is the audit record's: RFC 3339, UTC, milliseconds.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// encode returns the record as the JSON object the stream sends.
func encode(r *guard.Record) []byte {
	w := wireRecord{
		Seq: r.Seq, ID: r.ID, CallID: r.CallID, Kind: r.Kind, Time: r.Time.UTC().Format(timeLayout),
		Session: r.Session, Client: r.Client, Protocol: r.Protocol, Server: r.Server, Direction: r.Direction,
		Method: r.Method, Tool: r.Tool, Arguments: jsonValue(r.Arguments), Pin: r.Pin, Decision: r.Decision,
		DecidedBy: r.DecidedBy, Approval: r.Approval, Reason: r.Reason, Outcome: r.Outcome, Result: jsonValue(r.Result),
		RequestSize: r.RequestSize, ResponseSize: r.ResponseSize, DurationMS: r.DurationMS, Detail: jsonValue(r.Detail),
		PrevHash: r.PrevHash, Hash: r.Hash,
	}
	b, err := json.Marshal(&w)
	if err != nil {
		// Only a value json.Valid accepted is embedded: unreachable, but a
		// record is never dropped for it.
		w.Arguments, w.Result, w.Detail = textValue(r.Arguments), textValue(r.Result), textValue(r.Detail)
		b, _ = json.Marshal(&w)
	}
	return b
}

// jsonValue is text that holds JSON as that value, other text as a JSON
// string, and no text as nothing.
func jsonValue(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	if json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	return textValue(s)
}

func textValue(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	b, _ := json.Marshal(s)
	return b
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
