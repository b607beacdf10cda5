// Package oidctest runs a real OpenID Connect provider in the test's own
// process, as internal/pgtest runs PostgreSQL: zitadel/oidc's op package with
// a small storage of users and clients the test defines. It issues JWT
// access tokens for the audience a client asks for (RFC 8707's resource
// parameter) or a fixed one, with the user's email and groups; it offers
// authorization code with PKCE to public and confidential clients, client
// credentials, token introspection (RFC 7662) and token exchange (RFC 8693).
// It issues no refresh tokens. Mint issues tokens directly, including the
// ones a resource server must refuse (expired, for another audience).
//
// Its login step needs no form when the test says who logs in: the login
// page's user parameter, the authorization request's login_hint, or the
// user LoginAs preset, in that order; otherwise it shows one button per
// user. So a program and a browser can both go through the whole flow.
package oidctest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/google/uuid"
	"github.com/zitadel/oidc/v3/pkg/op"
	"golang.org/x/oauth2"
)

// User is a person who can log in.
type User struct {
	Subject string
	Email   string
	// EmailVerified is the email_verified claim sent with Email, in ID
	// tokens, userinfo, access tokens and introspection answers: nil
	// sends true, what a provider says of an email it checked; Omitted
	// leaves the claim out, as Entra ID does; any other value is sent as
	// it is, such as false, or the string "false" that some userinfo
	// endpoints send.
	EmailVerified any
	Groups        []string
}

// Omitted, as a User's EmailVerified, leaves the claim out.
type Omitted struct{}

// emailVerified is the email_verified claim to send for u, and whether
// to send one.
func (u *User) emailVerified() (any, bool) {
	switch v := u.EmailVerified.(type) {
	case nil:
		return u.Email != "", u.Email != ""
	case Omitted:
		return nil, false
	default:
		return v, u.Email != ""
	}
}

// Client is a registered OAuth client.
type Client struct {
	ID string
	// Secret is a confidential client's; "" makes a public client
	// (authorization code with PKCE, no secret).
	Secret string
	// RedirectURIs are where codes may be sent. A public client's
	// loopback URIs match on any port (RFC 8252).
	RedirectURIs []string
	// Opaque makes its access tokens opaque, to be checked by
	// introspection, rather than JWTs.
	Opaque bool
}

// Options configure a Provider.
type Options struct {
	Users   []User
	Clients []Client
	// Audience, when set, is the audience of every access token whatever
	// the client asks for (a provider with one audience per API);
	// otherwise a token is for the resource the client named (RFC 8707),
	// else for the client itself.
	Audience string
	// TokenLifetime is how long access tokens last (default 5m).
	TokenLifetime time.Duration
	// GroupsClaim names the claim that lists a user's groups (default
	// "groups").
	GroupsClaim string
}

// Provider is a running OpenID Connect provider.
type Provider struct {
	// Issuer is its issuer URL: http://127.0.0.1:PORT.
	Issuer string
	op     *op.Provider
	st     *storage
	srv    *httptest.Server
	// keyFetches counts the requests for its key set (JWKS).
	keyFetches atomic.Int64
}

// keysPath is where op publishes the key set.
const keysPath = "/keys"

// Start runs a provider on a loopback port until the test ends.
func Start(t testing.TB, o Options) *Provider {
	t.Helper()
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// New runs a provider on a loopback port; Close stops it.
func New(o Options) (*Provider, error) {
	if o.TokenLifetime <= 0 {
		o.TokenLifetime = 5 * time.Minute
	}
	if o.GroupsClaim == "" {
		o.GroupsClaim = "groups"
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	st := &storage{opts: o, key: key, keyID: uuid.NewString(),
		requests: map[string]*authRequest{}, codes: map[string]string{}, tokens: map[string]*token{}}
	p := &Provider{st: st}
	mux := http.NewServeMux()
	p.srv = httptest.NewServer(mux)
	p.Issuer = p.srv.URL
	var cryptoKey [32]byte
	if _, err := rand.Read(cryptoKey[:]); err != nil {
		return nil, err
	}
	p.op, err = op.NewOpenIDProvider(p.Issuer, &op.Config{
		CryptoKey:      cryptoKey,
		CodeMethodS256: true,
		AuthMethodPost: true,
	}, st, op.WithAllowInsecure())
	if err != nil {
		p.srv.Close()
		return nil, err
	}
	mux.HandleFunc("/login", p.login)
	mux.Handle("/", withResource(p.op))
	mux.Handle(keysPath, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.keyFetches.Add(1)
		p.op.ServeHTTP(w, r)
	}))
	return p, nil
}

// KeyFetches is how many times its key set (JWKS) was asked for.
func (p *Provider) KeyFetches() int { return int(p.keyFetches.Load()) }

// Rotate makes the provider sign with a new key from now on, under a new
// key id, and publish it beside the ones before (which still verify the
// tokens they signed).
func (p *Provider) Rotate() error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	s := p.st
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retired = append(s.retired, publicKey{&s.key.PublicKey, s.keyID})
	s.key, s.keyID = key, uuid.NewString()
	return nil
}

// Close stops the provider.
func (p *Provider) Close() { p.srv.Close() }

// LoginAs sets who logs in when a login names no user ("": show the
// buttons again).
func (p *Provider) LoginAs(subject string) {
	p.st.mu.Lock()
	p.st.loginAs = subject
	p.st.mu.Unlock()
}

// Crypto is the provider's encryption of opaque tokens.
func (p *Provider) crypto() op.Crypto { return p.op.Crypto() }

// resourceKey carries the resource parameters (RFC 8707) of an
// authorization or a token request to the storage: op's requests do not
// read them.
type resourceKey struct{}

func withResource(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/authorize" || r.URL.Path == "/oauth/token" {
			if err := r.ParseForm(); err == nil && len(r.Form["resource"]) > 0 {
				r = r.WithContext(context.WithValue(r.Context(), resourceKey{}, r.Form["resource"]))
			}
		}
		next.ServeHTTP(w, r)
	})
}

var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html><head><title>Log in</title></head><body>
<h1>Log in to the test provider</h1>
<form method="post" action="/login">
<input type="hidden" name="authRequestID" value="{{.ID}}">
{{range .Users}}<button type="submit" name="user" value="{{.Subject}}" id="login-{{.Subject}}">{{.Subject}}{{if .Email}} ({{.Email}}){{end}}</button>
{{end}}</form></body></html>`))

// login completes an authorization request as the user the test named,
// or asks which one.
func (p *Provider) login(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	id := r.Form.Get("authRequestID")
	p.st.mu.Lock()
	req := p.st.requests[id]
	user := r.Form.Get("user")
	if user == "" && req != nil {
		user = req.loginHint
	}
	if user == "" {
		user = p.st.loginAs
	}
	p.st.mu.Unlock()
	if req == nil {
		http.Error(w, "unknown authorization request", http.StatusBadRequest)
		return
	}
	if user == "" {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = loginPage.Execute(w, map[string]any{"ID": id, "Users": p.st.opts.Users})
		return
	}
	if p.st.user(user) == nil {
		http.Error(w, fmt.Sprintf("no user %q", user), http.StatusForbidden)
		return
	}
	p.st.mu.Lock()
	req.subject, req.done, req.authTime = user, true, time.Now()
	p.st.mu.Unlock()
	http.Redirect(w, r, p.Issuer+"/authorize/callback?id="+url.QueryEscape(id), http.StatusFound)
}

// Mint describes a token Mint issues directly, without a flow: for what a
// resource server must refuse as well as what it must accept.
type Mint struct {
	Subject  string // a user's; its email and groups are added
	ClientID string
	Audience []string
	Scopes   []string
	// Lifetime is how long it lasts from now (default: the provider's);
	// negative makes a token that expired that long ago.
	Lifetime time.Duration
	// Opaque makes an opaque token, known to introspection, instead of
	// a JWT.
	Opaque bool
	// Claims are added to (or replace) the JWT's claims.
	Claims map[string]any
	// KeyID, when set, signs the JWT with a key the provider does not
	// publish, under this key id: a forgery, or a key not published yet.
	KeyID string
}

// Mint issues an access token.
func (p *Provider) Mint(t testing.TB, m Mint) string {
	t.Helper()
	if m.Lifetime == 0 {
		m.Lifetime = p.st.opts.TokenLifetime
	}
	now := time.Now()
	tok := &token{id: uuid.NewString(), subject: m.Subject, clientID: m.ClientID, audience: m.Audience, scopes: m.Scopes,
		issued: now, expiry: now.Add(m.Lifetime)}
	p.st.mu.Lock()
	p.st.tokens[tok.id] = tok
	p.st.mu.Unlock()
	if m.Opaque {
		s, err := op.CreateBearerToken(tok.id, tok.subject, p.crypto())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	claims := map[string]any{
		"iss": p.Issuer, "sub": m.Subject, "exp": tok.expiry.Unix(), "iat": now.Unix(), "nbf": now.Add(-time.Second).Unix(),
		"jti": tok.id,
	}
	if len(m.Audience) > 0 {
		claims["aud"] = m.Audience
	}
	if m.ClientID != "" {
		claims["client_id"] = m.ClientID
	}
	for k, v := range p.st.userClaims(m.Subject, m.Scopes) {
		claims[k] = v
	}
	for k, v := range m.Claims {
		claims[k] = v
	}
	key := p.st.signing()
	if m.KeyID != "" {
		other, err := p.st.unpublished()
		if err != nil {
			t.Fatal(err)
		}
		key = signingKey{other, m.KeyID}
	}
	s, err := sign(key, claims)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// unpublished is a key the provider signs with when a test asks for one
// it does not publish: made once (a key takes a while to make).
func (s *storage) unpublished() (*rsa.PrivateKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stranger == nil {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return nil, err
		}
		s.stranger = k
	}
	return s.stranger, nil
}

// sign makes a JWT of claims with key.
func sign(key signingKey, claims map[string]any) (string, error) {
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: key.key, KeyID: key.id}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	jws, err := signer.Sign(b)
	if err != nil {
		return "", err
	}
	return jws.CompactSerialize()
}

// Token is a token endpoint's answer.
type Token struct {
	AccessToken string `json:"access_token"`
	TokenType   string `json:"token_type"`
	ExpiresIn   int    `json:"expires_in"`
	IDToken     string `json:"id_token"`
	Scope       string `json:"scope"`
}

// ClientCredentials asks the token endpoint for a token of a confidential
// client's own (its subject is the client), for resource when not "".
func (p *Provider) ClientCredentials(t testing.TB, c Client, scope, resource string) Token {
	t.Helper()
	form := url.Values{"grant_type": {"client_credentials"}, "scope": {scope}}
	if resource != "" {
		form.Set("resource", resource)
	}
	return p.token(t, "client credentials", c, form)
}

// token posts form to the token endpoint as client c: with HTTP Basic for
// a confidential client, with its id in the form for a public one.
func (p *Provider) token(t testing.TB, what string, c Client, form url.Values) Token {
	t.Helper()
	if c.Secret == "" {
		form.Set("client_id", c.ID)
	}
	req, _ := http.NewRequest(http.MethodPost, p.Issuer+"/oauth/token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if c.Secret != "" {
		req.SetBasicAuth(url.QueryEscape(c.ID), url.QueryEscape(c.Secret))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var tok Token
	if err := json.Unmarshal(body, &tok); err != nil || resp.StatusCode != http.StatusOK || tok.AccessToken == "" {
		t.Fatalf("%s: HTTP %d: %s", what, resp.StatusCode, body)
	}
	return tok
}

// Exchanges returns the token exchanges the provider granted, oldest
// first: who asked, for whom, and for which audience.
func (p *Provider) Exchanges() []Exchange {
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	return slices.Clone(p.st.exchanges)
}

// Exchange is one token exchange granted.
type Exchange struct {
	ClientID string
	Subject  string
	Audience []string
	Scopes   []string
}

// Login goes through authorization code with PKCE as a program would: it
// asks for scope and resource (RFC 8707, when not "") as client, which
// must have redirectURI registered, logs in as user, follows the
// redirects to the code and exchanges it (with secret, for a confidential
// client).
func (p *Provider) Login(t testing.TB, c Client, redirectURI, user, scope, resource string) Token {
	t.Helper()
	verifier := oauth2.GenerateVerifier()
	q := url.Values{"response_type": {"code"}, "client_id": {c.ID}, "redirect_uri": {redirectURI}, "scope": {scope},
		"state": {"st"}, "code_challenge": {oauth2.S256ChallengeFromVerifier(verifier)}, "code_challenge_method": {"S256"},
		"login_hint": {user}}
	if resource != "" {
		q.Set("resource", resource)
	}
	code, err := FollowToCode(http.DefaultClient, p.Issuer+"/authorize?"+q.Encode(), redirectURI)
	if err != nil {
		t.Fatal(err)
	}
	form := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {redirectURI}, "code_verifier": {verifier}}
	if resource != "" {
		form.Set("resource", resource)
	}
	return p.token(t, "exchanging the code", c, form)
}

// FollowToCode follows the redirects from an authorization URL, as a
// browser would, until one goes to redirectURI, and returns its code (or
// the error the provider sent there).
func FollowToCode(client *http.Client, authURL, redirectURI string) (string, error) {
	c := *client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	next := authURL
	for range 10 {
		resp, err := c.Get(next)
		if err != nil {
			return "", err
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		loc := resp.Header.Get("Location")
		if resp.StatusCode < 300 || resp.StatusCode >= 400 || loc == "" {
			return "", fmt.Errorf("%s answered HTTP %d without a redirect: %s", next, resp.StatusCode, strings.TrimSpace(string(body)))
		}
		u, err := resp.Request.URL.Parse(loc)
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(u.String(), redirectURI) {
			if e := u.Query().Get("error"); e != "" {
				return "", fmt.Errorf("the provider refused: %s: %s", e, u.Query().Get("error_description"))
			}
			return u.Query().Get("code"), nil
		}
		next = u.String()
	}
	return "", errors.New("too many redirects")
}
