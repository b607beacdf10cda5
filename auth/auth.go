// Package auth makes guard serve's HTTP front an OAuth 2.1 resource server,
// as the MCP authorization specification (2025-06-18 and later) asks. It
// checks the access tokens clients send: a JWT against the keys the issuer
// publishes (signature, issuer, audience, expiry, scopes), an opaque token by
// asking the issuer (token introspection, RFC 7662). It describes each
// endpoint in Protected Resource Metadata (RFC 9728) and says in
// WWW-Authenticate why a request was refused, so that a client can find the
// identity provider and log in by itself. And it exchanges a caller's token
// for one meant for an upstream server (RFC 8693), so that the caller's own
// token never travels further than guard.
//
// The caller a token speaks for becomes a guard.Identity: its subject,
// email and groups, as the identity provider vouched for them (an email
// only where the token says email_verified: true).
package auth

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	guard "github.com/guard-mcp/guard"
)

// Config configures a Verifier.
type Config struct {
	// Issuer is the identity provider's issuer URL, exactly as its tokens
	// and its metadata name it.
	Issuer string
	// Audience is guard's resource URI (RFC 8707): a token must name it,
	// or the URL of the endpoint it is sent to, among its audiences.
	Audience string
	// Scopes must all be granted to a token (403 insufficient_scope
	// otherwise); they are also the scopes the metadata advertises.
	Scopes []string
	// GroupsClaim is the claim that lists the caller's groups (default
	// "groups").
	GroupsClaim string
	// TrustEmail makes a token's email that comes without email_verified
	// the caller's (auth.trust_email), for a provider that never sends
	// the claim (Entra ID). Otherwise, and whatever it says, only
	// email_verified: true does (guard.VerifiedEmail).
	TrustEmail bool
	// IntrospectionClientID and IntrospectionClientSecret authenticate
	// guard at the provider's introspection endpoint. Without them,
	// opaque tokens are refused.
	IntrospectionClientID     string
	IntrospectionClientSecret string
	// Client makes the requests to the identity provider (default: one
	// with a 10s timeout).
	Client *http.Client
	Logger *slog.Logger
	Now    func() time.Time
}

// Token is what a verified access token says of its caller.
type Token struct {
	User guard.Identity
	// ClientID is the OAuth client the token was issued to (client_id, or
	// azp), "" when the token does not say.
	ClientID string
	Scopes   []string
	Expiry   time.Time
}

// Error is why a request is refused, in the terms of RFC 6750: a status
// (401, 403, or 503 when the identity provider cannot be asked), an error
// code ("invalid_token", "insufficient_scope"; "" when the request carried
// no token) and a description for people.
type Error struct {
	Status      int
	Code        string
	Description string
}

func (e *Error) Error() string {
	if e.Code == "" {
		return e.Description
	}
	return e.Code + ": " + e.Description
}

// ErrNoToken refuses a request that carries no access token.
var ErrNoToken = &Error{Status: http.StatusUnauthorized, Description: "an access token is needed (Authorization: Bearer)"}

func invalid(format string, args ...any) *Error {
	return &Error{Status: http.StatusUnauthorized, Code: "invalid_token", Description: fmt.Sprintf(format, args...)}
}

func unavailable(format string, args ...any) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Code: "temporarily_unavailable", Description: fmt.Sprintf(format, args...)}
}

// leeway is how far the clocks of guard and the identity provider may
// disagree on a token's expiry and start.
const leeway = 30 * time.Second

// rediscoverAfter is how long a failed discovery is remembered before the
// provider is asked again: requests meanwhile are answered 503 at once.
const rediscoverAfter = 5 * time.Second

// Verifier checks access tokens for guard's endpoints.
type Verifier struct {
	cfg Config

	mu      sync.Mutex
	server  *ServerMetadata
	keys    *keySet
	failed  time.Time // the last discovery that failed
	failErr error

	cache introspected
}

// New returns a Verifier; it asks the identity provider nothing before
// the first token (Discover asks at once).
func New(c Config) (*Verifier, error) {
	if c.Issuer == "" {
		return nil, errors.New("auth: an issuer is needed")
	}
	if c.Audience == "" {
		return nil, errors.New("auth: an audience is needed")
	}
	if c.GroupsClaim == "" {
		c.GroupsClaim = "groups"
	}
	if c.Client == nil {
		c.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return &Verifier{cfg: c, cache: introspected{m: map[[32]byte]introspection{}}}, nil
}

// Issuer is the configured issuer.
func (v *Verifier) Issuer() string { return v.cfg.Issuer }

// Audience is the configured audience.
func (v *Verifier) Audience() string { return v.cfg.Audience }

// Scopes are the scopes every token needs.
func (v *Verifier) Scopes() []string { return v.cfg.Scopes }

// algorithms are the signatures a JWT access token may carry: asymmetric
// ones only (a shared secret would let anyone holding it mint tokens, and
// "none" is no signature).
var algorithms = []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512, jose.EdDSA}

// Verify checks an access token sent to the endpoint whose URL is
// resource: a JWT by its signature and claims, anything else by
// introspection. The token must name the configured audience or resource
// among its audiences. A refusal is an *Error.
func (v *Verifier) Verify(ctx context.Context, raw, resource string) (*Token, error) {
	if raw == "" {
		return nil, ErrNoToken
	}
	resources := []string{v.cfg.Audience}
	if resource != "" && resource != v.cfg.Audience {
		resources = append(resources, resource)
	}
	if jws, err := jose.ParseSignedCompact(raw, algorithms); err == nil {
		return v.verifyJWT(ctx, jws, resources)
	} else if looksLikeJWT(raw) {
		return nil, invalid("the token is not a JWT guard accepts: %v", err)
	}
	return v.introspect(ctx, raw, resources)
}

// looksLikeJWT reports whether a token has a JWT's three parts, the first
// a JSON header: such a token is never introspected.
func looksLikeJWT(raw string) bool {
	return strings.Count(raw, ".") == 2 && strings.HasPrefix(raw, "eyJ")
}

func (v *Verifier) verifyJWT(ctx context.Context, jws *jose.JSONWebSignature, resources []string) (*Token, error) {
	// The issuer is read before the signature is checked only to refuse
	// a stranger's token with a precise reason, and without fetching
	// keys for it.
	unverified, err := decodeClaims(jws.UnsafePayloadWithoutVerification())
	if err != nil {
		return nil, invalid("the token's claims are not a JSON object")
	}
	if iss, _ := unverified["iss"].(string); iss != v.cfg.Issuer {
		return nil, invalid("the token was issued by %q, not by %q", iss, v.cfg.Issuer)
	}
	keys, err := v.keySet(ctx)
	if err != nil {
		return nil, err
	}
	payload, err := keys.verify(ctx, jws)
	if errors.Is(err, errKeyUnknown) {
		return nil, invalid("the token's signature does not verify with the issuer's keys")
	}
	if err != nil {
		return nil, err
	}
	claims, err := decodeClaims(payload)
	if err != nil {
		return nil, invalid("the token's claims are not a JSON object")
	}
	return v.check(claims, resources, true)
}

// decodeClaims reads a JSON object, numbers as json.Number.
func decodeClaims(b []byte) (map[string]any, error) {
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil || m == nil {
		return nil, errors.New("not a JSON object")
	}
	return m, nil
}

// check reads the claims of a JWT or of an introspection answer: issuer,
// expiry, start, audience, subject and scopes.
func (v *Verifier) check(c map[string]any, resources []string, needExp bool) (*Token, error) {
	now := v.cfg.Now()
	if iss, ok := c["iss"].(string); (ok || needExp) && iss != v.cfg.Issuer {
		return nil, invalid("the token was issued by %q, not by %q", iss, v.cfg.Issuer)
	}
	exp, hasExp := numericDate(c["exp"])
	switch {
	case !hasExp && needExp:
		return nil, invalid("the token has no expiry (exp)")
	case hasExp && now.After(exp.Add(leeway)):
		return nil, invalid("the token expired at %s", exp.UTC().Format(time.RFC3339))
	}
	if nbf, ok := numericDate(c["nbf"]); ok && now.Add(leeway).Before(nbf) {
		return nil, invalid("the token is not valid before %s", nbf.UTC().Format(time.RFC3339))
	}
	aud := stringList(c["aud"])
	if !slices.ContainsFunc(aud, func(a string) bool { return slices.Contains(resources, a) }) {
		if len(aud) == 0 {
			return nil, invalid("the token names no audience; it must name %q", resources[0])
		}
		return nil, invalid("the token is for %s, not for %s", quoteAll(aud), quoteAll(resources))
	}
	sub, _ := c["sub"].(string)
	if sub == "" {
		return nil, invalid("the token names no subject (sub)")
	}
	scopes := scopesOf(c)
	var missing []string
	for _, s := range v.cfg.Scopes {
		if !slices.Contains(scopes, s) {
			missing = append(missing, s)
		}
	}
	if len(missing) > 0 {
		return nil, &Error{Status: http.StatusForbidden, Code: "insufficient_scope",
			Description: "the token lacks the scope " + strings.Join(missing, " ")}
	}
	t := &Token{Scopes: scopes, Expiry: exp}
	t.User.Subject = sub
	// An email the provider did not say it verified names no one: the
	// subject alone is the caller, for rules (users:) and records.
	t.User.Email = guard.VerifiedEmail(c, v.cfg.TrustEmail)
	t.User.Groups = stringList(c[v.cfg.GroupsClaim])
	t.ClientID, _ = c["client_id"].(string)
	if t.ClientID == "" {
		t.ClientID, _ = c["azp"].(string)
	}
	return t, nil
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// numericDate reads a JWT NumericDate (seconds since the epoch).
func numericDate(v any) (time.Time, bool) {
	switch n := v.(type) {
	case json.Number:
		f, err := n.Float64()
		if err != nil {
			return time.Time{}, false
		}
		return time.Unix(0, int64(f*1e9)), true
	case float64:
		return time.Unix(0, int64(n*1e9)), true
	}
	return time.Time{}, false
}

// stringList reads a claim that is a string or a list of strings (aud,
// groups, scp).
func stringList(v any) []string {
	switch x := v.(type) {
	case string:
		if x == "" {
			return nil
		}
		return []string{x}
	case []any:
		out := make([]string, 0, len(x))
		for _, e := range x {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// scopesOf reads the granted scopes: "scope", space-separated (RFC 9068,
// RFC 7662), or "scp", a list or a string (Entra ID, Okta).
func scopesOf(c map[string]any) []string {
	if s, ok := c["scope"].(string); ok {
		return strings.Fields(s)
	}
	var out []string
	for _, s := range stringList(c["scp"]) {
		out = append(out, strings.Fields(s)...)
	}
	return out
}

// tokenKey is how a token is remembered without keeping it.
func tokenKey(raw string) [32]byte { return sha256.Sum256([]byte(raw)) }
