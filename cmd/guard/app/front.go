package app

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/guard-mcp/guard/auth"
	"github.com/guard-mcp/guard/config"
	"github.com/guard-mcp/guard/policy"
	"github.com/guard-mcp/guard/proxy/streamable"
)

// frontAuth is how guard serve's HTTP front knows its callers. With
// clients: a static bearer token names its client; with auth: an access
// token of the issuer's, for guard's audience, names its client, its user
// and the user's groups. With both, either is accepted, the static token
// first: a static token's caller has no user. With neither, the front
// asks for nothing (it listens on loopback, or behind --allow-remote).
type frontAuth struct {
	static   func(*http.Request) (string, bool) // nil without clients:
	verifier *auth.Verifier                     // nil without auth:
	base     string                             // the public URL of guard serve
	logger   *slog.Logger
	// keepTokens: some server exchanges callers' tokens, so sessions
	// keep their caller's latest one (only then).
	keepTokens bool
}

func newFrontAuth(cfg *config.Config, base string, logger *slog.Logger) (*frontAuth, error) {
	f := &frontAuth{base: base, logger: logger}
	if len(cfg.Clients) > 0 {
		f.static = bearerAuth(cfg.Clients)
	}
	if a := cfg.Auth; a.Issuer != "" && (a.Introspection.ClientID != "" || a.Introspection.ClientSecret != "") &&
		(a.Introspection.ClientID == "" || a.Introspection.ClientSecret == "") {
		return nil, fmt.Errorf("%s: auth.introspection: client_id or client_secret is empty (is its variable set in guard serve's environment?)", cfg.File)
	}
	for name, s := range cfg.Servers {
		if x := s.TokenExchange; x != nil && (x.ClientID == "" || x.ClientSecret == "") {
			return nil, fmt.Errorf("%s:%d: servers.%s.token_exchange: client_id or client_secret is empty (is its variable set in guard serve's environment?)", cfg.File, x.Line, name)
		}
		f.keepTokens = f.keepTokens || s.TokenExchange != nil
	}
	if a := cfg.Auth; a.Issuer != "" {
		v, err := auth.New(auth.Config{Issuer: a.Issuer, Audience: a.Audience, Scopes: a.Scopes, GroupsClaim: a.GroupsClaim, TrustEmail: a.TrustEmail,
			IntrospectionClientID: a.Introspection.ClientID, IntrospectionClientSecret: a.Introspection.ClientSecret, Logger: logger})
		if err != nil {
			return nil, err
		}
		f.verifier = v
	}
	return f, nil
}

// enabled reports whether requests need a token.
func (f *frontAuth) enabled() bool { return f.static != nil || f.verifier != nil }

// endpoint returns the Authenticate of the endpoint at path (/mcp/NAME,
// /mcp), or nil when requests need no token.
func (f *frontAuth) endpoint(path string) func(*http.Request) (streamable.Caller, *streamable.AuthError) {
	if !f.enabled() {
		return nil
	}
	resource, meta := f.base+path, f.base+auth.MetadataPath(path)
	return func(r *http.Request) (streamable.Caller, *streamable.AuthError) { return f.check(r, resource, meta) }
}

// check finds the caller of a request to the endpoint whose URL is
// resource and whose metadata is at meta.
func (f *frontAuth) check(r *http.Request, resource, meta string) (streamable.Caller, *streamable.AuthError) {
	if f.static != nil {
		if name, ok := f.static(r); ok {
			return streamable.Caller{Client: name}, nil
		}
	}
	if f.verifier == nil {
		return streamable.Caller{}, &streamable.AuthError{Status: http.StatusUnauthorized, Challenge: `Bearer realm="guard"`,
			Message: "Unauthorized: a bearer token configured in guard's clients is needed"}
	}
	raw := auth.BearerToken(r)
	tok, err := f.verifier.Verify(r.Context(), raw, resource)
	if err != nil {
		var e *auth.Error
		if !errors.As(err, &e) {
			e = &auth.Error{Status: http.StatusUnauthorized, Code: "invalid_token", Description: err.Error()}
		}
		if raw != "" {
			f.logger.Info("access token refused", "endpoint", resource, "status", e.Status, "why", e.Description)
		}
		msg := "Unauthorized: " + e.Description
		switch e.Status {
		case http.StatusForbidden:
			msg = "Forbidden: " + e.Description
		case http.StatusServiceUnavailable:
			msg = "Service unavailable: " + e.Description
		}
		if meta != "" {
			msg += " (how to get a token: " + meta + ")"
		}
		challenge := `Bearer realm="guard"`
		if meta != "" {
			challenge = f.verifier.Challenge(meta, e)
		}
		return streamable.Caller{}, &streamable.AuthError{Status: e.Status, Challenge: challenge, Message: msg}
	}
	c := streamable.Caller{Client: tok.ClientID, User: tok.User}
	if f.keepTokens {
		c.Token = func() string { return raw }
	}
	return c, nil
}

// metadata serves the Protected Resource Metadata (RFC 9728) of the
// endpoint at path, when access tokens are configured.
func (f *frontAuth) metadata(mux *http.ServeMux, hosts []string, path, name string) {
	if f.verifier == nil {
		return
	}
	mux.Handle(auth.MetadataPath(path), streamable.CheckHosts(hosts, f.verifier.MetadataHandler(f.base+path, name)))
}

// protect serves next only to a request with a static token or an access
// token for guard's audience (401 otherwise), when either is configured.
func (f *frontAuth) protect(next http.Handler) http.Handler {
	if !f.enabled() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, refused := f.check(r, "", ""); refused != nil {
			w.Header().Set("WWW-Authenticate", refused.Challenge)
			http.Error(w, refused.Message, refused.Status)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// upstreamAuth gives the credentials of a remote server with a token
// exchange for a caller (see remoteRun): an exchange of the caller's
// access token.
func (f *frontAuth) upstreamAuth(x *policy.TokenExchange) func(ctx context.Context, c streamable.Caller) (string, error) {
	if x == nil {
		return nil
	}
	ex := &auth.Exchanger{TokenURL: x.TokenURL, Verifier: f.verifier, ClientID: x.ClientID, ClientSecret: x.ClientSecret,
		Audience: x.Audience, Scope: x.Scope, Resource: x.Resource}
	return func(ctx context.Context, c streamable.Caller) (string, error) {
		var tok string
		if c.Token != nil {
			tok = c.Token()
		}
		t, err := ex.Token(ctx, c.User.Subject, tok)
		if err != nil {
			return "", err
		}
		return "Bearer " + strings.TrimSpace(t), nil
	}
}

// bearerAuth names the client of a request by its bearer token, compared
// by hash in constant time against every configured client.
func bearerAuth(clients []config.Client) func(r *http.Request) (string, bool) {
	type entry struct {
		name string
		sum  []byte
	}
	entries := make([]entry, 0, len(clients))
	for _, c := range clients {
		b, _ := hex.DecodeString(c.TokenSHA256)
		entries = append(entries, entry{c.Name, b})
	}
	return func(r *http.Request) (string, bool) {
		h := r.Header.Get("Authorization")
		if len(h) < 7 || !strings.EqualFold(h[:7], "Bearer ") {
			return "", false
		}
		sum := sha256.Sum256([]byte(strings.TrimSpace(h[7:])))
		name, ok := "", false
		for _, e := range entries {
			if subtle.ConstantTimeCompare(sum[:], e.sum) == 1 {
				name, ok = e.name, true
			}
		}
		return name, ok
	}
}
