package streamable

import (
	"fmt"
	"sync"
)

// SessionLimit bounds the sessions of every endpoint that shares it
// (max_sessions): each runs a server process, so an unbounded number is
// an unbounded number of processes for whoever can open sessions. Total
// bounds them all, PerClient those of one caller (a static token's
// client; an access token's client and subject; every client without a
// token counts as one). On 2026-07-28, where there are no sessions,
// PerClient bounds a caller's requests in flight instead. A nil
// *SessionLimit bounds nothing.
type SessionLimit struct {
	total, perClient int

	mu       sync.Mutex
	open     int            // sessions open
	sessions map[string]int // sessions open, by Caller.key
	requests map[string]int // 2026-07-28 requests in flight, by Caller.key
}

// NewSessionLimit bounds sessions to total at once, and to perClient of
// one caller.
func NewSessionLimit(total, perClient int) *SessionLimit {
	return &SessionLimit{total: total, perClient: perClient, sessions: map[string]int{}, requests: map[string]int{}}
}

// LimitError refuses a session, or a 2026-07-28 request, past the
// limit: HTTP 503, and Message says which bound, and what to do.
type LimitError struct{ Message string }

// Error is Message.
func (e *LimitError) Error() string { return e.Message }

// session takes a session for caller key, or says why not; release gives
// it back, once.
func (l *SessionLimit) session(key string) (release func(), err error) {
	if l == nil {
		return func() {}, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.open >= l.total:
		return nil, &LimitError{fmt.Sprintf("Too many sessions: guard serves at most %d at once (max_sessions.total); end one (DELETE) or try again later", l.total)}
	case l.sessions[key] >= l.perClient:
		return nil, &LimitError{fmt.Sprintf("Too many sessions of this client: at most %d at once (max_sessions.per_client); end one (DELETE) or try again later", l.perClient)}
	}
	l.open++
	l.sessions[key]++
	return l.releaser(func() {
		l.open--
		decrement(l.sessions, key)
	}), nil
}

// request takes a 2026-07-28 request in flight for caller key, or says
// why not; release gives it back, once.
func (l *SessionLimit) request(key string) (release func(), err error) {
	if l == nil {
		return func() {}, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.requests[key] >= l.perClient {
		return nil, &LimitError{fmt.Sprintf("Too many requests of this client in flight: at most %d at once (max_sessions.per_client); wait for an answer or try again later", l.perClient)}
	}
	l.requests[key]++
	return l.releaser(func() { decrement(l.requests, key) }), nil
}

// releaser runs give, under the lock, the first time it is called.
func (l *SessionLimit) releaser(give func()) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			give()
		})
	}
}

// decrement counts one fewer for key, forgetting a key at zero.
func decrement(m map[string]int, key string) {
	if m[key]--; m[key] <= 0 {
		delete(m, key)
	}
}
