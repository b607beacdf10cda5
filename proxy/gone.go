package proxy

import (
	"context"
	"time"

	guard "github.com/guard-mcp/guard"
)

// A held call never runs without its client. When the client is gone (its
// input ended, a write to it failed, its HTTP session was deleted or
// expired) every hold of the session is settled at once: withdrawn where
// its approval is scoped to the session, so that no later approval can
// release it, and marked as its client gone where it is scoped to any
// session, where approving it only lets the same call through when a
// client makes it again. A call that would be held after that is not.

// Reasons a client is gone, as withdrawals record them and as whoever tries
// to approve such a call later reads them.
const (
	GoneInputEnded  = guard.ClientGoneReason + ": its input ended"
	goneWriteFailed = guard.ClientGoneReason + ": a write to it failed"
)

// holdTimeout bounds settling the holds of a client that went away.
const holdTimeout = 30 * time.Second

// clientGone settles the session's holds once its client is gone, for the
// reason given. Only the first call does anything. On the session-less
// revision (Options.HoldScope) the holds belong to the client as the front
// knows it, not to this relay: nothing is settled here.
func (s *Session) clientGone(reason string) {
	s.mu.Lock()
	if s.left.why != "" || s.opts.HoldScope != "" {
		s.mu.Unlock()
		return
	}
	s.left.why = reason
	close(s.left.ch)
	held := s.holds.heldLocked()
	s.mu.Unlock()
	s.holds.leaveHeld(held, reason)
	if s.opts.Holds == nil {
		return
	}
	// The calls told to retry wait in the store only: their approvals
	// are settled there.
	ctx, cancel := context.WithTimeout(context.Background(), holdTimeout)
	defer cancel()
	if err := s.opts.Holds.SessionEnded(ctx, s.id, reason); err != nil {
		s.opts.Logger.Error("the holds of a client that went away were not settled", "session", s.id, "err", err)
	}
}

// clientGoneFor settles the holds of the calls whose id keys (wire.IDKey
// of the ids the client sent) are given: their client went away while they
// waited, the session otherwise going on.
func (hs *holds) clientGoneFor(keys []string, reason string) {
	s := hs.s
	s.mu.Lock()
	var held []*call
	for _, key := range keys {
		if c := s.byClient[key]; c != nil && c.holding && c.goneWhy == "" && !c.isWithdrawn() {
			held = append(held, c)
		}
	}
	s.mu.Unlock()
	s.holds.leaveHeld(held, reason)
}

// heldLocked returns the calls waiting for a decision now. The caller holds
// s.mu.
func (hs *holds) heldLocked() []*call {
	s := hs.s
	var held []*call
	for _, c := range s.byClient {
		if c.holding && c.goneWhy == "" && !c.isWithdrawn() {
			held = append(held, c)
		}
	}
	return held
}

// leaveHeld ends the waits of held calls whose client is gone: each wait
// settles its approval (held.await) and records the call, which gets no
// answer.
func (hs *holds) leaveHeld(held []*call, reason string) {
	s := hs.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range held {
		if c.isWithdrawn() {
			continue
		}
		c.goneWhy = reason
		close(c.withdrawn)
	}
}

// goneReason is why a held call's client is gone, or "" when the client
// cancelled it instead.
func (hs *holds) goneReason(c *call) string {
	s := hs.s
	s.mu.Lock()
	defer s.mu.Unlock()
	return c.goneWhy
}

// leftReason is why the session's client is gone, "" while it is there.
func (hs *holds) leftReason() string {
	s := hs.s
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.left.why
}

// endReason is why the session's holds end when the session does.
func (hs *holds) endReason() string {
	s := hs.s
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.left.why != "":
		return s.left.why
	case s.exit != "":
		return "the call's session ended: its server exited (" + s.exit + ")"
	}
	return "the call's session ended"
}

// Departure is some requests' client gone while the session goes on: their
// id keys, and why.
type Departure struct {
	Keys   []string // the requests' id keys (wire.IDKey of the client's ids)
	Reason string   // why their client counts as gone
}

// Departures is a client Conn that also tells when the client of some of
// its requests went away without cancelling them (an HTTP response stream
// that dropped and was not resumed in time).
type Departures interface {
	// Departed delivers the requests whose client went away.
	Departed() <-chan Departure
}

// watchDepartures settles the holds of the requests whose client went away,
// until the session ends.
func (s *Session) watchDepartures(d Departures) {
	for {
		select {
		case dep := <-d.Departed():
			s.holds.clientGoneFor(dep.Keys, dep.Reason)
		case <-s.ctx.Done():
			return
		}
	}
}

// InputEnder is a client Conn that says why its input ended, and whether
// that means its client is gone (an HTTP session deleted or expired) or not
// (guard serve stopping: its clients are still there).
type InputEnder interface {
	// InputEnded says why the input ended, and whether its client is
	// gone.
	InputEnded() (reason string, gone bool)
}

// InputEnded says why a client's input ended: on stdio, the client closed
// it, and is gone.
func InputEnded(c Conn) (string, bool) {
	if e, ok := c.(InputEnder); ok {
		return e.InputEnded()
	}
	return GoneInputEnded, true
}
