package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"sync"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/proxy/intercept"
	"github.com/guard-mcp/guard/wire"
	"go.opentelemetry.io/otel/attribute"
)

// held is a tools/call that policy holds for a person. It owns the steps
// of the wait, in order: a prior approval of the same call is used, once;
// otherwise a slot among the session's pending calls is reserved, the
// approval is stored, the request recorded, and the decision awaited (from
// the browser, from the person at the client, or the wait's limit); then
// the call is settled: forwarded, decided again by the rules, or answered
// (record, then answer). What each step finds is an event of the call's
// (intercept.Step decides what it means).
type held struct {
	s      *Session
	c      *call
	msg    wire.Message
	v      guard.Verdict
	digest string
	a      *guard.Approval
	free   func() // gives the pending slot back (once)
}

// hold keeps a call until a person decides, while the relay goes on.
func (hs *holds) hold(msg wire.Message, c *call, v guard.Verdict) {
	s := hs.s
	h := &held{s: s, c: c, msg: msg, v: v}
	if c.tr != nil {
		c.tr.hold = c.tr.stage(s, "guard.hold", attribute.String(attrRule, v.Rule))
		defer h.endHold(nil)
	}
	if !h.digestArgs() || h.usePrior() || !h.present() || !h.reserve() {
		return
	}
	defer h.free()
	if !h.store() || !h.record() {
		return
	}
	defer c.decided() // a held call is being decided until its wait ends
	if e, ok := h.await(); ok {
		h.settle(e)
	}
}

// step moves the held call on from e, and carries out what follows. It
// reports whether the call still waits in this hold.
func (h *held) step(e intercept.Event) bool {
	c := h.c
	var eff intercept.Effect
	c.st, eff = intercept.Step(c.st, e)
	if eff.Kind == intercept.None {
		return c.st.State == intercept.Holding
	}
	h.s.pipe.carry(h.msg, c, eff)
	return false
}

// digestArgs digests the arguments that an approval is given for.
func (h *held) digestArgs() bool {
	s, c := h.s, h.c
	digest, err := guard.Digest(c.st.Args)
	if err != nil || s.opts.Holds == nil {
		h.step(intercept.Event{Kind: intercept.HoldRefused, Err: err})
		return false
	}
	h.digest = digest
	return true
}

// usePrior lets a repeated call that a person approved pass, once.
func (h *held) usePrior() bool {
	s, c := h.s, h.c
	a, ok, err := s.opts.Holds.Consume(s.ctx, s.opts.Server, c.st.Tool, h.digest, c.pin, h.v.PolicyVersion, s.holds.holdScope())
	if err != nil || !ok {
		return false
	}
	h.step(intercept.Event{Kind: intercept.PriorApproval, Approval: a, Session: s.id})
	return true
}

// present marks the call held, unless its client is gone already: then
// nobody could ever use a decision on it, and it is recorded withdrawn,
// unanswered, instead of held.
func (h *held) present() bool {
	s, c := h.s, h.c
	s.mu.Lock()
	left := s.left.why
	c.holding = left == ""
	s.mu.Unlock()
	if left == "" {
		return true
	}
	h.step(intercept.Event{Kind: intercept.ClientGone, Why: left})
	return false
}

// reserve takes a slot among the session's pending calls, or denies the
// call when they are all taken.
func (h *held) reserve() bool {
	s := h.s
	s.mu.Lock()
	full := s.held >= s.opts.MaxPending
	if !full {
		s.held++
	}
	s.mu.Unlock()
	if full {
		h.step(intercept.Event{Kind: intercept.PendingFull, Max: s.opts.MaxPending})
		return false
	}
	var once sync.Once
	h.free = func() {
		once.Do(func() {
			s.mu.Lock()
			s.held--
			s.mu.Unlock()
		})
	}
	return true
}

// store stores the approval the person decides on (or finds the pending
// one of an identical call the client retried).
func (h *held) store() bool {
	s, c := h.s, h.c
	ci, _ := s.clientInfo()
	args := c.st.Args
	if s.opts.MaskOwnSecrets != nil {
		args, _ = s.opts.MaskOwnSecrets(args)
	}
	a, _, err := s.opts.Holds.Hold(s.ctx, &guard.Approval{
		ID: c.holdID(), CallID: c.id, Session: s.holds.holdScope(), Client: ci.String(), Server: s.opts.Server, Tool: c.st.Tool,
		Arguments: string(args), Digest: h.digest, Pin: c.pin, PolicyVersion: h.v.PolicyVersion,
		Rule: h.v.Rule, HeldReason: h.v.Reason, Approvers: h.v.Approvers, Caller: s.opts.Caller,
	})
	if err != nil {
		s.opts.Logger.Error("held call refused: approval not stored", "tool", c.st.Tool, "err", err)
		h.step(intercept.Event{Kind: intercept.Stored, Err: err})
		return false
	}
	h.a = a
	h.step(intercept.Event{Kind: intercept.Stored, Approval: a})
	if h.v.Rule == guard.ToolReviewRule {
		s.holds.noteReviewHold(c.st.Tool, h.digest, a.ID)
	}
	return true
}

// noteReviewHold remembers a call of this session held for its tool's
// review, by tool and argument digest: accepting the definition may leave
// it waiting for a person's own decision (the change weakened a hint),
// and the same call made again must then wait for that decision too,
// rather than pass under the accepted definition (see heldForReview).
func (hs *holds) noteReviewHold(tool, digest, id string) {
	s := hs.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.view.reviewHolds == nil {
		s.view.reviewHolds = map[string]map[string]string{}
	}
	if s.view.reviewHolds[tool] == nil {
		s.view.reviewHolds[tool] = map[string]string{}
	}
	s.view.reviewHolds[tool][digest] = id
}

// heldForReview reports whether a call the rules allow repeats one of this
// session still held for its tool's review: it waits for that decision
// too. Only a tool with such a hold costs a read of it.
func (hs *holds) heldForReview(c *call) bool {
	s := hs.s
	s.mu.Lock()
	byDigest := s.view.reviewHolds[c.st.Tool]
	s.mu.Unlock()
	if len(byDigest) == 0 || s.opts.Holds == nil {
		return false
	}
	digest, err := guard.Digest(c.st.Args)
	if err != nil {
		return false
	}
	s.mu.Lock()
	id := byDigest[digest]
	s.mu.Unlock()
	if id == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(s.ctx, reviewTimeout)
	defer cancel()
	a, err := s.opts.Holds.Get(ctx, id)
	if err == nil && a.State != guard.ApprovalPending {
		s.mu.Lock()
		delete(byDigest, digest)
		s.mu.Unlock()
		return false
	}
	return true // pending, or unreadable: it waits (fails closed)
}

// endHolds settles the session's open approvals once it has ended: those
// of calls told to retry can no longer be used by this session (see
// approvals.Manager.SessionEnded).
func (hs *holds) endHolds() {
	s := hs.s
	if s.opts.Holds == nil || s.opts.HoldScope != "" {
		return // the client's holds outlive a session-less relay
	}
	if s.holds.leftReason() != "" {
		return // settled when the client went
	}
	if err := s.opts.Holds.SessionEnded(context.Background(), s.id, s.holds.endReason()); err != nil {
		s.opts.Logger.Error("the approvals of an ended session were not settled", "session", s.id, "err", err)
	}
}

// holdScope is what approvals scoped to a session see as this session
// (Options.HoldScope).
func (hs *holds) holdScope() string {
	s := hs.s
	if s.opts.HoldScope != "" {
		return s.opts.HoldScope
	}
	return s.id
}

// withdraw withdraws an approval whose call can no longer go on; the
// withdrawal is recorded in the audit log (a failure is logged: the call
// is answered either way, and the approval expires in time).
func (hs *holds) withdraw(id, reason string) {
	s := hs.s
	if err := s.opts.Holds.Withdraw(context.Background(), id, reason); err != nil {
		s.opts.Logger.Error("approval not withdrawn", "approval", id, "err", err)
	}
}

// record makes the request's record durable before the wait. A call held
// again after its tool's review is recorded already; it is recorded once
// more when it waits on another approval, so that the log (and what
// follows it: the notifications of new holds) names the hold it waits
// on. A call guard could not record is refused, and its approval
// withdrawn.
func (h *held) record() bool {
	s, c := h.s, h.c
	if c.recorded.Swap(true) && (c.heldOn == "" || c.heldOn == h.a.ID) {
		return h.step(intercept.Event{Kind: intercept.Recorded})
	}
	c.heldOn = h.a.ID
	if err := s.appendRecords(c, false, nil, s.record(guard.KindRequest, c)).wait(); err != nil {
		return h.step(intercept.Event{Kind: intercept.RecordFailed})
	}
	return h.step(intercept.Event{Kind: intercept.Recorded})
}

// await waits for the decision: from the browser, from the person at the
// client when asked in band, or until the wait's limit. It reports false
// when the call is settled already (withdrawn by the client, the session
// ended, or asked in the client's next round on 2026-07-28).
func (h *held) await() (intercept.Event, bool) {
	s, c, a := h.s, h.c, h.a
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	go func() {
		select {
		case <-c.withdrawn:
			cancel()
		case <-ctx.Done():
		}
	}()
	if c.progress != nil {
		s.holds.sendProgress(c, "waiting for approval at the guard UI; approval id "+a.ID)
	}
	s.mu.Lock()
	inBand := s.opts.InBand && s.elicitForm && !c.askedInBand && decidableInBand(a)
	modern := s.protocol >= guard.Rev20260728
	s.mu.Unlock()
	if inBand && modern {
		// 2026-07-28: guard's own input request, answered in the
		// client's next round of this call.
		h.step(intercept.Event{Kind: intercept.AskedInRound, Approval: a, Answer: s.holds.askInRound(c, a)})
		return intercept.Event{}, false
	}
	if inBand {
		go s.holds.askClient(ctx, a)
	}
	res, err := s.opts.Holds.Await(ctx, a.ID, func(m string) {
		if c.progress != nil {
			s.holds.sendProgress(c, m)
		}
	})
	cancel()
	h.free() // the slot frees once the wait ends, before the answer
	s.mu.Lock()
	c.holding = false
	s.mu.Unlock()
	if c.isWithdrawn() {
		if why := s.holds.goneReason(c); why != "" {
			h.leave(why)
			return intercept.Event{}, false
		}
		s.holds.withdraw(a.ID, "the client cancelled the call")
		h.step(intercept.Event{Kind: intercept.Withdrawn})
		return intercept.Event{}, false
	}
	if errors.Is(err, context.Canceled) {
		// The session ended (ServerGone answered): the call can no
		// longer be forwarded, so its approval is withdrawn.
		s.holds.withdraw(a.ID, "the session ended")
		h.step(intercept.Event{Kind: intercept.SessionEnded})
		return intercept.Event{}, false
	}
	return intercept.Event{Kind: intercept.Waited, Wait: res, Err: err, Approval: a, Timeout: s.opts.ApprovalTimeout}, true
}

// leave settles a held call whose client went away while it waited: its
// approval is withdrawn (scope session) or marked as its client gone (scope
// any), and the call is recorded cancelled, without an answer: there is no
// one to read it.
func (h *held) leave(why string) {
	s, a := h.s, h.a
	ctx, cancel := context.WithTimeout(context.Background(), holdTimeout)
	defer cancel()
	if err := s.opts.Holds.ClientGone(ctx, a.ID, why); err != nil {
		s.opts.Logger.Error("the hold of a client that went away was not settled", "approval", a.ID, "err", err)
	}
	h.step(intercept.Event{Kind: intercept.ClientGone, Why: why})
}

// decidableInBand reports whether the person at the client may decide on
// a held call: not when the front authenticated the caller (whose own
// call it is), nor when its approvers or the configuration it was held
// under (RequiredVia) need verified identities, which an answer from the
// client is not.
func decidableInBand(a *guard.Approval) bool {
	return a.Caller.IsZero() && !a.Approvers.NeedsVerified() && a.RequiredVia == ""
}

// settle acts on the decision (e, how the wait ended): a call let
// through is told apart for its progress, which guard shifts from now on.
func (h *held) settle(e intercept.Event) {
	s, c := h.s, h.c
	if e.Err != nil {
		s.opts.Logger.Error("waiting for a decision failed", "approval", h.a.ID, "err", e.Err)
	}
	if c.tr != nil {
		h.endHold(e.Wait.Approval)
	}
	if e.Err == nil && e.Wait.End == guard.WaitApproved && c.progress != nil {
		s.mu.Lock()
		s.progress[wire.IDKey(c.progress)] = c
		s.mu.Unlock()
	}
	h.step(e)
}

// endHold ends the hold's span, with who decided (a, the approval as the
// wait ended; nil when it did not end with a decision).
func (h *held) endHold(a *guard.Approval) {
	sp := h.c.tr.hold
	if sp == nil {
		return
	}
	if h.a != nil {
		sp.SetAttributes(attribute.String(attrApproval, h.a.ID))
	}
	if a != nil {
		sp.SetAttributes(attribute.String(attrApprovalEnd, a.State), attribute.String(attrDecidedBy, a.DecidedBy))
	}
	sp.End()
}

// sendProgress tells a client that set a progressToken that its call is
// still waiting. The values guard sends count up from 1; the server's own
// progress for the call is shifted past them once it is forwarded.
func (hs *holds) sendProgress(c *call, text string) {
	s := hs.s
	c.progBase++
	data, err := wire.Notification("notifications/progress", map[string]any{
		"progressToken": json.RawMessage(c.progress),
		"progress":      c.progBase,
		"message":       text,
	})
	if err == nil {
		s.toClient.push(item{msg: Unparsed(data)})
	}
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

// holds are a session's calls waiting for a person: the wait, the
// question asked in band, and the settling of holds whose client went away.
type holds struct{ s *Session }
