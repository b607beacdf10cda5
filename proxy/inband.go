package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/proxy/wire"
)

// askClient asks the person at the client about a held call with a form
// elicitation of guard's own (approval.in_band: auto), while the same call
// waits in the browser and on the command line. The first decision wins:
// an answer here decides the approval; a decision made elsewhere first
// cancels the question. It returns when either happens or ctx ends.
func (s *Session) askClient(ctx context.Context, a *guard.Approval) {
	args := a.Arguments
	var pretty bytes.Buffer
	if json.Indent(&pretty, []byte(args), "", "  ") == nil {
		args = pretty.String()
	}
	params := map[string]any{
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
	s.mu.Lock()
	if s.gone {
		s.mu.Unlock()
		return
	}
	id := s.ownID()
	c := &call{method: "elicitation/create", sentID: id, sentKey: wire.IDKey(id), own: make(chan wire.Message, 1)}
	s.down[c.sentKey] = c
	s.mu.Unlock()
	data, err := wire.Request(id, "elicitation/create", params)
	if err != nil {
		return
	}
	s.toClient.push(item{data: data})
	select {
	case m := <-c.own:
		s.inBandAnswer(a, m)
	case <-ctx.Done():
		// Decided elsewhere, withdrawn, or the session ended: the
		// question is withdrawn from the client too.
		s.mu.Lock()
		delete(s.down, c.sentKey)
		s.mu.Unlock()
		if note, err := wire.Notification("notifications/cancelled", map[string]any{
			"requestId": json.RawMessage(id), "reason": "decided elsewhere"}); err == nil {
			s.toClient.push(item{data: note})
		}
	}
}

// inBandAnswer turns the client's answer into a decision. Declining is a
// denial; cancelling leaves the call to the other ways of deciding.
func (s *Session) inBandAnswer(a *guard.Approval, m wire.Message) {
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
	if _, err := s.opts.Holds.Decide(context.Background(), a.ID, approve, by, reason); err != nil {
		s.opts.Logger.Info("in-band decision not applied (decided already?)", "approval", a.ID, "err", err)
	}
}
