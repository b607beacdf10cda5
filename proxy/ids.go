package proxy

import "github.com/guard-mcp/guard/wire"

// IDMap names the requests guard passes on in one direction, and finds
// each again by the id it was sent with, which its answer carries. A
// request keeps its sender's id unless a request in flight that way has
// it, or the map renames every request; then it is sent under one of
// guard's ids and the sender's is restored on its answer. Guard's own
// requests get guard's ids too. The session, the HTTP router and the
// aggregate each map ids with one; its owner's lock guards it.
type IDMap[T any] struct {
	mint   func(n uint64) []byte // guard's n-th id, as JSON
	rename bool                  // every request gets one of guard's ids
	n      uint64
	sent   map[string]sentAs[T]
}

// sentAs is a request as sent: what its owner keeps of it, and the
// sender's id when guard renamed it.
type sentAs[T any] struct {
	v    T
	orig []byte
}

// NewIDMap returns an empty IDMap whose ids of guard's are mint's, and
// that renames every request when renameAll is set.
func NewIDMap[T any](mint func(n uint64) []byte, renameAll bool) *IDMap[T] {
	return &IDMap[T]{mint: mint, rename: renameAll, sent: map[string]sentAs[T]{}}
}

// Own returns a new id of guard's, one no request in flight has (a
// sender may have picked one of the same form).
func (m *IDMap[T]) Own() []byte {
	for {
		m.n++
		id := m.mint(m.n)
		if _, taken := m.sent[wire.IDKey(id)]; !taken {
			return id
		}
	}
}

// Add registers v, a request whose sender gave it the id orig, and returns
// the id it is sent with and that id's key; renamed says it is guard's.
func (m *IDMap[T]) Add(orig []byte, v T) (sent []byte, key string, renamed bool) {
	if !m.rename {
		key = wire.IDKey(orig)
		if _, taken := m.sent[key]; !taken {
			m.sent[key] = sentAs[T]{v: v}
			return orig, key, false
		}
	}
	sent = m.Own()
	key = wire.IDKey(sent)
	m.sent[key] = sentAs[T]{v: v, orig: append([]byte(nil), orig...)}
	return sent, key, true
}

// Put registers v under an id of guard's it was sent with (own's).
func (m *IDMap[T]) Put(key string, v T) { m.sent[key] = sentAs[T]{v: v} }

// Get returns the request sent with the id of key.
func (m *IDMap[T]) Get(key string) (v T, ok bool) {
	s, ok := m.sent[key]
	return s.v, ok
}

// Sender returns the sender's id of the request sent with the id of key,
// when guard renamed it.
func (m *IDMap[T]) Sender(key string) ([]byte, bool) {
	s, ok := m.sent[key]
	return s.orig, ok && s.orig != nil
}

// Take returns and forgets the request sent with the id of key, with the
// sender's id when guard renamed it (nil when it kept it).
func (m *IDMap[T]) Take(key string) (v T, orig []byte, ok bool) {
	s, ok := m.sent[key]
	if ok {
		delete(m.sent, key)
	}
	return s.v, s.orig, ok
}

// Drop forgets the request sent with the id of key.
func (m *IDMap[T]) Drop(key string) { delete(m.sent, key) }

// Each calls f for every request in flight.
func (m *IDMap[T]) Each(f func(key string, v T, orig []byte)) {
	for k, s := range m.sent {
		f(k, s.v, s.orig)
	}
}

// Size is the number of requests in flight.
func (m *IDMap[T]) Size() int { return len(m.sent) }
