package web

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	guard "github.com/guard-mcp/guard"
)

// OIDC logs people in to the UI through the organisation's identity
// provider: authorization code with PKCE (S256), state and nonce checked,
// the ID token verified against the provider's keys. The person's identity
// is then the verified one (subject, email, groups), and cannot be typed.
type OIDC struct {
	// Issuer is the provider's issuer URL; its discovery document is
	// read on the first login (the provider may be down when guard
	// starts), and kept once read.
	Issuer       string
	ClientID     string
	ClientSecret string // "" for a public client (PKCE alone)
	// Scopes are asked for besides openid (default email, profile).
	Scopes []string
	// GroupsClaim is the claim that lists the person's groups (default
	// groups), read from the ID token, else from userinfo.
	GroupsClaim string
	// TrustEmail makes an email that comes without email_verified the
	// person's (ui.oidc.trust_email), for a provider that never sends
	// the claim (Entra ID). Otherwise, and whatever it says, only
	// email_verified: true does (guard.VerifiedEmail).
	TrustEmail bool
	// RedirectURL is the UI's callback, registered at the provider:
	// public_url (else the UI's address) + "/login/oidc/callback". Its
	// host must be among AllowedHosts.
	RedirectURL string
	// HTTPClient reaches the provider (default: 10 s timeout).
	HTTPClient *http.Client
}

// Where the flow starts and where the provider sends the browser back.
const (
	oidcLoginPath    = "/login/oidc"
	oidcCallbackPath = "/login/oidc/callback"
	// oidcCookie binds a login under way to the browser that started it,
	// so that a code and state sent to another browser (a login CSRF)
	// are refused. SameSite=Lax: the provider's redirect back is a
	// cross-site navigation.
	oidcCookie = "guard_oidc"
	// oidcLoginTTL is how long a person has at the provider.
	oidcLoginTTL = 10 * time.Minute
	// oidcMaxPending bounds the logins under way kept in memory.
	oidcMaxPending = 1000
)

// oidcLogin is the UI's side of the flow: the provider once discovered,
// and the logins under way, by the SHA-256 of their state.
type oidcLogin struct {
	cfg OIDC
	now func() time.Time

	mu       sync.Mutex
	provider *oidc.Provider
	pending  map[string]oidcPending
}

// oidcPending is one login under way: what the callback must find again.
type oidcPending struct {
	verifier string // PKCE
	nonce    string
	binding  string // the oidcCookie's value
	started  time.Time
}

func newOIDCLogin(cfg OIDC, now func() time.Time) (*oidcLogin, error) {
	if cfg.Issuer == "" || cfg.ClientID == "" || cfg.RedirectURL == "" {
		return nil, errors.New("web: OIDC needs an issuer, a client id and a redirect URL")
	}
	if u, err := url.Parse(cfg.RedirectURL); err != nil || u.Host == "" || u.Path != oidcCallbackPath {
		return nil, fmt.Errorf("web: OIDC redirect URL %q: want http(s)://HOST%s", cfg.RedirectURL, oidcCallbackPath)
	}
	if len(cfg.Scopes) == 0 {
		cfg.Scopes = []string{"email", "profile"}
	}
	if cfg.GroupsClaim == "" {
		cfg.GroupsClaim = "groups"
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	return &oidcLogin{cfg: cfg, now: now, pending: map[string]oidcPending{}}, nil
}

// discover returns the provider, reading its discovery document the first
// time it can.
func (o *oidcLogin) discover(ctx context.Context) (*oidc.Provider, error) {
	o.mu.Lock()
	p := o.provider
	o.mu.Unlock()
	if p != nil {
		return p, nil
	}
	// The provider keeps the client of this context (not its deadline)
	// for the key set it fetches later.
	p, err := oidc.NewProvider(oidc.ClientContext(ctx, o.cfg.HTTPClient), o.cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("discovery of %s: %w", o.cfg.Issuer, err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.provider == nil {
		o.provider = p
	}
	return o.provider, nil
}

func (o *oidcLogin) oauth(p *oidc.Provider) *oauth2.Config {
	return &oauth2.Config{
		ClientID:     o.cfg.ClientID,
		ClientSecret: o.cfg.ClientSecret,
		Endpoint:     p.Endpoint(),
		RedirectURL:  o.cfg.RedirectURL,
		Scopes:       append([]string{oidc.ScopeOpenID}, o.cfg.Scopes...),
	}
}

// start keeps a login under way and returns its state.
func (o *oidcLogin) start(p oidcPending) (string, error) {
	state, err := randomHex(32)
	if err != nil {
		return "", err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	now := o.now()
	for k, v := range o.pending {
		if now.Sub(v.started) > oidcLoginTTL {
			delete(o.pending, k)
		}
	}
	if len(o.pending) >= oidcMaxPending {
		return "", errors.New("too many logins under way; try again in a few minutes")
	}
	p.started = now
	o.pending[sessionKeyOf(state)] = p
	return state, nil
}

// take returns the login a state names, once: a state (and so a code
// sent with it) serves one callback.
func (o *oidcLogin) take(state string) (oidcPending, bool) {
	k := sessionKeyOf(state)
	o.mu.Lock()
	defer o.mu.Unlock()
	p, ok := o.pending[k]
	delete(o.pending, k)
	if !ok || o.now().Sub(p.started) > oidcLoginTTL {
		return oidcPending{}, false
	}
	return p, true
}

// oidcStart sends the browser to the provider, with a fresh state, nonce
// and PKCE challenge. A browser at another of the UI's host names is sent
// to the redirect URL's first, so that the cookie binding the login is
// there when the provider sends it back.
func (s *Server) oidcStart(w http.ResponseWriter, r *http.Request) {
	o := s.oidc
	if r.Method != http.MethodGet {
		plainError(w, "Method not allowed.", http.StatusMethodNotAllowed)
		return
	}
	if back, _ := url.Parse(o.cfg.RedirectURL); !strings.EqualFold(back.Host, r.Host) {
		http.Redirect(w, r, back.Scheme+"://"+back.Host+oidcLoginPath, http.StatusSeeOther)
		return
	}
	p, err := o.discover(r.Context())
	if err != nil {
		s.log.Error("ui: the identity provider could not be reached", "issuer", o.cfg.Issuer, "err", err)
		s.render(w, r, http.StatusBadGateway, messagePage("Login unavailable",
			"The identity provider ("+o.cfg.Issuer+") could not be reached: "+err.Error()))
		return
	}
	nonce, err1 := randomHex(32)
	binding, err2 := randomHex(32)
	if err := errors.Join(err1, err2); err != nil {
		s.log.Error("ui: login", "err", err)
		plainError(w, "Internal error: no login could be started.", http.StatusInternalServerError)
		return
	}
	verifier := oauth2.GenerateVerifier()
	state, err := o.start(oidcPending{verifier: verifier, nonce: nonce, binding: binding})
	if err != nil {
		s.log.Warn("ui: login not started", "err", err)
		plainError(w, "Service unavailable: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: oidcCookie, Value: binding, Path: oidcLoginPath, MaxAge: int(oidcLoginTTL / time.Second),
		HttpOnly: true, Secure: s.origins.secure(r), SameSite: http.SameSiteLaxMode})
	http.Redirect(w, r, o.oauth(p).AuthCodeURL(state, oauth2.S256ChallengeOption(verifier), oidc.Nonce(nonce)), http.StatusSeeOther)
}

// oidcCallback completes a login: the state must be one this browser
// started, the code is exchanged with its PKCE verifier, and the ID token
// must be the provider's, for this client, with the login's nonce.
func (s *Server) oidcCallback(w http.ResponseWriter, r *http.Request) {
	o := s.oidc
	if r.Method != http.MethodGet {
		plainError(w, "Method not allowed.", http.StatusMethodNotAllowed)
		return
	}
	refuse := func(why string, args ...any) {
		s.log.Warn("ui: login through the identity provider refused", append([]any{"why", why}, args...)...)
		s.render(w, r, http.StatusForbidden, messagePage("Login refused",
			"The login through the identity provider was refused: "+why+". Start again from the login page."))
	}
	q := r.URL.Query()
	if e := q.Get("error"); e != "" {
		refuse("the provider answered "+e+": "+q.Get("error_description"), "error", e)
		return
	}
	pend, ok := o.take(q.Get("state"))
	if !ok {
		refuse("unknown, used or expired state")
		return
	}
	c, err := r.Cookie(oidcCookie)
	if err != nil || subtle.ConstantTimeCompare([]byte(c.Value), []byte(pend.binding)) != 1 {
		refuse("this login was started by another browser")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: oidcCookie, Value: "", Path: oidcLoginPath, MaxAge: -1, HttpOnly: true,
		Secure: s.origins.secure(r), SameSite: http.SameSiteLaxMode})
	user, unverified, err := o.complete(r.Context(), q.Get("code"), pend)
	if err != nil {
		refuse(err.Error())
		return
	}
	id, err := s.newSession(w, r, http.SameSiteLaxMode)
	if err != nil {
		return
	}
	s.sessions.setVerified(sessionKeyOf(id), user, guard.ViaOIDC)
	if unverified != "" {
		s.log.Warn("ui: the identity provider did not say it verified the email of who logged in (email_verified is not true): "+
			"the subject names them, and the email matches no rule", "subject", user.Subject, "unverified_email", unverified, "trust_email", o.cfg.TrustEmail)
	}
	s.log.Info("ui: login through the identity provider", "subject", user.Subject, "email", user.Email)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// complete exchanges the code and returns the identity its ID token (and
// userinfo, for what the token leaves out) verifies, and, when the
// provider named an email without saying it verified it, that email: it
// is no part of the identity, only for the log.
func (o *oidcLogin) complete(ctx context.Context, code string, pend oidcPending) (user guard.Identity, unverified string, err error) {
	if code == "" {
		return guard.Identity{}, "", errors.New("no code")
	}
	p, err := o.discover(ctx)
	if err != nil {
		return guard.Identity{}, "", err
	}
	ctx = oidc.ClientContext(ctx, o.cfg.HTTPClient)
	tok, err := o.oauth(p).Exchange(ctx, code, oauth2.VerifierOption(pend.verifier))
	if err != nil {
		return guard.Identity{}, "", fmt.Errorf("the code was not accepted: %w", oauthError(err))
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return guard.Identity{}, "", errors.New("the provider sent no ID token")
	}
	idt, err := p.Verifier(&oidc.Config{ClientID: o.cfg.ClientID, Now: o.now}).Verify(ctx, raw)
	if err != nil {
		return guard.Identity{}, "", fmt.Errorf("the ID token is not valid: %w", err)
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(pend.nonce)) != 1 {
		return guard.Identity{}, "", errors.New("the ID token's nonce is not this login's")
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		return guard.Identity{}, "", fmt.Errorf("the ID token's claims: %w", err)
	}
	user = o.identityOf(idt.Subject, claims)
	unverified, _ = claims["email"].(string)
	if _, has := claims[o.cfg.GroupsClaim]; (user.Email == "" || !has) && p.UserInfoEndpoint() != "" {
		info, err := p.UserInfo(ctx, oauth2.StaticTokenSource(tok))
		if err != nil {
			return guard.Identity{}, "", fmt.Errorf("userinfo: %w", err)
		}
		if info.Subject != idt.Subject {
			return guard.Identity{}, "", errors.New("userinfo is about another subject than the ID token")
		}
		var more map[string]any
		if err := info.Claims(&more); err != nil {
			return guard.Identity{}, "", fmt.Errorf("userinfo's claims: %w", err)
		}
		extra := o.identityOf(idt.Subject, more)
		if user.Email == "" {
			user.Email = extra.Email
			if e, _ := more["email"].(string); unverified == "" {
				unverified = e
			}
		}
		if !has {
			user.Groups = extra.Groups
		}
	}
	if user.Email != "" {
		unverified = ""
	}
	return user, unverified, nil
}

// identityOf reads a person from claims: the email only when the provider
// says it verified it (guard.VerifiedEmail: an email is an identity, and
// two people must not share one), the groups from the groups claim (a
// list, or one name).
func (o *oidcLogin) identityOf(sub string, claims map[string]any) guard.Identity {
	id := guard.Identity{Subject: sub, Email: guard.VerifiedEmail(claims, o.cfg.TrustEmail)}
	switch g := claims[o.cfg.GroupsClaim].(type) {
	case string:
		id.Groups = []string{g}
	case []any:
		for _, x := range g {
			if s, ok := x.(string); ok && s != "" {
				id.Groups = append(id.Groups, s)
			}
		}
	}
	return id
}

// oauthError is an exchange's error without the response body it may
// carry in full: the provider's error code and description.
func oauthError(err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) && re.ErrorCode != "" {
		return fmt.Errorf("%s: %s", re.ErrorCode, re.ErrorDescription)
	}
	return err
}
