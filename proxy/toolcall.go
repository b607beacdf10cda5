package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/wire"
)

// errNoAnswer is guard's own request left unanswered within
// Options.RefreshTimeout.
var errNoAnswer = errors.New("no answer")

// toolCallParams are the members of a tools/call's params guard reads.
type toolCallParams struct {
	name, args, requestState, inputResponses []byte
	meta                                     requestMeta
}

// readToolCall finds the members of a tools/call's params guard reads: one
// pass over the params, one over their _meta.
func readToolCall(params []byte) toolCallParams {
	var m [5][]byte
	wire.Members(params, []string{"name", "arguments", "_meta", "requestState", "inputResponses"}, m[:])
	return toolCallParams{name: m[0], args: m[1], meta: readMeta(m[2]), requestState: m[3], inputResponses: m[4]}
}

// toolCall decides a tools/call, whose params' members p holds. guard
// decides on exactly what the server will read: a message with duplicate
// keys, keys differing only in case or invalid UTF-8 is refused before
// anything found in it is used.
func (s *Session) toolCall(msg wire.Message, c *call, p toolCallParams) {
	s.deciding.Add(1)
	c.deciding = &s.deciding
	c.undecided.Store(true)
	if err := wire.CheckStrict(msg); err != nil {
		c.reason = err.Error()
		s.conclude(c, true, guard.OutcomeInvalid,
			wire.ErrorResponse(c.origID, wire.CodeInvalidRequest, "Invalid request: "+err.Error(), nil))
		return
	}
	// Strict passed: no duplicate or case-variant keys, so the members
	// found here are exactly the ones the server will read.
	name, ok := wire.String(p.name)
	if !ok || name == "" {
		c.reason = "Invalid params: tools/call needs a tool name"
		s.conclude(c, true, guard.OutcomeInvalid, wire.ErrorResponse(c.origID, wire.CodeInvalidParams, c.reason, nil))
		return
	}
	c.tool = name
	c.args = p.args
	if len(c.args) == 0 || string(c.args) == "null" {
		c.args = []byte("{}")
	} else if c.args[0] != '{' {
		c.reason = "Invalid params: arguments must be an object"
		s.conclude(c, true, guard.OutcomeInvalid, wire.ErrorResponse(c.origID, wire.CodeInvalidParams, c.reason, nil))
		return
	}
	if tok := p.meta.progressToken; len(tok) > 0 && string(tok) != "null" {
		c.progress = tok
	}
	// A later round of a 2026-07-28 call names the round it continues by
	// its requestState, or (when the server gave none) by answering input
	// requests for the same tool and arguments.
	var round string
	if rs := p.requestState; rs != nil {
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
	} else if p.inputResponses != nil {
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
	var r *guard.Round
	if prev != nil {
		r = &guard.Round{CallID: prev.id, Tool: prev.tool, Pin: prev.pin, Decision: prev.decision, DecidedBy: prev.decidedBy, Reason: prev.reason}
		r.ArgsDigest, _ = guard.Digest(prev.args)
	}
	if s.opts.Rounds != nil {
		// Kept for every replica too: taken there as well, so that
		// the round is continued once.
		ctx, cancel := context.WithTimeout(s.ctx, roundTimeout)
		shared, err := s.opts.Rounds.TakeRound(ctx, s.sharedRoundKey(key))
		cancel()
		if err != nil {
			s.opts.Logger.Warn("a later round's call could not be looked up among the replicas': it is decided anew", "tool", c.tool, "err", err)
		}
		if r == nil {
			r = shared
		}
	}
	if r == nil || r.Tool != c.tool {
		return false
	}
	if d, err := guard.Digest(c.args); err != nil || d != r.ArgsDigest {
		return false
	}
	c.id, c.pin = r.CallID, r.Pin
	c.decision, c.decidedBy, c.reason = r.Decision, r.DecidedBy, r.Reason
	s.forward(msg, c, false)
	return true
}

// roundTimeout bounds the store's part in passing a round on.
const roundTimeout = 5 * time.Second

// sharedRoundKey scopes a round's key to the server and the client, among
// every session of every replica.
func (s *Session) sharedRoundKey(key string) string {
	sum := sha256.Sum256([]byte(s.opts.Server + "\x00" + s.opts.ClientName + "\x00" + key))
	return hex.EncodeToString(sum[:])
}

// noteRound remembers an input_required answer so that the client's next
// round of the same call goes through without a second decision: in the
// session, and, with Options.Rounds, for every replica, before the answer
// reaches the client.
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
	if s.opts.Rounds == nil {
		return
	}
	d, err := guard.Digest(c.args)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), roundTimeout)
	defer cancel()
	r := guard.Round{CallID: c.id, Tool: c.tool, ArgsDigest: d, Pin: c.pin, Decision: c.decision, DecidedBy: c.decidedBy, Reason: c.reason}
	if err := s.opts.Rounds.NoteRound(ctx, s.sharedRoundKey(key), r, s.now().Add(s.opts.ApprovalTimeout)); err != nil {
		s.opts.Logger.Warn("a round could not be kept for the other replicas: the client's next round is decided anew there", "tool", c.tool, "err", err)
	}
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
		User:      s.opts.Caller,
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
	// The review is read from the store off the relay's path. (msg is
	// passed, not captured: captured, it would be on the heap for every
	// call.)
	go func(msg wire.Message) {
		r, why, err := s.reviewOf(tool)
		if err != nil {
			s.opts.Logger.Error("tool review not readable", "tool", c.tool, "err", err)
			c.decision, c.decidedBy, c.reason = guard.DecisionDenied, guard.ToolReviewRule, err.Error()
			s.conclude(c, true, guard.OutcomeDenied, toolError(c.origID, "Refused: the tool's review could not be read"))
			return
		}
		pc.Review, pc.ReviewReason = r, why
		s.apply(msg, c, pc, false)
	}(msg)
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
		if s.heldForReview(c) {
			// The same call waits, held for its tool's review, for a
			// person's own decision: this one waits for it too.
			go s.hold(msg, c, guard.Verdict{Action: guard.ActionApprove, Rule: guard.ToolReviewRule, PolicyVersion: v.PolicyVersion,
				Reason: "the same call is held for its tool's review and waits for a person's decision"}, pc)
			return
		}
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
		if err == nil {
			err = wire.StrictListing(res)
		}
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
