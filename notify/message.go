package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
)

// Hold is what an announcement says of a held call: the body of the json
// format, and what the Slack message is written from. It carries no
// credential: the link has no login token, and the arguments are the
// audit log's redacted form (as the audit stream sends them).
type Hold struct {
	// Type is "hold".
	Type string `json:"type"`
	// Approval is the approval's id: a receiver that gets one twice
	// (a retry, a restart) keeps the first.
	Approval string `json:"approval"`
	CallID   string `json:"call_id"`
	Server   string `json:"server"`
	Tool     string `json:"tool"`
	// Client is the bearer token's name where tokens are configured,
	// else the client's name and version; User and UserEmail the caller
	// the front authenticated, if any.
	Client    string `json:"client"`
	User      string `json:"user,omitempty"`
	UserEmail string `json:"user_email,omitempty"`
	Session   string `json:"session"`
	// Rule is the rule that held the call ("default" for the default
	// policy), Reason why, for people.
	Rule   string `json:"rule"`
	Reason string `json:"reason,omitempty"`
	// Arguments are the call's arguments as the audit log keeps them:
	// redacted, or a digest in place of arguments too large to record.
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Created   time.Time       `json:"created"`
	Expires   time.Time       `json:"expires"`
	// URL is the approval's place in the UI; the UI asks for a login.
	URL string `json:"url"`
}

// maxArguments is the most of the redacted arguments a json body carries;
// larger ones are left out (the UI shows them).
const maxArguments = 8 << 10

// announcement builds the Hold of a request record and its approval.
func announcement(rec *guard.Record, a *guard.Approval, base string) *Hold {
	h := &Hold{
		Type: "hold", Approval: a.ID, CallID: rec.CallID, Server: a.Server, Tool: a.Tool, Client: rec.Client,
		User: rec.User, UserEmail: rec.UserEmail, Session: rec.Session, Rule: a.Rule, Reason: a.HeldReason,
		Created: a.CreatedAt.UTC(), Expires: a.ExpiresAt.UTC(), URL: ApprovalURL(base, a.ID),
	}
	if len(rec.Arguments) <= maxArguments && json.Valid([]byte(rec.Arguments)) {
		h.Arguments = json.RawMessage(rec.Arguments)
	}
	return h
}

// ApprovalURL is where the UI at base shows a pending approval: the
// Pending page, at the approval's card.
func ApprovalURL(base, id string) string {
	return strings.TrimSuffix(base, "/") + "/#approval-" + url.PathEscape(id)
}

// Headers of the json format. Guard-Signature is "v1=" and the hex HMAC-SHA256,
// keyed with the receiver's secret, of Guard-Timestamp, a dot and the body.
const (
	HeaderTimestamp = "Guard-Timestamp"
	HeaderSignature = "Guard-Signature"
)

// Sign returns the Guard-Signature of a body sent at timestamp (Unix
// seconds, as in Guard-Timestamp).
func Sign(secret string, timestamp int64, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(strconv.FormatInt(timestamp, 10)))
	m.Write([]byte{'.'})
	m.Write(body)
	return "v1=" + hex.EncodeToString(m.Sum(nil))
}

// post delivers one announcement, in the receiver's format.
func (r *receiver) post(ctx context.Context, h *Hold) error {
	o := &r.n.opts
	var body []byte
	var err error
	if r.cfg.Format == FormatSlack {
		body, err = json.Marshal(SlackMessage(h))
	} else {
		body, err = json.Marshal(h)
	}
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.cfg.Webhook, bytes.NewReader(body))
	if err != nil {
		return errors.New("the webhook's address is not a URL")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "guard")
	if r.cfg.Format == FormatJSON {
		// Signed at each attempt: a retry carries a fresh timestamp.
		ts := o.Now().Unix()
		req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
		req.Header.Set(HeaderSignature, Sign(r.cfg.Secret, ts, body))
	}
	resp, err := o.Client.Do(req)
	if err != nil {
		return withoutURL(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("the receiver answered %s", resp.Status)
	}
	return nil
}

// withoutURL is a client's error without the URL it repeats: a webhook's
// address may be its credential, and errors go to logs and records.
func withoutURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return errors.New("no answer in time")
		}
		return ue.Err
	}
	return err
}

// record appends a delivery event to the audit log: what the UI shows.
// A record that cannot be written is logged (the logs said it already).
func (r *receiver) record(rec *guard.Record, state string, err error, attempts int) {
	d := map[string]any{"receiver": r.cfg.Label(), "delivery": state}
	reason := "announcement of the held call to " + r.cfg.Label()
	switch state {
	case Failing:
		reason += " failed; retrying"
	case Recovered:
		reason += " delivered: the receiver is reachable again"
	case GivenUp:
		reason += " not delivered after " + strconv.Itoa(attempts) + " attempts"
	}
	if err != nil {
		d["error"] = err.Error()
		reason += ": " + err.Error()
	}
	if attempts > 0 {
		d["attempts"] = attempts
	}
	detail, _ := json.Marshal(d)
	ev := &guard.Record{
		Kind: guard.KindEvent, Method: Method, Direction: guard.ClientToServer, Server: rec.Server, Tool: rec.Tool,
		Session: rec.Session, Client: rec.Client, Approval: rec.Approval, Reason: reason, Detail: string(detail),
	}
	go func() {
		if err := <-r.n.opts.Store.AppendAsync(ev); err != nil {
			r.log.Error("notify: the delivery event could not be recorded", "delivery", state, "err", err)
		}
	}()
}

// Problem is a receiver whose last recorded delivery event is a failure.
type Problem struct {
	Receiver string
	// State is Failing or GivenUp.
	State    string
	Error    string
	Time     time.Time
	Approval string
}

// History reads delivery events back from the audit log (store.Reader).
type History interface {
	// QueryRecords calls fn for each record of a kind matching f,
	// newest first.
	QueryRecords(ctx context.Context, kind string, f store.Filter, fn func(*guard.Record) error) error
}

// Undelivered returns the receivers among those given whose latest
// delivery event since a time, recorded by any process, is a failure.
func Undelivered(ctx context.Context, h History, since time.Time, receivers []Config) ([]Problem, error) {
	var events []*guard.Record
	err := h.QueryRecords(ctx, guard.KindEvent, store.Filter{Since: since}, func(r *guard.Record) error {
		if r.Method == Method {
			events = append(events, r)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("delivery events: %w", err)
	}
	configured := map[string]bool{}
	for _, r := range receivers {
		configured[r.Label()] = true
	}
	var out []Problem
	for _, p := range Problems(events) {
		if configured[p.Receiver] {
			out = append(out, p)
		}
	}
	return out, nil
}

// Problems reduces delivery events (records of method Method, newest
// first, from any process) to the receivers whose latest one is a
// failure, in the order of their latest events.
func Problems(events []*guard.Record) []Problem {
	seen := map[string]bool{}
	var out []Problem
	for _, ev := range events {
		if ev.Kind != guard.KindEvent || ev.Method != Method {
			continue
		}
		var d struct {
			Receiver string `json:"receiver"`
			Delivery string `json:"delivery"`
			Error    string `json:"error"`
		}
		if json.Unmarshal([]byte(ev.Detail), &d) != nil || d.Receiver == "" || seen[d.Receiver] {
			continue
		}
		seen[d.Receiver] = true
		if d.Delivery == Failing || d.Delivery == GivenUp {
			out = append(out, Problem{Receiver: d.Receiver, State: d.Delivery, Error: d.Error, Time: ev.Time, Approval: ev.Approval})
		}
	}
	return out
}

// String says what went wrong, for people.
func (p Problem) String() string {
	s := p.Receiver + ": "
	if p.State == GivenUp {
		s += "an announcement was not delivered"
	} else {
		s += "failing, retrying"
	}
	s += " (" + p.Time.UTC().Format("2006-01-02 15:04:05 UTC")
	if p.Error != "" {
		s += ": " + p.Error
	}
	return s + ")"
}
