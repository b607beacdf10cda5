package oidctest

import (
	"context"
	"crypto/rsa"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/google/uuid"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// storage is the provider's op.Storage: users, clients, authorization
// requests and tokens in memory.
type storage struct {
	opts Options

	mu        sync.Mutex
	key       *rsa.PrivateKey // what it signs with now
	keyID     string
	retired   []publicKey     // keys it signed with before, still published
	stranger  *rsa.PrivateKey // a key it does not publish (Mint.KeyID)
	loginAs   string
	requests  map[string]*authRequest // by id
	codes     map[string]string       // code → request id
	tokens    map[string]*token       // by id
	exchanges []Exchange
}

var (
	_ op.Storage                        = (*storage)(nil)
	_ op.ClientCredentialsStorage       = (*storage)(nil)
	_ op.TokenExchangeStorage           = (*storage)(nil)
	_ op.CanGetPrivateClaimsFromRequest = (*storage)(nil)
	_ op.CanSetUserinfoFromRequest      = (*storage)(nil)
)

func (s *storage) user(sub string) *User {
	for i := range s.opts.Users {
		if s.opts.Users[i].Subject == sub {
			return &s.opts.Users[i]
		}
	}
	return nil
}

func (s *storage) client(id string) *Client {
	for i := range s.opts.Clients {
		if s.opts.Clients[i].ID == id {
			return &s.opts.Clients[i]
		}
	}
	return nil
}

// userClaims are what an access token says of its user besides the
// subject, and the scopes granted.
func (s *storage) userClaims(sub string, scopes []string) map[string]any {
	c := map[string]any{}
	if len(scopes) > 0 {
		c["scope"] = strings.Join(scopes, " ")
	}
	if u := s.user(sub); u != nil {
		if u.Email != "" {
			c["email"] = u.Email
		}
		if v, ok := u.emailVerified(); ok {
			c["email_verified"] = v
		}
		c[s.opts.GroupsClaim] = append([]string{}, u.Groups...)
	}
	return c
}

// audience is what a token is for: the fixed audience, else the resources
// asked for, else the client.
func (s *storage) audience(resources []string, clientID string) []string {
	switch {
	case s.opts.Audience != "":
		return []string{s.opts.Audience}
	case len(resources) > 0:
		return slices.Clone(resources)
	}
	return []string{clientID}
}

// authRequest is one authorization request, until its code is exchanged.
type authRequest struct {
	id, clientID, redirectURI, state, nonce, loginHint string
	scopes                                             []string
	responseType                                       oidc.ResponseType
	responseMode                                       oidc.ResponseMode
	challenge                                          *oidc.CodeChallenge
	audience                                           []string
	subject                                            string
	done                                               bool
	authTime                                           time.Time
}

func (a *authRequest) GetID() string                         { return a.id }
func (a *authRequest) GetACR() string                        { return "" }
func (a *authRequest) GetAMR() []string                      { return []string{"test"} }
func (a *authRequest) GetAudience() []string                 { return a.audience }
func (a *authRequest) GetAuthTime() time.Time                { return a.authTime }
func (a *authRequest) GetClientID() string                   { return a.clientID }
func (a *authRequest) GetCodeChallenge() *oidc.CodeChallenge { return a.challenge }
func (a *authRequest) GetNonce() string                      { return a.nonce }
func (a *authRequest) GetRedirectURI() string                { return a.redirectURI }
func (a *authRequest) GetResponseType() oidc.ResponseType    { return a.responseType }
func (a *authRequest) GetResponseMode() oidc.ResponseMode    { return a.responseMode }
func (a *authRequest) GetScopes() []string                   { return a.scopes }
func (a *authRequest) GetState() string                      { return a.state }
func (a *authRequest) GetSubject() string                    { return a.subject }
func (a *authRequest) Done() bool                            { return a.done }

// token is an access token issued, kept for introspection.
type token struct {
	id, subject, clientID string
	audience, scopes      []string
	issued, expiry        time.Time
}

// tokenRequest is a client credentials request.
type tokenRequest struct {
	subject  string
	audience []string
	scopes   []string
}

func (r *tokenRequest) GetSubject() string    { return r.subject }
func (r *tokenRequest) GetAudience() []string { return r.audience }
func (r *tokenRequest) GetScopes() []string   { return r.scopes }

func (s *storage) CreateAuthRequest(ctx context.Context, req *oidc.AuthRequest, userID string) (op.AuthRequest, error) {
	resources, _ := ctx.Value(resourceKey{}).([]string)
	a := &authRequest{id: uuid.NewString(), clientID: req.ClientID, redirectURI: req.RedirectURI, state: req.State,
		nonce: req.Nonce, loginHint: req.LoginHint, scopes: req.Scopes, responseType: req.ResponseType,
		responseMode: req.ResponseMode, audience: s.audience(resources, req.ClientID), subject: userID}
	if req.CodeChallenge != "" {
		a.challenge = &oidc.CodeChallenge{Challenge: req.CodeChallenge, Method: req.CodeChallengeMethod}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests[a.id] = a
	return a, nil
}

func (s *storage) AuthRequestByID(_ context.Context, id string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.requests[id]; ok {
		return a, nil
	}
	return nil, errors.New("no such authorization request")
}

func (s *storage) AuthRequestByCode(ctx context.Context, code string) (op.AuthRequest, error) {
	s.mu.Lock()
	id, ok := s.codes[code]
	s.mu.Unlock()
	if !ok {
		return nil, errors.New("no such code")
	}
	return s.AuthRequestByID(ctx, id)
}

func (s *storage) SaveAuthCode(_ context.Context, id, code string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.codes[code] = id
	return nil
}

func (s *storage) DeleteAuthRequest(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.requests, id)
	for code, rid := range s.codes {
		if rid == id {
			delete(s.codes, code)
		}
	}
	return nil
}

func (s *storage) CreateAccessToken(_ context.Context, req op.TokenRequest) (string, time.Time, error) {
	t := &token{id: uuid.NewString(), subject: req.GetSubject(), audience: req.GetAudience(), scopes: req.GetScopes(),
		issued: time.Now(), expiry: time.Now().Add(s.opts.TokenLifetime)}
	switch r := req.(type) {
	case op.AuthRequest:
		t.clientID = r.GetClientID()
	case op.TokenExchangeRequest:
		t.clientID = r.GetClientID()
	case *tokenRequest:
		t.clientID = r.subject
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens[t.id] = t
	return t.id, t.expiry, nil
}

func (s *storage) CreateAccessAndRefreshTokens(context.Context, op.TokenRequest, string) (string, string, time.Time, error) {
	return "", "", time.Time{}, errors.New("this provider issues no refresh tokens")
}

func (s *storage) TokenRequestByRefreshToken(context.Context, string) (op.RefreshTokenRequest, error) {
	return nil, op.ErrInvalidRefreshToken
}

func (s *storage) TerminateSession(context.Context, string, string) error { return nil }

func (s *storage) RevokeToken(_ context.Context, tokenOrID, _, _ string) *oidc.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.tokens, tokenOrID)
	return nil
}

func (s *storage) GetRefreshTokenInfo(context.Context, string, string) (string, string, error) {
	return "", "", op.ErrInvalidRefreshToken
}

type signingKey struct {
	key *rsa.PrivateKey
	id  string
}

func (k signingKey) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k signingKey) Key() any                                    { return k.key }
func (k signingKey) ID() string                                  { return k.id }

type publicKey struct {
	key *rsa.PublicKey
	id  string
}

func (k publicKey) ID() string                         { return k.id }
func (k publicKey) Algorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k publicKey) Use() string                        { return "sig" }
func (k publicKey) Key() any                           { return k.key }

// signing is the key the provider signs with now.
func (s *storage) signing() signingKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	return signingKey{s.key, s.keyID}
}

func (s *storage) SigningKey(context.Context) (op.SigningKey, error) { return s.signing(), nil }
func (s *storage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}

// KeySet publishes the key it signs with and the ones it signed with
// before.
func (s *storage) KeySet(context.Context) ([]op.Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := []op.Key{publicKey{&s.key.PublicKey, s.keyID}}
	for _, k := range s.retired {
		keys = append(keys, k)
	}
	return keys, nil
}

func (s *storage) GetClientByClientID(_ context.Context, id string) (op.Client, error) {
	c := s.client(id)
	if c == nil {
		return nil, fmt.Errorf("no client %q", id)
	}
	return opClient{c}, nil
}

func (s *storage) AuthorizeClientIDSecret(_ context.Context, id, secret string) error {
	c := s.client(id)
	if c == nil || c.Secret == "" || c.Secret != secret {
		return errors.New("wrong client id or secret")
	}
	return nil
}

func (s *storage) SetUserinfoFromScopes(context.Context, *oidc.UserInfo, string, string, []string) error {
	return nil
}

func (s *storage) SetUserinfoFromRequest(_ context.Context, ui *oidc.UserInfo, req op.IDTokenRequest, _ []string) error {
	s.setUserinfo(ui, req.GetSubject())
	return nil
}

func (s *storage) setUserinfo(ui *oidc.UserInfo, sub string) {
	ui.Subject = sub
	if u := s.user(sub); u != nil {
		u.putEmail(&ui.UserInfoEmail, ui.AppendClaims)
		ui.AppendClaims(s.opts.GroupsClaim, append([]string{}, u.Groups...))
	}
}

// putEmail writes u's email and its email_verified claim into e: a claim
// other than true through put, as it is (zitadel's own member is a
// boolean, and false is left out of its JSON).
func (u *User) putEmail(e *oidc.UserInfoEmail, put func(k string, v any)) {
	e.Email = u.Email
	v, ok := u.emailVerified()
	if !ok {
		return
	}
	if b, isBool := v.(bool); isBool && b {
		e.EmailVerified = true
		return
	}
	put("email_verified", v)
}

func (s *storage) SetUserinfoFromToken(_ context.Context, ui *oidc.UserInfo, _, sub, _ string) error {
	s.setUserinfo(ui, sub)
	return nil
}

func (s *storage) SetIntrospectionFromToken(ctx context.Context, resp *oidc.IntrospectionResponse, tokenID, _, _ string) error {
	s.mu.Lock()
	t := s.tokens[tokenID]
	s.mu.Unlock()
	if t == nil || time.Now().After(t.expiry) {
		return errors.New("no such token, or expired")
	}
	resp.Issuer = op.IssuerFromContext(ctx)
	resp.Subject, resp.ClientID, resp.Scope, resp.Audience = t.subject, t.clientID, t.scopes, t.audience
	resp.Expiration, resp.IssuedAt, resp.TokenType = oidc.FromTime(t.expiry), oidc.FromTime(t.issued), oidc.BearerToken
	if u := s.user(t.subject); u != nil {
		resp.Claims = map[string]any{s.opts.GroupsClaim: append([]string{}, u.Groups...)}
		u.putEmail(&resp.UserInfoEmail, func(k string, v any) { resp.Claims[k] = v })
	}
	return nil
}

func (s *storage) GetPrivateClaimsFromScopes(_ context.Context, sub, _ string, scopes []string) (map[string]any, error) {
	return s.userClaims(sub, scopes), nil
}

func (s *storage) GetPrivateClaimsFromRequest(_ context.Context, req op.TokenRequest, _ []string) (map[string]any, error) {
	return s.userClaims(req.GetSubject(), req.GetScopes()), nil
}

func (s *storage) GetKeyByIDAndClientID(context.Context, string, string) (*jose.JSONWebKey, error) {
	return nil, errors.New("no JWT profile keys")
}

func (s *storage) ValidateJWTProfileScopes(_ context.Context, _ string, scopes []string) ([]string, error) {
	return scopes, nil
}

func (s *storage) Health(context.Context) error { return nil }

func (s *storage) ClientCredentials(ctx context.Context, id, secret string) (op.Client, error) {
	if err := s.AuthorizeClientIDSecret(ctx, id, secret); err != nil {
		return nil, err
	}
	return opClient{s.client(id)}, nil
}

func (s *storage) ClientCredentialsTokenRequest(ctx context.Context, id string, scopes []string) (op.TokenRequest, error) {
	resources, _ := ctx.Value(resourceKey{}).([]string)
	return &tokenRequest{subject: id, audience: s.audience(resources, id), scopes: scopes}, nil
}

// ValidateTokenExchangeRequest grants a confidential client an access
// token of the subject's for the audience it asks for.
func (s *storage) ValidateTokenExchangeRequest(_ context.Context, req op.TokenExchangeRequest) error {
	if req.GetRequestedTokenType() == "" {
		req.SetRequestedTokenType(oidc.AccessTokenType)
	}
	if req.GetRequestedTokenType() != oidc.AccessTokenType {
		return oidc.ErrInvalidRequest().WithDescription("this provider exchanges for access tokens only")
	}
	if s.user(req.GetSubject()) == nil {
		return oidc.ErrInvalidRequest().WithDescription("unknown subject")
	}
	return nil
}

func (s *storage) CreateTokenExchangeRequest(_ context.Context, req op.TokenExchangeRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.exchanges = append(s.exchanges, Exchange{ClientID: req.GetClientID(), Subject: req.GetSubject(),
		Audience: req.GetAudience(), Scopes: req.GetScopes()})
	return nil
}

func (s *storage) GetPrivateClaimsFromTokenExchangeRequest(_ context.Context, req op.TokenExchangeRequest) (map[string]any, error) {
	return s.userClaims(req.GetSubject(), req.GetScopes()), nil
}

func (s *storage) SetUserinfoFromTokenExchangeRequest(_ context.Context, ui *oidc.UserInfo, req op.TokenExchangeRequest) error {
	s.setUserinfo(ui, req.GetSubject())
	return nil
}

// opClient is a Client as op sees it.
type opClient struct{ c *Client }

func (c opClient) GetID() string                        { return c.c.ID }
func (c opClient) RedirectURIs() []string               { return c.c.RedirectURIs }
func (c opClient) PostLogoutRedirectURIs() []string     { return nil }
func (c opClient) LoginURL(id string) string            { return "/login?authRequestID=" + id }
func (c opClient) IDTokenLifetime() time.Duration       { return 5 * time.Minute }
func (c opClient) DevMode() bool                        { return false }
func (c opClient) IsScopeAllowed(string) bool           { return true }
func (c opClient) IDTokenUserinfoClaimsAssertion() bool { return true }
func (c opClient) ClockSkew() time.Duration             { return 0 }
func (c opClient) ResponseTypes() []oidc.ResponseType {
	return []oidc.ResponseType{oidc.ResponseTypeCode}
}

func (c opClient) ApplicationType() op.ApplicationType {
	if c.c.Secret == "" {
		return op.ApplicationTypeNative
	}
	return op.ApplicationTypeWeb
}

func (c opClient) AuthMethod() oidc.AuthMethod {
	if c.c.Secret == "" {
		return oidc.AuthMethodNone
	}
	return oidc.AuthMethodBasic
}

func (c opClient) GrantTypes() []oidc.GrantType {
	if c.c.Secret == "" {
		return []oidc.GrantType{oidc.GrantTypeCode}
	}
	return []oidc.GrantType{oidc.GrantTypeCode, oidc.GrantTypeClientCredentials, oidc.GrantTypeTokenExchange}
}

func (c opClient) AccessTokenType() op.AccessTokenType {
	if c.c.Opaque {
		return op.AccessTokenTypeBearer
	}
	return op.AccessTokenTypeJWT
}

func (c opClient) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}

func (c opClient) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
