package proxy

import "github.com/guard-mcp/guard/wire"

// idMap names the requests guard passes on in one direction, and finds
// each again by the id it was sent with, which its answer carries. A
// request keeps its sender's id unless a request in flight that way has
// it, or the map renames every request; then it is sent under one of
// guard's ids and the sender's is restored on its answer. Guard's own
// requests get guard's ids too. The session, the HTTP router and the
// aggregate each map ids with one; its owner's lock guards it.
type idMap[T any] struct {
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

func newIDMap[T any](mint func(n uint64) []byte, renameAll bool) *idMap[T] {
	return &idMap[T]{mint: mint, rename: renameAll, sent: map[string]sentAs[T]{}}
}

// own returns a new id of guard's, one no request in flight has (a
// sender may have picked one of the same form).
func (m *idMap[T]) own() []byte {
	for {
		m.n++
		id := m.mint(m.n)
		if _, taken := m.sent[wire.IDKey(id)]; !taken {
			return id
		}
	}
}

// add registers v, a request whose sender gave it the id orig, and returns
// the id it is sent with and that id's key; renamed says it is guard's.
func (m *idMap[T]) add(orig []byte, v T) (sent []byte, key string, renamed bool) {
	if !m.rename {
		key = wire.IDKey(orig)
		if _, taken := m.sent[key]; !taken {
			m.sent[key] = sentAs[T]{v: v}
			return orig, key, false
		}
	}
	sent = m.own()
	key = wire.IDKey(sent)
	m.sent[key] = sentAs[T]{v: v, orig: append([]byte(nil), orig...)}
	return sent, key, true
}

// put registers v under an id of guard's it was sent with (own's).
func (m *idMap[T]) put(key string, v T) { m.sent[key] = sentAs[T]{v: v} }

// get returns the request sent with the id of key.
func (m *idMap[T]) get(key string) (v T, ok bool) {
	s, ok := m.sent[key]
	return s.v, ok
}

// sender returns the sender's id of the request sent with the id of key,
// when guard renamed it.
func (m *idMap[T]) sender(key string) ([]byte, bool) {
	s, ok := m.sent[key]
	return s.orig, ok && s.orig != nil
}

// take returns and forgets the request sent with the id of key, with the
// sender's id when guard renamed it (nil when it kept it).
func (m *idMap[T]) take(key string) (v T, orig []byte, ok bool) {
	s, ok := m.sent[key]
	if ok {
		delete(m.sent, key)
	}
	return s.v, s.orig, ok
}

// drop forgets the request sent with the id of key.
func (m *idMap[T]) drop(key string) { delete(m.sent, key) }

// each calls f for every request in flight.
func (m *idMap[T]) each(f func(key string, v T, orig []byte)) {
	for k, s := range m.sent {
		f(k, s.v, s.orig)
	}
}

// size is the number of requests in flight.
func (m *idMap[T]) size() int { return len(m.sent) }
