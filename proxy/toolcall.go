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
	"github.com/guard-mcp/guard/proxy/intercept"
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
// anything found in it is used (intercept.Step, on Read).
func (pl *pipeline) toolCall(msg wire.Message, c *call, p toolCallParams) {
	s := pl.s
	s.deciding.Add(1)
	c.deciding = &s.deciding
	c.undecided.Store(true)
	var eff intercept.Effect
	c.st, eff = intercept.Step(c.st, intercept.Event{Kind: intercept.Read, Err: wire.CheckStrict(msg), Name: p.name, Args: p.args})
	if eff.Kind != intercept.Continue {
		pl.carry(msg, c, eff)
		return
	}
	// Strict passed: no duplicate or case-variant keys, so the members
	// found here are exactly the ones the server will read.
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
				s.holds.answeredInRound(msg, c, v)
				return
			}
			round = "state\x00" + v
		}
	} else if p.inputResponses != nil {
		round = roundKey(c.st.Tool, c.st.Args)
	}
	// Until it is forwarded, a call can be withdrawn by the client.
	c.withdrawn = make(chan struct{})
	s.mu.Lock()
	if _, dup := s.byClient[c.origKey]; !dup {
		s.byClient[c.origKey] = c
	}
	s.mu.Unlock()

	if round != "" && pl.continueRound(msg, c, round) {
		return
	}
	pl.run(msg, c, pl.find(c))
}

// run moves a call on from event e: it steps the call's state and carries
// out each effect in turn, what a lookup finds being the next event,
// until the call waits (on another goroutine) or is forwarded or ended.
func (pl *pipeline) run(msg wire.Message, c *call, e intercept.Event) {
	var eff intercept.Effect
	c.st, eff = intercept.Step(c.st, e)
	pl.carry(msg, c, eff)
}

// carry carries out an effect of intercept.Step, and those that follow.
func (pl *pipeline) carry(msg wire.Message, c *call, eff intercept.Effect) {
	for {
		e, ok := pl.do(msg, c, eff)
		if !ok {
			return
		}
		c.st, eff = intercept.Step(c.st, e)
	}
}

// do carries out one effect. A lookup done here returns what it found,
// the call's next event (ok); one that waits goes on in a goroutine of its
// own.
func (pl *pipeline) do(msg wire.Message, c *call, eff intercept.Effect) (intercept.Event, bool) {
	s := pl.s
	// (Continue follows Read alone, and toolCall carries it out: it
	// needs the call's params.)
	switch eff.Kind {
	case intercept.Find:
		return pl.find(c), true
	case intercept.List:
		go pl.list(msg, c)
	case intercept.Review:
		// The review is read from the store off the relay's path. (msg
		// is passed, not captured: captured, it would be on the heap for
		// every call.)
		go func(msg wire.Message) {
			r, why, err := pl.reviewOf(c.def)
			if err != nil {
				s.opts.Logger.Error("tool review not readable", "tool", c.st.Tool, "err", err)
			} else {
				c.pc.Review, c.pc.ReviewReason = r, why
			}
			pl.run(msg, c, intercept.Event{Kind: intercept.ReviewRead, Err: err})
		}(msg)
	case intercept.Decide:
		return pl.decide(c, eff.Trusted), true
	case intercept.Hold:
		go s.holds.hold(msg, c, eff.Verdict)
	case intercept.Forward:
		s.forward(msg, c, eff.Recorded)
	case intercept.End:
		e := ending{outcome: eff.Outcome, answer: eff.Answer.Bytes(c.origID), withRequest: eff.WithRequest}
		if eff.Gone != "" {
			e.detail = map[string]any{"client_gone": eff.Gone}
		}
		s.settle(c, e)
	case intercept.Refuse:
		// Never forwarded: its approval is withdrawn, and the client
		// reads guard's refusal.
		s.holds.withdraw(c.st.Approval, "the call's request could not be recorded")
		if c.end() {
			s.forget(c)
			c.endTrace(guard.ErrAuditWrite)
			s.toClient.push(item{msg: refusal(c.origID)(nil), batch: c.batch})
		}
		c.decided()
	}
	return intercept.Event{}, false
}

// find looks a call's tool up in the catalog.
func (pl *pipeline) find(c *call) intercept.Event {
	if tool := pl.s.catalog.get(c.st.Tool); tool != nil {
		return pl.found(c, tool)
	}
	return intercept.Event{Kind: intercept.ToolMissing}
}

// list lists the server's tools for a call of a tool guard has not seen,
// then looks it up again.
func (pl *pipeline) list(msg wire.Message, c *call) {
	s := pl.s
	err := pl.refreshTools()
	if c.isWithdrawn() {
		pl.run(msg, c, intercept.Event{Kind: intercept.Withdrawn})
		return
	}
	e := pl.find(c)
	if e.Kind == intercept.ToolMissing {
		e.NoAnswer, e.Timeout = errors.Is(err, errNoAnswer), s.opts.RefreshTimeout
	}
	pl.run(msg, c, e)
}

// found is what the rules will read of a call whose tool the catalog has,
// checked against the tool's inputSchema.
func (pl *pipeline) found(c *call, tool *guard.Tool) intercept.Event {
	s := pl.s
	c.pin, c.def = tool.Pin, tool
	ci, proto := s.clientInfo()
	ci.Protocol = proto
	c.pc = &guard.Call{
		Server:    s.opts.Server,
		Method:    "tools/call",
		ToolName:  c.st.Tool,
		Arguments: c.st.Args,
		Tool:      tool,
		Client:    ci,
		User:      s.opts.Caller,
	}
	e := intercept.Event{Kind: intercept.ToolFound, Server: s.opts.Server}
	if s.opts.Contracts != nil {
		v, err := s.opts.Contracts.Arguments(tool, c.pc)
		if err != nil && s.opts.IgnoreBadSchemas {
			s.opts.Logger.Warn("inputSchema ignored: it does not compile (bad_schema: ignore)", "tool", c.st.Tool, "err", err)
			err = nil
		}
		if err != nil {
			e.Err = err // an unusable schema fails closed
			return e
		}
		c.pc.Violations = v
	}
	e.NeedsReview = s.opts.Catalog != nil && !pl.acceptedPin(tool.Pin)
	return e
}

// decide asks the rules about a call; trusted: on its tool's accepted
// definition, the call being released from its tool's review.
func (pl *pipeline) decide(c *call, trusted bool) intercept.Event {
	s := pl.s
	if trusted {
		c.pc.Review, c.pc.Tool = nil, pl.trusted(c.pc.Tool)
	}
	sp := c.decideSpan(s)
	v := s.opts.Decider.Decide(c.pc)
	decidedSpan(sp, v)
	e := intercept.Event{Kind: intercept.Decided, Verdict: v}
	switch {
	case v.Action == guard.ActionAllow:
		e.SameHeld = s.holds.heldForReview(c)
	case v.Action == guard.ActionDeny && v.Rule == guard.InputSchemaRule:
		_, e.Protocol = s.clientInfo()
	}
	return e
}

// continueRound passes a later round of a 2026-07-28 call that guard let
// through before: it is the same call, recorded under the same id, and is
// not held again.
func (pl *pipeline) continueRound(msg wire.Message, c *call, key string) bool {
	s := pl.s
	s.mu.Lock()
	prev := s.rounds[key]
	delete(s.rounds, key)
	s.mu.Unlock()
	var r *guard.Round
	if prev != nil {
		r = &guard.Round{CallID: prev.id, Tool: prev.st.Tool, Pin: prev.pin, Decision: prev.st.Decision, DecidedBy: prev.st.DecidedBy, Reason: prev.st.Reason}
		r.ArgsDigest, _ = guard.Digest(prev.st.Args)
	}
	if s.opts.Rounds != nil {
		// Kept for every replica too: taken there as well, so that
		// the round is continued once.
		ctx, cancel := context.WithTimeout(s.ctx, roundTimeout)
		shared, err := s.opts.Rounds.TakeRound(ctx, s.pipe.sharedRoundKey(key))
		cancel()
		if err != nil {
			s.opts.Logger.Warn("a later round's call could not be looked up among the replicas': it is decided anew", "tool", c.st.Tool, "err", err)
		}
		if r == nil {
			r = shared
		}
	}
	if r == nil || r.Tool != c.st.Tool {
		return false
	}
	if d, err := guard.Digest(c.st.Args); err != nil || d != r.ArgsDigest {
		return false
	}
	c.id, c.pin = r.CallID, r.Pin
	pl.run(msg, c, intercept.Event{Kind: intercept.RoundFound, Round: r})
	return true
}

// roundTimeout bounds the store's part in passing a round on.
const roundTimeout = 5 * time.Second

// sharedRoundKey scopes a round's key to the server and the client, among
// every session of every replica.
func (pl *pipeline) sharedRoundKey(key string) string {
	s := pl.s
	sum := sha256.Sum256([]byte(s.opts.Server + "\x00" + s.opts.ClientName + "\x00" + key))
	return hex.EncodeToString(sum[:])
}

// noteRound remembers an input_required answer so that the client's next
// round of the same call goes through without a second decision: in the
// session, and, with Options.Rounds, for every replica, before the answer
// reaches the client.
func (pl *pipeline) noteRound(c *call, result []byte) {
	s := pl.s
	if c.st.Decision != guard.DecisionAllowed {
		return
	}
	key := roundKey(c.st.Tool, c.st.Args)
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
	d, err := guard.Digest(c.st.Args)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), roundTimeout)
	defer cancel()
	r := guard.Round{CallID: c.id, Tool: c.st.Tool, ArgsDigest: d, Pin: c.pin, Decision: c.st.Decision, DecidedBy: c.st.DecidedBy, Reason: c.st.Reason}
	if err := s.opts.Rounds.NoteRound(ctx, s.pipe.sharedRoundKey(key), r, s.now().Add(s.opts.ApprovalTimeout)); err != nil {
		s.opts.Logger.Warn("a round could not be kept for the other replicas: the client's next round is decided anew there", "tool", c.st.Tool, "err", err)
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

func (c *call) isWithdrawn() bool {
	select {
	case <-c.withdrawn:
		return true
	default:
		return false
	}
}

// refreshTools lists the server's tools itself, every page, and replaces
// the catalog with what it lists. Concurrent callers share one refresh
// and its error.
func (pl *pipeline) refreshTools() (err error) {
	s := pl.s
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
		meta = map[string]any{MetaProtocol: proto, MetaCapabilities: json.RawMessage(`{}`)}
		if s.meta.caps != nil {
			meta[MetaCapabilities] = s.meta.caps
		}
		if s.meta.info != nil {
			meta[metaClientInfo] = s.meta.info
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
		res, err := s.pipe.ownRequest("tools/list", params)
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
	s.lists.persistTools(all)
	return nil
}

// ownRequest sends a request of guard's own to the server and waits for
// its result. Its id is guard's and never collides with one in flight.
func (pl *pipeline) ownRequest(method string, params any) (json.RawMessage, error) {
	s := pl.s
	s.mu.Lock()
	if s.gone {
		s.mu.Unlock()
		return nil, errors.New("the server has exited")
	}
	id := s.up.Own()
	c := &call{st: intercept.New(method), sentID: id, sentKey: wire.IDKey(id), own: make(chan wire.Message, 1)}
	s.up.Put(c.sentKey, c)
	s.mu.Unlock()
	data, err := wire.Request(id, method, params)
	if err != nil {
		s.forget(c)
		return nil, err
	}
	s.toServer.push(item{msg: Unparsed(data)})
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
	return ReplaceParams(msg, p)
}

// RewriteParamsMember returns the message with one member of its params
// replaced (a cancellation's requestId, when guard rewrote the id).
func RewriteParamsMember(msg wire.Message, key string, value []byte) []byte {
	var p map[string]json.RawMessage
	if json.Unmarshal(msg.Params, &p) != nil {
		return msg.Raw
	}
	p[key] = value
	return ReplaceParams(msg, p)
}

// ReplaceParams returns the message with its params replaced.
func ReplaceParams(msg wire.Message, params map[string]json.RawMessage) []byte {
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

// pipeline is a session's tools/call pipeline: it decides each call (see
// package intercept) and carries out what the decision asks for.
type pipeline struct{ s *Session }
