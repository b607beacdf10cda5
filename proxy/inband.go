package proxy

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/proxy/intercept"
	"github.com/guard-mcp/guard/wire"
)

// askClient asks the person at the client about a held call with a form
// elicitation of guard's own (approval.in_band: auto), while the same call
// waits in the browser and on the command line. The first decision wins:
// an answer here decides the approval; a decision made elsewhere first
// cancels the question. It returns when either happens or ctx ends.
func (hs *holds) askClient(ctx context.Context, a *guard.Approval) {
	s := hs.s
	params := approvalQuestion(a)
	delete(params, "mode") // before modes existed, every elicitation was a form
	s.mu.Lock()
	if s.gone {
		s.mu.Unlock()
		return
	}
	id := s.down.Own()
	c := &call{st: intercept.New("elicitation/create"), sentID: id, sentKey: wire.IDKey(id), own: make(chan wire.Message, 1)}
	s.down.Put(c.sentKey, c)
	s.mu.Unlock()
	data, err := wire.Request(id, "elicitation/create", params)
	if err != nil {
		return
	}
	s.toClient.push(item{msg: Unparsed(data)})
	select {
	case m := <-c.own:
		s.holds.inBandAnswer(a, m)
	case <-ctx.Done():
		// Decided elsewhere, withdrawn, or the session ended: the
		// question is withdrawn from the client too.
		s.mu.Lock()
		s.down.Drop(c.sentKey)
		s.mu.Unlock()
		if note, err := wire.Notification("notifications/cancelled", map[string]any{
			"requestId": json.RawMessage(id), "reason": "decided elsewhere"}); err == nil {
			s.toClient.push(item{msg: Unparsed(note)})
		}
	}
}

// inBandAnswer turns the client's answer into a decision. Declining is a
// denial; cancelling leaves the call to the other ways of deciding.
func (hs *holds) inBandAnswer(a *guard.Approval, m wire.Message) {
	s := hs.s
	var r struct {
		Action  string `json:"action"`
		Content struct {
			Decision string `json:"decision"`
			Reason   string `json:"reason"`
		} `json:"content"`
	}
	if m.Error != nil || json.Unmarshal(m.Result, &r) != nil {
		return
	}
	if !s.opts.Caller.IsZero() {
		// The person at the client is the caller whose call is held:
		// guard does not ask them (decidableInBand), nor takes their
		// answer.
		s.opts.Logger.Warn("in-band answer of an authenticated caller ignored: they cannot decide on their own call", "approval", a.ID)
		return
	}
	ci, _ := s.clientInfo()
	by := "user at " + ci.String()
	if ci.Name == "" {
		by = "user at the client"
	}
	approve := false
	reason := strings.TrimSpace(r.Content.Reason)
	switch {
	case r.Action == "accept" && r.Content.Decision == "approve":
		approve = true
	case r.Action == "accept" && r.Content.Decision == "deny":
		if reason == "" {
			reason = "denied in the client"
		}
	case r.Action == "decline":
		reason = "declined in the client"
	default:
		return
	}
	_, err := s.opts.Holds.Decide(context.Background(), a.ID, approve, by, reason)
	switch {
	case errors.Is(err, guard.ErrAuditWrite):
		s.opts.Logger.Error("in-band decision refused: the audit log could not record it", "approval", a.ID, "err", err)
	case err != nil:
		s.opts.Logger.Info("in-band decision not applied (decided already?)", "approval", a.ID, "err", err)
	}
}

// guardStatePrefix marks a requestState of guard's own: the client's next
// round of a call guard put to the person at the client (2026-07-28).
const guardStatePrefix = "guard-approval."

// guardInput names guard's own input request among a round's requests.
const guardInput = "guard-approval"

// approvalQuestion is the elicitation guard asks about a held call.
func approvalQuestion(a *guard.Approval) map[string]any {
	args := a.Arguments
	var pretty bytes.Buffer
	if json.Indent(&pretty, []byte(args), "", "  ") == nil {
		args = pretty.String()
	}
	return map[string]any{
		"mode": "form",
		"message": fmt.Sprintf("guard holds a call for your approval.\n\nServer: %s\nTool: %s\nWhy: %s\nApproval id: %s\n\nArguments:\n%s",
			a.Server, a.Tool, a.HeldReason, a.ID, args),
		"requestedSchema": map[string]any{
			"type": "object",
			"properties": map[string]any{
				"decision": map[string]any{"type": "string", "title": "Decision", "enum": []string{"approve", "deny"}},
				"reason":   map[string]any{"type": "string", "title": "Reason (needed to deny)"},
			},
			"required": []string{"decision"},
		},
	}
}

// stateFor is guard's requestState for a held call: the approval's id,
// signed with the session's key over the call's tool and arguments, so
// that a round cannot claim another call's approval.
func (hs *holds) stateFor(id, tool string, args []byte) string {
	s := hs.s
	d, _ := guard.Digest(args)
	mac := hmac.New(sha256.New, s.stateKey[:])
	fmt.Fprintf(mac, "%s\x00%s\x00%s", id, tool, d)
	return guardStatePrefix + id + "." + hex.EncodeToString(mac.Sum(nil)[:16])
}

// askInRound is the answer to a held call (2026-07-28) that asks the
// person at the client with guard's own input request; the approval stays
// pending, in the browser too, and the client's next round carries the
// person's answer.
func (hs *holds) askInRound(c *call, a *guard.Approval) []byte {
	result := map[string]any{
		"resultType":    "input_required",
		"inputRequests": map[string]any{guardInput: map[string]any{"method": "elicitation/create", "params": approvalQuestion(a)}},
		"requestState":  hs.stateFor(a.ID, c.st.Tool, c.st.Args),
	}
	data, err := wire.Response(c.origID, result)
	if err != nil {
		data = wire.Internal("Refused: the question could not be made").Answer(c.origID)
	}
	return data
}

// answeredInRound takes the client's next round of a call guard asked
// about: the answer decides the approval (unless someone decided first),
// then the call goes on, to the rules, as the round the server should see:
// without guard's members.
func (hs *holds) answeredInRound(msg wire.Message, c *call, state string) {
	s := hs.s
	rest := strings.TrimPrefix(state, guardStatePrefix)
	id, _, _ := strings.Cut(rest, ".")
	e := intercept.Event{Kind: intercept.InRound, Valid: hmac.Equal([]byte(state), []byte(hs.stateFor(id, c.st.Tool, c.st.Args))),
		Approval: &guard.Approval{ID: id}, Timeout: s.opts.ApprovalTimeout}
	if e.Valid {
		c.id = id // the rounds of one call share its id
		var responses map[string]json.RawMessage
		_ = json.Unmarshal(wire.ParamsMember(msg.Params, "inputResponses"), &responses)
		if r := responses[guardInput]; r != nil {
			hs.inBandAnswer(&guard.Approval{ID: id}, wire.Message{Result: r})
		}
		// The first decision wins: the answer above, or one made before it.
		if a, err := s.opts.Holds.Get(s.ctx, id); err != nil {
			e.Err = err
		} else {
			e.Approval = a
		}
	}
	var eff intercept.Effect
	c.st, eff = intercept.Step(c.st, e)
	if eff.Kind == intercept.Find {
		// guard's members are its own.
		fwd := wire.Message{Raw: withoutParams(msg, "inputResponses", "requestState")}
		if m, err := wire.Parse(fwd.Raw); err == nil {
			fwd = m
		}
		c.askedInBand = true
		msg = fwd
	}
	// A round that reached a session that has not read the server's
	// tools yet (another replica than the first round's) reads them, as
	// for any call of a tool it has not seen.
	s.pipe.carry(msg, c, eff)
}

// withoutParams returns the message with members of its params removed.
func withoutParams(msg wire.Message, keys ...string) []byte {
	var p map[string]json.RawMessage
	if json.Unmarshal(msg.Params, &p) != nil {
		return msg.Raw
	}
	for _, k := range keys {
		delete(p, k)
	}
	return ReplaceParams(msg, p)
}
