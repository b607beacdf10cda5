package web

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/approvals"
)

// session is one browser's login: the approver's name once given, the CSRF
// token of its forms, and a message to show once on the next page.
type session struct {
	key  string // sha256 of the cookie's value
	name string
	// user is who decides in this session, and via how guard knows it:
	// "" for a name typed after the token link (user.Subject is the
	// name; unverified), guard.ViaOIDC or guard.ViaPasskey for an
	// identity the provider or a passkey verified.
	user  guard.Identity
	via   string
	csrf  string
	flash string
	seen  time.Time
}

// named reports whether the session knows who decides: a name was given,
// or a login verified who it is (which needs no typed name).
func (s session) named() bool { return s.name != "" || s.via != "" }

// reviewer is who decides in this session, as approvals see them.
func (s session) reviewer() approvals.Reviewer {
	return approvals.Reviewer{Identity: s.user, Via: s.via}
}

// sessions are kept in memory, by the SHA-256 of the cookie's value (so
// that a map lookup reveals nothing of a valid id through timing); an
// unused session ends after idle.
type sessions struct {
	mu   sync.Mutex
	m    map[string]*session
	idle time.Duration
	now  func() time.Time
}

func newSessions(idle time.Duration, now func() time.Time) *sessions {
	return &sessions{m: make(map[string]*session), idle: idle, now: now}
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random: %w", err)
	}
	return hex.EncodeToString(b), nil
}

func sessionKeyOf(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

// create starts a session and returns the cookie's value.
func (ss *sessions) create() (string, error) {
	id, err := randomHex(32)
	if err != nil {
		return "", err
	}
	csrf, err := randomHex(32)
	if err != nil {
		return "", err
	}
	k := sessionKeyOf(id)
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.m[k] = &session{key: k, csrf: csrf, seen: ss.now()}
	return id, nil
}

// get returns a copy of a live session and, when touch is set, marks it
// used.
func (ss *sessions) get(id string, touch bool) (session, bool) {
	k := sessionKeyOf(id)
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s, ok := ss.m[k]
	if !ok {
		return session{}, false
	}
	now := ss.now()
	if now.Sub(s.seen) > ss.idle {
		delete(ss.m, k)
		return session{}, false
	}
	if touch {
		s.seen = now
	}
	return *s, true
}

// alive says whether a session (by key) still exists, without marking it
// used.
func (ss *sessions) alive(key string) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s, ok := ss.m[key]
	return ok && ss.now().Sub(s.seen) <= ss.idle
}

func (ss *sessions) remove(id string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.m, sessionKeyOf(id))
}

func (ss *sessions) update(key string, fn func(*session)) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if s, ok := ss.m[key]; ok {
		fn(s)
	}
}

// setName names the approver of a session logged in with the token link:
// a typed name, which no one verified.
func (ss *sessions) setName(key, name string) {
	ss.update(key, func(s *session) { s.name, s.user, s.via = name, guard.Identity{Subject: name}, "" })
}

// setVerified makes a session's approver an identity verified as via
// says: the name shown and recorded is its email, else its subject.
func (ss *sessions) setVerified(key string, user guard.Identity, via string) {
	ss.update(key, func(s *session) { s.name, s.user, s.via = user.Name(), user, via })
}

func (ss *sessions) setFlash(key, msg string) {
	ss.update(key, func(s *session) { s.flash = msg })
}

// takeFlash returns the message to show once, and forgets it.
func (ss *sessions) takeFlash(key string) string {
	var msg string
	ss.update(key, func(s *session) { msg, s.flash = s.flash, "" })
	return msg
}

// sweep ends the sessions unused for longer than idle.
func (ss *sessions) sweep() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	now := ss.now()
	for k, s := range ss.m {
		if now.Sub(s.seen) > ss.idle {
			delete(ss.m, k)
		}
	}
}
