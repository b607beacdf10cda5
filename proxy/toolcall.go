package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/wire"
)

// errNoAnswer is guard's own request left unanswered within
// Options.RefreshTimeout.
var errNoAnswer = errors.New("no answer")

// toolCall decides a tools/call. guard decides on exactly what the server
// will read: a message with duplicate keys, keys differing only in case or
// invalid UTF-8 is refused before anything is read from it.
func (s *Session) toolCall(msg wire.Message, c *call) {
	s.deciding.Add(1)
	var once sync.Once
	c.decidingDone = func() { once.Do(s.deciding.Done) }
	if err := wire.Strict(msg.Raw); err != nil {
		c.reason = err.Error()
		s.conclude(c, true, guard.OutcomeInvalid,
			wire.ErrorResponse(c.origID, wire.CodeInvalidRequest, "Invalid request: "+err.Error(), nil))
		return
	}
	// Strict passed: no duplicate or case-variant keys, so the members
	// found here are exactly the ones the server will read.
	name, ok := wire.String(wire.ParamsMember(msg.Params, "name"))
	if !ok || name == "" {
		c.reason = "Invalid params: tools/call needs a tool name"
		s.conclude(c, true, guard.OutcomeInvalid, wire.ErrorResponse(c.origID, wire.CodeInvalidParams, c.reason, nil))
		return
	}
	c.tool = name
	c.args = wire.ParamsMember(msg.Params, "arguments")
	if len(c.args) == 0 || string(c.args) == "null" {
		c.args = []byte("{}")
	} else if c.args[0] != '{' {
		c.reason = "Invalid params: arguments must be an object"
		s.conclude(c, true, guard.OutcomeInvalid, wire.ErrorResponse(c.origID, wire.CodeInvalidParams, c.reason, nil))
		return
	}
	if tok := wire.MetaMember(msg.Params, "progressToken"); len(tok) > 0 && string(tok) != "null" {
		c.progress = tok
	}
	// A later round of a 2026-07-28 call names the round it continues by
	// its requestState, or (when the server gave none) by answering input
	// requests for the same tool and arguments.
	var round string
	if rs := wire.ParamsMember(msg.Params, "requestState"); rs != nil {
		if v, ok := wire.String(rs); ok {
			if strings.HasPrefix(v, guardStatePrefix) {
				s.mu.Lock()
				if _, dup := s.byClient[c.origKey]; !dup {
					s.byClient[c.origKey] = c
				}
				s.mu.Unlock()
				c.withdrawn = make(chan struct{})
				s.answeredInRound(msg, c, v)
				return
			}
			round = "state\x00" + v
		}
	} else if wire.ParamsMember(msg.Params, "inputResponses") != nil {
		round = roundKey(c.tool, c.args)
	}
	// Until it is forwarded, a call can be withdrawn by the client.
	c.withdrawn = make(chan struct{})
	s.mu.Lock()
	if _, dup := s.byClient[c.origKey]; !dup {
		s.byClient[c.origKey] = c
	}
	s.mu.Unlock()

	if round != "" && s.continueRound(msg, c, round) {
		return
	}
	if tool := s.catalog.get(c.tool); tool != nil {
		s.decide(msg, c, tool)
		return
	}
	go s.unknownTool(msg, c)
}

// continueRound passes a later round of a 2026-07-28 call that guard let
// through before: it is the same call, recorded under the same id, and is
// not held again.
func (s *Session) continueRound(msg wire.Message, c *call, key string) bool {
	s.mu.Lock()
	prev := s.rounds[key]
	delete(s.rounds, key)
	s.mu.Unlock()
	if prev == nil || prev.tool != c.tool {
		return false
	}
	a, errA := guard.Digest(prev.args)
	b, errB := guard.Digest(c.args)
	if errA != nil || errB != nil || a != b {
		return false
	}
	c.id, c.pin = prev.id, prev.pin
	c.decision, c.decidedBy, c.reason = prev.decision, prev.decidedBy, prev.reason
	s.forward(msg, c, false)
	return true
}

// noteRound remembers an input_required answer so that the client's next
// round of the same call goes through without a second decision.
func (s *Session) noteRound(c *call, result []byte) {
	if c.decision != guard.DecisionAllowed {
		return
	}
	key := roundKey(c.tool, c.args)
	if v := wire.ParamsMember(result, "requestState"); v != nil {
		if state, ok := wire.String(v); ok && state != "" {
			key = "state\x00" + state
		}
	}
	s.mu.Lock()
	s.rounds[key] = c
	s.mu.Unlock()
}

// roundKey links rounds that carry no requestState: same tool, same
// arguments.
func roundKey(tool string, args []byte) string {
	d, err := guard.Digest(args)
	if err != nil {
		return ""
	}
	return "call\x00" + tool + "\x00" + d
}

func (s *Session) unknownTool(msg wire.Message, c *call) {
	err := s.refreshTools()
	if c.isWithdrawn() {
		s.withdrawn(c)
		return
	}
	tool := s.catalog.get(c.tool)
	if tool == nil && errors.Is(err, errNoAnswer) {
		// The tool may exist: guard could not see the list, and says so.
		c.reason = fmt.Sprintf("the server did not answer tools/list within %v", s.opts.RefreshTimeout)
		s.conclude(c, true, guard.OutcomeUpstreamFailed, wire.ErrorResponse(c.origID, wire.CodeInternalError,
			fmt.Sprintf("Refused: the server did not answer tools/list within %v, so guard cannot judge a call of %q", s.opts.RefreshTimeout, c.tool), nil))
		return
	}
	if tool == nil {
		c.reason = "unknown tool"
		s.conclude(c, true, guard.OutcomeInvalid,
			wire.ErrorResponse(c.origID, wire.CodeInvalidParams, "Unknown tool: "+c.tool, nil))
		return
	}
	s.decide(msg, c, tool)
}

func (c *call) isWithdrawn() bool {
	select {
	case <-c.withdrawn:
		return true
	default:
		return false
	}
}

// withdrawn records a call the client cancelled before it was forwarded;
// per the specification, a cancelled request gets no answer.
func (s *Session) withdrawn(c *call) {
	defer c.decided()
	if !c.end() {
		return
	}
	s.forget(c)
	out := s.record(guard.KindOutcome, c)
	out.Outcome = guard.OutcomeCancelled
	out.DurationMS = s.now().Sub(c.start).Milliseconds()
	recs := []*guard.Record{out}
	if !c.recorded.Swap(true) {
		recs = []*guard.Record{s.record(guard.KindRequest, c), out}
	}
	ch := s.opts.Recorder.AppendAsync(recs...)
	go func() {
		if err := <-ch; err != nil {
			s.opts.Logger.Error("audit record of a withdrawn call failed", "err", err)
		}
	}()
	if c.batch != nil {
		s.toClient.push(item{batch: c.batch})
	}
}

func (s *Session) decide(msg wire.Message, c *call, tool *guard.Tool) {
	c.pin, c.def = tool.Pin, tool
	ci, proto := s.clientInfo()
	ci.Protocol = proto
	pc := &guard.Call{
		Server:    s.opts.Server,
		Method:    "tools/call",
		ToolName:  c.tool,
		Arguments: c.args,
		Tool:      tool,
		Client:    ci,
	}
	if s.opts.Contracts != nil {
		v, err := s.opts.Contracts.Arguments(tool, pc)
		if err != nil && s.opts.IgnoreBadSchemas {
			s.opts.Logger.Warn("inputSchema ignored: it does not compile (bad_schema: ignore)", "tool", c.tool, "err", err)
			err = nil
		}
		if err != nil {
			// An unusable schema fails closed.
			c.decision, c.decidedBy = guard.DecisionDenied, guard.InputSchemaRule
			c.reason = err.Error()
			s.conclude(c, true, guard.OutcomeDenied, toolError(c.origID, fmt.Sprintf(
				"Refused: the inputSchema of tool %q on server %q cannot be used: %v", c.tool, s.opts.Server, err)))
			return
		}
		pc.Violations = v
	}
	if s.opts.Catalog == nil || s.acceptedPin(tool.Pin) {
		s.apply(msg, c, pc, false)
		return
	}
	// The review is read from the store off the relay's path.
	go func() {
		r, why, err := s.reviewOf(tool)
		if err != nil {
			s.opts.Logger.Error("tool review not readable", "tool", c.tool, "err", err)
			c.decision, c.decidedBy, c.reason = guard.DecisionDenied, guard.ToolReviewRule, err.Error()
			s.conclude(c, true, guard.OutcomeDenied, toolError(c.origID, "Refused: the tool's review could not be read"))
			return
		}
		pc.Review, pc.ReviewReason = r, why
		s.apply(msg, c, pc, false)
	}()
}

// apply decides a call by policy and acts on the verdict. recorded says
// its request record was written already (it was held before).
func (s *Session) apply(msg wire.Message, c *call, pc *guard.Call, recorded bool) {
	v := s.opts.Decider.Decide(pc)
	c.decidedBy, c.reason = v.Rule, v.Reason
	if v.Would != "" {
		c.reason = "monitor mode: enforcement would " + v.Would + " (" + v.Rule + "): " + v.Reason
		c.detail = map[string]any{"monitor": map[string]string{"would": v.Would, "rule": v.Rule}}
	}
	switch v.Action {
	case guard.ActionAllow:
		c.decision = guard.DecisionAllowed
		s.forward(msg, c, recorded)
	case guard.ActionDeny:
		c.decision = guard.DecisionDenied
		if v.Rule == guard.InputSchemaRule {
			s.conclude(c, !recorded, guard.OutcomeInvalid, s.invalidArguments(c, v.Reason))
			return
		}
		s.conclude(c, !recorded, guard.OutcomeDenied, toolError(c.origID, guard.DenialText(v)))
	default:
		go s.hold(msg, c, v, pc)
	}
}

// hold keeps a call until a person decides, while the relay goes on.
func (s *Session) hold(msg wire.Message, c *call, v guard.Verdict, pc *guard.Call) {
	ctx := s.ctx
	digest, err := guard.Digest(c.args)
	if err != nil || s.opts.Holds == nil {
		c.decision = guard.DecisionDenied
		text := "Refused: this call needs a person's approval, and approvals are not available"
		if err != nil {
			text = "Refused: the arguments could not be digested: " + err.Error()
		}
		s.conclude(c, true, guard.OutcomeDenied, toolError(c.origID, text))
		return
	}
	// A repeated call that a person approved passes, once.
	a, ok, err := s.opts.Holds.Consume(ctx, s.opts.Server, c.tool, digest, c.pin, v.PolicyVersion)
	if err == nil && ok {
		if v.Rule == guard.ToolReviewRule {
			// A person let this call past the tool's review: the rules
			// decide it now.
			pc.Review = nil
			s.apply(msg, c, pc, c.recorded.Load())
			return
		}
		c.decision, c.decidedBy = guard.DecisionAllowed, a.DecidedBy
		c.reason = "approved (approval " + a.ID + ")"
		if a.Reason != "" {
			c.reason += ": " + a.Reason
		}
		s.forward(msg, c, c.recorded.Load())
		return
	}
	s.mu.Lock()
	full := s.held >= s.opts.MaxPending
	if !full {
		s.held++
	}
	s.mu.Unlock()
	if full {
		c.decision, c.decidedBy = guard.DecisionDenied, guard.PendingLimitRule
		c.reason = fmt.Sprintf("%d calls of this session are already waiting for approval", s.opts.MaxPending)
		s.conclude(c, !c.recorded.Load(), guard.OutcomeDenied, toolError(c.origID, fmt.Sprintf(
			"Refused: %d calls of this session are already waiting for approval; wait for a decision before making more", s.opts.MaxPending)))
		return
	}
	// The slot frees once the wait ends, before the answer is sent.
	var once sync.Once
	release := func() {
		once.Do(func() {
			s.mu.Lock()
			s.held--
			s.mu.Unlock()
		})
	}
	defer release()
	c.decision = guard.DecisionHeld
	ci, _ := s.clientInfo()
	args := c.args
	if s.opts.MaskOwnSecrets != nil {
		args, _ = s.opts.MaskOwnSecrets(args)
	}
	a, _, err = s.opts.Holds.Hold(ctx, &guard.Approval{
		ID: c.holdID(), Session: s.id, Client: ci.String(), Server: s.opts.Server, Tool: c.tool,
		Arguments: string(args), Digest: digest, Pin: c.pin, PolicyVersion: v.PolicyVersion,
		Rule: v.Rule, HeldReason: v.Reason,
	})
	if err != nil {
		s.opts.Logger.Error("held call refused: approval not stored", "tool", c.tool, "err", err)
		s.conclude(c, true, guard.OutcomeProtocolError,
			wire.ErrorResponse(c.origID, wire.CodeInternalError, "Refused: the approval could not be stored", nil))
		return
	}
	if c.recorded.Swap(true) {
		// Held again after a review hold: its request is recorded.
	} else if err := <-s.opts.Recorder.AppendAsync(s.record(guard.KindRequest, c)); err != nil {
		_ = s.opts.Holds.Withdraw(context.Background(), a.ID)
		if c.end() {
			s.forget(c)
			s.toClient.push(item{msg: refusal(c.origID)(err), batch: c.batch})
		}
		c.decided()
		return
	}
	defer c.decided() // a held call is being decided until its wait ends
	awaitCtx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-c.withdrawn:
			cancel()
		case <-awaitCtx.Done():
		}
	}()
	if c.progress != nil {
		s.sendProgress(c, "waiting for approval at the guard UI; approval id "+a.ID)
	}
	s.mu.Lock()
	inBand := s.opts.InBand && s.elicitForm && !c.askedInBand
	modern := s.protocol >= guard.Rev20260728
	s.mu.Unlock()
	if inBand && modern {
		// 2026-07-28: guard's own input request, answered in the
		// client's next round of this call.
		cancel()
		s.askInRound(c, a)
		return
	}
	if inBand {
		go s.askClient(awaitCtx, a)
	}
	res, err := s.opts.Holds.Await(awaitCtx, a.ID, func(m string) {
		if c.progress != nil {
			s.sendProgress(c, m)
		}
	})
	cancel()
	release()
	if c.isWithdrawn() {
		_ = s.opts.Holds.Withdraw(context.Background(), a.ID)
		s.withdrawn(c)
		return
	}
	if err != nil {
		if errors.Is(err, context.Canceled) {
			// The session ended (ServerGone answered): the call can no
			// longer be forwarded, so its approval is withdrawn.
			_ = s.opts.Holds.Withdraw(context.Background(), a.ID)
			return
		}
		s.opts.Logger.Error("waiting for a decision failed", "approval", a.ID, "err", err)
		s.conclude(c, false, guard.OutcomeProtocolError,
			wire.ErrorResponse(c.origID, wire.CodeInternalError, "Refused: the decision on this call could not be read", nil))
		return
	}
	if res.Approval != nil {
		a = res.Approval
	}
	switch res.End {
	case guard.WaitApproved:
		if c.progress != nil {
			s.mu.Lock()
			s.progress[wire.IDKey(c.progress)] = c
			s.mu.Unlock()
		}
		if v.Rule == guard.ToolReviewRule {
			// Released from the tool's review (by a person, or by
			// accepting the definition): the rules decide it now.
			pc.Review = nil
			s.apply(msg, c, pc, true)
			return
		}
		c.decision, c.decidedBy, c.reason = guard.DecisionAllowed, a.DecidedBy, a.Reason
		s.forward(msg, c, true)
	case guard.WaitDenied:
		c.decision, c.decidedBy, c.reason = guard.DecisionDenied, a.DecidedBy, a.Reason
		s.conclude(c, false, guard.OutcomeDenied, toolError(c.origID, guard.DeniedByPersonText(a)))
	case guard.WaitExpired:
		c.reason = "no decision within the approval timeout"
		s.conclude(c, false, guard.OutcomeExpired, toolError(c.origID, guard.ExpiredText(s.opts.ApprovalTimeout)))
	case guard.WaitWithdrawn:
		c.reason = "withdrawn"
		s.conclude(c, false, guard.OutcomeCancelled, toolError(c.origID, "Withdrawn: this call was withdrawn before anyone decided on it"))
	default: // the wait limit
		s.conclude(c, false, guard.OutcomeAwaitingApproval, toolError(c.origID, guard.RetryText(a.ID)))
	}
}

// sendProgress tells a client that set a progressToken that its call is
// still waiting. The values guard sends count up from 1; the server's own
// progress for the call is shifted past them once it is forwarded.
func (s *Session) sendProgress(c *call, text string) {
	c.progBase++
	data, err := wire.Notification("notifications/progress", map[string]any{
		"progressToken": json.RawMessage(c.progress),
		"progress":      c.progBase,
		"message":       text,
	})
	if err == nil {
		s.toClient.push(item{msg: unparsed(data)})
	}
}

// refreshTools lists the server's tools itself, every page, and replaces
// the catalog with what it lists. Concurrent callers share one refresh
// and its error.
func (s *Session) refreshTools() (err error) {
	s.mu.Lock()
	if ch := s.refresh; ch != nil {
		s.mu.Unlock()
		<-ch
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.refreshErr
	}
	ch := make(chan struct{})
	s.refresh = ch
	proto := s.protocol
	var meta map[string]any
	if proto >= guard.Rev20260728 {
		meta = map[string]any{metaProtocol: proto, metaCapabilities: json.RawMessage(`{}`)}
		if s.metaCaps != nil {
			meta[metaCapabilities] = s.metaCaps
		}
		if s.metaInfo != nil {
			meta[metaClientInfo] = s.metaInfo
		}
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.refresh = nil
		s.refreshErr = err
		s.mu.Unlock()
		close(ch)
	}()
	var all []guard.Tool
	cursor := ""
	for range 1000 {
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		if meta != nil {
			params["_meta"] = meta
		}
		res, err := s.ownRequest("tools/list", params)
		if err != nil {
			s.opts.Logger.Warn("guard's own tools/list failed", "server", s.opts.Server, "err", err)
			return err
		}
		tools, next, err := parseTools(s.opts.Server, res)
		if err != nil {
			s.opts.Logger.Warn("tools/list", "server", s.opts.Server, "err", err)
		}
		all = append(all, tools...)
		if next == "" {
			break
		}
		cursor = next
	}
	s.catalog.add(all, true)
	s.persistTools(all)
	return nil
}

// ownRequest sends a request of guard's own to the server and waits for
// its result. Its id is guard's and never collides with one in flight.
func (s *Session) ownRequest(method string, params any) (json.RawMessage, error) {
	s.mu.Lock()
	if s.gone {
		s.mu.Unlock()
		return nil, errors.New("the server has exited")
	}
	id := s.up.own()
	c := &call{method: method, sentID: id, sentKey: wire.IDKey(id), own: make(chan wire.Message, 1)}
	s.up.put(c.sentKey, c)
	s.mu.Unlock()
	data, err := wire.Request(id, method, params)
	if err != nil {
		s.forget(c)
		return nil, err
	}
	s.toServer.push(item{msg: unparsed(data)})
	t := time.NewTimer(s.opts.RefreshTimeout)
	defer t.Stop()
	select {
	case m, ok := <-c.own:
		if !ok {
			return nil, errors.New("the server exited before answering")
		}
		if m.Error != nil {
			return nil, errors.New("the server answered " + string(m.Error))
		}
		return m.Result, nil
	case <-t.C:
		s.forget(c)
		return nil, fmt.Errorf("%w within %v", errNoAnswer, s.opts.RefreshTimeout)
	case <-s.ctx.Done():
		return nil, s.ctx.Err()
	}
}

// shiftProgress moves a server's progress past the values guard sent while
// the call was held, so that the client still sees them increase.
func shiftProgress(msg wire.Message, base float64) []byte {
	var p map[string]json.RawMessage
	if json.Unmarshal(msg.Params, &p) != nil {
		return msg.Raw
	}
	for _, k := range []string{"progress", "total"} {
		var v float64
		if raw, ok := p[k]; ok && json.Unmarshal(raw, &v) == nil {
			p[k], _ = json.Marshal(v + base)
		}
	}
	return replaceParams(msg, p)
}

// rewriteParamsMember returns the message with one member of its params
// replaced (a cancellation's requestId, when guard rewrote the id).
func rewriteParamsMember(msg wire.Message, key string, value []byte) []byte {
	var p map[string]json.RawMessage
	if json.Unmarshal(msg.Params, &p) != nil {
		return msg.Raw
	}
	p[key] = value
	return replaceParams(msg, p)
}

func replaceParams(msg wire.Message, params map[string]json.RawMessage) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(msg.Raw, &m) != nil {
		return msg.Raw
	}
	b, err := json.Marshal(params)
	if err != nil {
		return msg.Raw
	}
	m["params"] = b
	out, err := json.Marshal(m)
	if err != nil {
		return msg.Raw
	}
	return out
}

// holdID is the id of a call's approval: the call's own id, or a new one
// when the call was held before (after its tool's review).
func (c *call) holdID() string {
	c.holds++
	if c.holds == 1 {
		return c.id
	}
	return guard.NewID()
}
