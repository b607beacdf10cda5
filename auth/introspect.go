package auth

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// An answer of the introspection endpoint is kept this long (at most until
// the token expires), so that a session's requests do not each ask; a
// token revoked meanwhile is refused at the latest this much later.
const (
	keepActive   = time.Minute
	keepInactive = 5 * time.Second
	keepAtMost   = 10000 // answers kept at once
)

// introspected keeps the introspection answers of recent tokens, by the
// token's SHA-256 (the tokens themselves are not kept).
type introspected struct {
	mu sync.Mutex
	m  map[[32]byte]introspection
}

type introspection struct {
	claims map[string]any // nil: not active
	until  time.Time
}

func (c *introspected) get(k [32]byte, now time.Time) (introspection, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	in, ok := c.m[k]
	if ok && now.After(in.until) {
		delete(c.m, k)
		ok = false
	}
	return in, ok
}

func (c *introspected) put(k [32]byte, in introspection) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= keepAtMost {
		clear(c.m)
	}
	c.m[k] = in
}

// introspect asks the identity provider about an opaque token (RFC 7662).
func (v *Verifier) introspect(ctx context.Context, raw string, resources []string) (*Token, error) {
	if v.cfg.IntrospectionClientID == "" {
		return nil, invalid("the token is not a JWT, and guard checks opaque tokens only by introspection (auth.introspection is not configured)")
	}
	now := v.cfg.Now()
	k := tokenKey(raw)
	in, ok := v.cache.get(k, now)
	if !ok {
		m, err := v.metadata(ctx)
		if err != nil {
			return nil, err
		}
		if m.IntrospectionEndpoint == "" {
			return nil, invalid("the token is not a JWT, and the identity provider offers no introspection endpoint")
		}
		claims, err := v.askIntrospection(ctx, m.IntrospectionEndpoint, raw)
		if err != nil {
			return nil, err
		}
		in = introspection{claims: claims, until: now.Add(keepInactive)}
		if claims != nil {
			in.until = now.Add(keepActive)
			if exp, ok := numericDate(claims["exp"]); ok && exp.Before(in.until) {
				in.until = exp
			}
		}
		v.cache.put(k, in)
	}
	if in.claims == nil {
		return nil, invalid("the identity provider says the token is not active (expired, revoked or unknown to it)")
	}
	if _, ok := in.claims["aud"]; !ok {
		return nil, invalid("the identity provider's introspection names no audience for the token, so it cannot be known to be for guard")
	}
	return v.check(in.claims, resources, false)
}

// askIntrospection posts the token to the introspection endpoint, as
// guard's client (HTTP Basic, RFC 6749 section 2.3.1). It returns the
// answer's members, or nil for an inactive token.
func (v *Verifier) askIntrospection(ctx context.Context, endpoint, raw string) (map[string]any, error) {
	form := url.Values{"token": {raw}, "token_type_hint": {"access_token"}}
	status, body, err := postAsClient(ctx, v.cfg.Client, endpoint, form, v.cfg.IntrospectionClientID, v.cfg.IntrospectionClientSecret)
	if err != nil {
		return nil, unavailable("the identity provider's introspection endpoint could not be asked: %v", err)
	}
	if status != http.StatusOK {
		v.cfg.Logger.Warn("introspection refused", "status", status, "body", strings.TrimSpace(string(body)))
		return nil, unavailable("the identity provider's introspection endpoint answered HTTP %d (are auth.introspection's client_id and client_secret right?)", status)
	}
	m, err := decodeClaims(body)
	if err != nil {
		return nil, unavailable("the identity provider's introspection answer is not a JSON object")
	}
	if active, _ := m["active"].(bool); !active {
		return nil, nil
	}
	return m, nil
}
