package proxy

import (
	"context"
	"time"

	guard "github.com/guard-mcp/guard"
)

// reviewTimeout bounds reading a tool's review from the catalog store.
const reviewTimeout = 10 * time.Second

// persistStart and persistEnd bracket the recording of a listing, so that
// a call to a tool just listed waits for its review to exist.
func (ls *lister) persistStart() {
	s := ls.s
	s.persist.mu.Lock()
	s.persist.n++
	s.persist.mu.Unlock()
}

func (ls *lister) persistEnd() {
	s := ls.s
	s.persist.mu.Lock()
	s.persist.n--
	s.persist.cond.Broadcast()
	s.persist.mu.Unlock()
}

func (ls *lister) persisted() {
	s := ls.s
	s.persist.mu.Lock()
	for s.persist.n > 0 {
		s.persist.cond.Wait()
	}
	s.persist.mu.Unlock()
}

// acceptedFor is how long a session trusts that a definition it found
// accepted still is: a person may reject it later (guard tools reject).
const acceptedFor = 5 * time.Second

// acceptedPin reports whether this session found the definition accepted
// within acceptedFor, so that most calls skip reading the store.
func (pl *pipeline) acceptedPin(pin string) bool {
	s := pl.s
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.accepted[pin]
	return ok && s.now().Sub(at) < acceptedFor
}

// reviewOf reads how a tool's definition stands and, when it waits for a
// person, why: what changed since the accepted definition, that the tool
// is new, or what the description scan found.
func (pl *pipeline) reviewOf(tool *guard.Tool) (*guard.Review, string, error) {
	s := pl.s
	s.lists.persisted()
	ctx, cancel := context.WithTimeout(s.ctx, reviewTimeout)
	defer cancel()
	r, err := s.opts.Catalog.Review(ctx, s.opts.Server, tool.Name, tool.Pin)
	if err != nil {
		return nil, "", err
	}
	if r == nil {
		// Not recorded (the listing could not be stored): a person looks.
		return &guard.Review{Server: s.opts.Server, Name: tool.Name, Pin: tool.Pin, State: guard.ReviewPending, Cause: guard.CauseNew},
			"the tool's definition is not in the catalog", nil
	}
	if r.State == guard.ReviewAccepted {
		s.mu.Lock()
		s.accepted[tool.Pin] = s.now()
		s.mu.Unlock()
		return r, "", nil
	}
	var old *guard.Tool
	if r.Cause != guard.CauseFlagged && r.Cause != guard.CauseNew {
		old, _ = s.opts.Catalog.AcceptedTool(ctx, s.opts.Server, tool.Name)
	}
	return r, guard.ReviewReason(r, tool, old), nil
}

// trusted is the definition policy reads for a call released from its
// tool's review: the tool's last accepted definition, whose annotations a
// person accepted (until then a server's may claim anything). A tool never
// accepted, or whose accepted definition cannot be read, keeps the
// server's definition without its annotations: the default policy treats
// it as the specification does a tool without hints, as destructive.
func (pl *pipeline) trusted(t *guard.Tool) *guard.Tool {
	s := pl.s
	if s.opts.Catalog != nil && t != nil {
		ctx, cancel := context.WithTimeout(s.ctx, reviewTimeout)
		defer cancel()
		a, err := s.opts.Catalog.AcceptedTool(ctx, s.opts.Server, t.Name)
		if err != nil {
			s.opts.Logger.Warn("the tool's accepted definition could not be read: its hints are not trusted", "tool", t.Name, "err", err)
		}
		if err == nil && a != nil {
			return a
		}
	}
	if t == nil {
		return nil
	}
	u := *t
	u.Annotations = guard.Annotations{}
	return &u
}

// scanTools sets the flags of each definition, when a scanner is set.
func (ls *lister) scanTools(tools []guard.Tool) {
	s := ls.s
	if s.opts.ScanTool == nil {
		return
	}
	for i := range tools {
		tools[i].Flags = s.opts.ScanTool(s.opts.Server, tools[i].Def)
	}
}
