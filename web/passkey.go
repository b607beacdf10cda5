package web

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/webauthn"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
)

// Passkeys make every decision the UI takes (on a held call, a tool's
// definition, a configuration change) need the approver's passkey: a
// WebAuthn assertion with user verification, made for that one decision.
// A session alone (a process that stole the UI token, or a session cookie)
// decides nothing.
//
// One assertion per decision rather than one per session: a session that
// verified once would let whoever holds its cookie decide for its whole
// life; an assertion bound to one form (its path and fields) lets nothing
// else through, at the cost of a touch of the authenticator per decision.
//
// The first passkey is enrolled with a one-time code from the terminal
// (guard ui enroll), which only the database holds (as its SHA-256); later
// ones only from a session that used a passkey.
type Passkeys struct {
	Store PasskeyStore
	// Origin is the UI's origin as browsers reach it, such as
	// http://localhost:8931 (see config.Config.PasskeyOrigin): its host
	// is the relying party, and must be among AllowedHosts.
	Origin string
}

// PasskeyStore keeps passkeys and enrolment codes; store.Passkeys
// implements it.
type PasskeyStore interface {
	// PasskeyEnrolment returns the user an enrolment code is for.
	PasskeyEnrolment(ctx context.Context, code string) (string, error)
	// AddPasskey stores a passkey, using the code up ("" for a person
	// who used a passkey already).
	AddPasskey(ctx context.Context, code string, p store.Passkey) error
	Passkeys(ctx context.Context) ([]store.Passkey, error)
	UsePasskey(ctx context.Context, id string, credential []byte) error
}

var _ PasskeyStore = store.Passkeys{}

// Routes of passkeys.
const (
	passkeyEnrollPath = "/passkey/enroll"
	passkeyBeginPath  = "/passkey/enroll/begin"
	passkeyFinishPath = "/passkey/enroll/finish"
	passkeyChallenge  = "/passkey/challenge"
	// ceremonyTTL is how long a person has to touch their authenticator.
	ceremonyTTL = 5 * time.Minute
	// maxCeremonies bounds the ceremonies under way kept in memory, and
	// maxSessionCeremonies those of one session (or enrolment code), so
	// that one cannot keep the others' out.
	maxCeremonies        = 1000
	maxSessionCeremonies = 20
)

// decisionPathRE matches the forms that decide: each needs a passkey.
var decisionPathRE = regexp.MustCompile(`^/(approvals/[^/]+/(approve|deny|approve-always)|tools/changes/decide|config/decide)$`)

// passkeys is the UI's side of WebAuthn: the relying party, and the
// ceremonies under way by their challenge.
type passkeys struct {
	st  PasskeyStore
	wa  *webauthn.WebAuthn
	now func() time.Time

	mu         sync.Mutex
	ceremonies map[string]*ceremony
}

// ceremony is a registration or an assertion under way: who may complete
// it, and for what.
type ceremony struct {
	data    webauthn.SessionData
	session string // the session's key that asked ("" for a code's enrolment)
	code    string // the enrolment code it was asked with
	user    string // whom a registration is for
	binding string // the one form an assertion may decide (bindingOf)
	started time.Time
}

func newPasskeys(o Passkeys, now func() time.Time) (*passkeys, error) {
	u, err := url.Parse(o.Origin)
	if err != nil || u.Hostname() == "" || o.Store == nil {
		return nil, fmt.Errorf("web: passkeys need a store and the UI's origin (http://localhost:PORT), not %q", o.Origin)
	}
	wa, err := webauthn.New(&webauthn.Config{
		RPID:          u.Hostname(),
		RPDisplayName: "guard",
		RPOrigins:     []string{o.Origin},
		AuthenticatorSelection: protocol.AuthenticatorSelection{
			ResidentKey:      protocol.ResidentKeyRequirementRequired,
			UserVerification: protocol.VerificationRequired,
		},
		Timeouts: webauthn.TimeoutsConfig{
			Login:        webauthn.TimeoutConfig{Enforce: true, Timeout: ceremonyTTL},
			Registration: webauthn.TimeoutConfig{Enforce: true, Timeout: ceremonyTTL},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("web: passkeys: %w", err)
	}
	return &passkeys{st: o.Store, wa: wa, now: now, ceremonies: map[string]*ceremony{}}, nil
}

// passkeyUser is a person as WebAuthn sees them: their name, a handle
// derived from it, and their credentials.
type passkeyUser struct {
	name  string
	creds []webauthn.Credential
}

func (u passkeyUser) WebAuthnID() []byte {
	sum := sha256.Sum256([]byte("guard passkey user\x00" + u.name))
	return sum[:]
}
func (u passkeyUser) WebAuthnName() string                       { return u.name }
func (u passkeyUser) WebAuthnDisplayName() string                { return u.name }
func (u passkeyUser) WebAuthnCredentials() []webauthn.Credential { return u.creds }

// user returns a person with their stored credentials, and the ids of
// all of them.
func (p *passkeys) user(ctx context.Context, name string) (passkeyUser, error) {
	all, err := p.st.Passkeys(ctx)
	if err != nil {
		return passkeyUser{}, err
	}
	u := passkeyUser{name: name}
	for _, k := range all {
		if k.User != name {
			continue
		}
		var c webauthn.Credential
		if err := json.Unmarshal(k.Credential, &c); err != nil {
			return passkeyUser{}, fmt.Errorf("passkey %s: %w", k.ID, err)
		}
		u.creds = append(u.creds, c)
	}
	return u, nil
}

// keep holds a ceremony until it completes or expires.
func (p *passkeys) keep(c *ceremony) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	for k, v := range p.ceremonies {
		if now.Sub(v.started) > ceremonyTTL {
			delete(p.ceremonies, k)
		}
	}
	mine := 0
	for _, v := range p.ceremonies {
		if v.session == c.session && v.code == c.code {
			mine++
		}
	}
	if len(p.ceremonies) >= maxCeremonies || mine >= maxSessionCeremonies {
		return errors.New("too many passkey requests under way; try again in a few minutes")
	}
	c.started = now
	p.ceremonies[c.data.Challenge] = c
	return nil
}

// take returns the ceremony of a challenge, once.
func (p *passkeys) take(challenge string) (*ceremony, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.ceremonies[challenge]
	delete(p.ceremonies, challenge)
	if !ok || p.now().Sub(c.started) > ceremonyTTL {
		return nil, false
	}
	return c, true
}

// bindingOf is what an assertion is made for: a form's path and fields
// (its CSRF token and the assertion aside), in a canonical order.
func bindingOf(path string, form url.Values) string {
	f := url.Values{}
	for k, v := range form {
		if k != "csrf" && k != "assertion" && k != "path" {
			f[k] = v
		}
	}
	return path + "?" + f.Encode() // Encode sorts by key
}

// passkeyEnrolmentRoute serves the enrolment page and its two steps
// outside the session check: a person may come with the code of guard ui
// enroll alone. Without a code they need a session that used a passkey.
func (s *Server) passkeyEnrolmentRoute(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		if !s.origins.formOriginOK(r) || s.cop.Check(r) != nil {
			s.log.Warn("ui: passkey enrolment from a foreign origin", "origin", r.Header.Get("Origin"))
			plainError(w, "Forbidden: the request did not come from the guard UI's own page.", http.StatusForbidden)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if err := r.ParseForm(); err != nil {
			plainError(w, "Bad request: the form could not be read.", http.StatusBadRequest)
			return
		}
	}
	if (r.Method == http.MethodPost) != (r.URL.Path != passkeyEnrollPath) {
		plainError(w, "Method not allowed.", http.StatusMethodNotAllowed)
		return
	}
	ctx := r.Context()
	code := r.FormValue("code")
	var user string
	var sess session
	if code != "" {
		u, err := s.passkeys.st.PasskeyEnrolment(ctx, code)
		if err != nil {
			s.log.Warn("ui: passkey enrolment with an unknown or expired code")
			plainError(w, "Forbidden: this enrolment code is unknown, used or expired. Run guard ui enroll again.", http.StatusForbidden)
			return
		}
		user = u
	} else {
		var ok bool
		sess, ok = s.session(r)
		if !ok {
			s.unauthorized(w, r)
			return
		}
		if sess.via != guard.ViaPasskey {
			plainError(w, "Forbidden: a passkey is added from a session that used one (decide once with your passkey), "+
				"or with the code of guard ui enroll.", http.StatusForbidden)
			return
		}
		if r.Method == http.MethodPost && subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf")), []byte(sess.csrf)) != 1 {
			plainError(w, "Forbidden: the form's token does not match this session. Reload the page and try again.", http.StatusForbidden)
			return
		}
		user = sess.user.Subject
	}
	switch r.URL.Path {
	case passkeyEnrollPath:
		s.render(w, r, http.StatusOK, passkeyEnrollPage(user, code, sess.csrf))
	case passkeyBeginPath:
		s.passkeyBegin(w, r, user, code, sess)
	case passkeyFinishPath:
		s.passkeyFinish(w, r, user, code, sess)
	default:
		plainError(w, "Not found.", http.StatusNotFound)
	}
}

// passkeyBegin answers the options of a new passkey for user.
func (s *Server) passkeyBegin(w http.ResponseWriter, r *http.Request, user, code string, sess session) {
	p := s.passkeys
	u, err := p.user(r.Context(), user)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var exclude []protocol.CredentialDescriptor
	for _, c := range u.creds {
		exclude = append(exclude, c.Descriptor())
	}
	opts, data, err := p.wa.BeginRegistration(u, webauthn.WithExclusions(exclude),
		webauthn.WithResidentKeyRequirement(protocol.ResidentKeyRequirementRequired))
	if err != nil {
		s.log.Error("ui: passkey registration", "err", err)
		plainError(w, "Internal error: "+err.Error(), http.StatusInternalServerError)
		return
	}
	if err := p.keep(&ceremony{data: *data, session: sess.key, code: code, user: user}); err != nil {
		plainError(w, "Service unavailable: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	writeJSON(w, opts)
}

// passkeyFinish stores the new passkey, using the code up, and makes the
// browser's session one that used a passkey (a new one for a code).
func (s *Server) passkeyFinish(w http.ResponseWriter, r *http.Request, user, code string, sess session) {
	p := s.passkeys
	parsed, err := protocol.ParseCredentialCreationResponseBytes([]byte(r.PostForm.Get("credential")))
	if err != nil {
		plainError(w, "Bad request: the new passkey could not be read: "+err.Error(), http.StatusBadRequest)
		return
	}
	c, ok := p.take(parsed.Response.CollectedClientData.Challenge)
	if !ok || c.code != code || c.session != sess.key || c.user != user || c.binding != "" {
		s.log.Warn("ui: passkey registration for a challenge not this request's")
		plainError(w, "Forbidden: this passkey was not made for this enrolment. Start again.", http.StatusForbidden)
		return
	}
	u, err := p.user(r.Context(), user)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	cred, err := p.wa.CreateCredential(u, c.data, parsed)
	if err != nil {
		s.log.Warn("ui: passkey registration refused", "err", err)
		plainError(w, "Forbidden: the passkey was refused: "+protocolError(err), http.StatusForbidden)
		return
	}
	b, err := json.Marshal(cred)
	if err != nil {
		plainError(w, "Internal error: "+err.Error(), http.StatusInternalServerError)
		return
	}
	id := base64.RawURLEncoding.EncodeToString(cred.ID)
	if err := p.st.AddPasskey(r.Context(), code, store.Passkey{ID: id, User: user, Credential: b}); err != nil {
		if errors.Is(err, guard.ErrNotFound) {
			plainError(w, "Forbidden: this enrolment code was used meanwhile, or expired. Run guard ui enroll again.", http.StatusForbidden)
			return
		}
		s.fail(w, r, err)
		return
	}
	key := sess.key
	if code != "" {
		sid, err := s.newSession(w, r, http.SameSiteStrictMode)
		if err != nil {
			return
		}
		key = sessionKeyOf(sid)
	}
	s.sessions.setVerified(key, guard.Identity{Subject: user}, guard.ViaPasskey)
	s.log.Info("ui: passkey enrolled", "user", user, "credential", id, "with_code", code != "")
	writeJSON(w, map[string]string{"next": "/"})
}

// passkeyChallengeFor answers the options of an assertion for one form
// (its path and fields), in a session.
func (s *Server) passkeyChallengeFor(w http.ResponseWriter, r *http.Request) {
	p := s.passkeys
	path := r.PostForm.Get("path")
	if !decisionPathRE.MatchString(path) {
		plainError(w, "Bad request: "+path+" does not take a passkey.", http.StatusBadRequest)
		return
	}
	opts, data, err := p.wa.BeginDiscoverableLogin(webauthn.WithUserVerification(protocol.VerificationRequired))
	if err != nil {
		s.log.Error("ui: passkey assertion", "err", err)
		plainError(w, "Internal error: "+err.Error(), http.StatusInternalServerError)
		return
	}
	sess := sessionOf(r.Context())
	if err := p.keep(&ceremony{data: *data, session: sess.key, binding: bindingOf(path, r.PostForm)}); err != nil {
		plainError(w, "Service unavailable: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	writeJSON(w, opts)
}

// errNoPasskey refuses a decision without a valid assertion.
var errNoPasskey = errors.New("this decision needs your passkey")

// verifyDecision checks the assertion a decision's form carries: made in
// this session, for this form, by a stored passkey, with user
// verification. It returns the session with the passkey's person as who
// decides, verified.
func (s *Server) verifyDecision(r *http.Request, sess session) (session, error) {
	p := s.passkeys
	raw := r.PostForm.Get("assertion")
	if raw == "" {
		return sess, fmt.Errorf("%w: none came with the form (the page needs JavaScript and a passkey)", errNoPasskey)
	}
	parsed, err := protocol.ParseCredentialRequestResponseBytes([]byte(raw))
	if err != nil {
		return sess, fmt.Errorf("%w: the assertion could not be read: %s", errNoPasskey, protocolError(err))
	}
	c, ok := p.take(parsed.Response.CollectedClientData.Challenge)
	if !ok || c.session != sess.key || c.binding == "" || c.binding != bindingOf(r.URL.Path, r.PostForm) {
		return sess, fmt.Errorf("%w: the assertion was not made for this decision in this session (or expired)", errNoPasskey)
	}
	all, err := p.st.Passkeys(r.Context())
	if err != nil {
		return sess, err
	}
	var found *store.Passkey
	handler := func(rawID, userHandle []byte) (webauthn.User, error) {
		id := base64.RawURLEncoding.EncodeToString(rawID)
		i := slices.IndexFunc(all, func(k store.Passkey) bool { return k.ID == id })
		if i < 0 {
			return nil, errors.New("unknown passkey")
		}
		found = &all[i]
		u, err := p.user(r.Context(), found.User)
		if err != nil {
			return nil, err
		}
		if subtle.ConstantTimeCompare(u.WebAuthnID(), userHandle) != 1 {
			return nil, errors.New("the passkey's user handle is not its user's")
		}
		return u, nil
	}
	cred, err := p.wa.ValidateDiscoverableLogin(handler, c.data, parsed)
	if err != nil {
		return sess, fmt.Errorf("%w: the passkey was refused: %s", errNoPasskey, protocolError(err))
	}
	if cred.Authenticator.CloneWarning {
		return sess, fmt.Errorf("%w: the passkey's signature counter went back: it may have been copied", errNoPasskey)
	}
	b, err := json.Marshal(cred)
	if err != nil {
		return sess, err
	}
	if err := p.st.UsePasskey(r.Context(), found.ID, b); err != nil {
		return sess, err
	}
	user := guard.Identity{Subject: found.User}
	s.sessions.setVerified(sess.key, user, guard.ViaPasskey)
	sess.name, sess.user, sess.via = user.Name(), user, guard.ViaPasskey
	return sess, nil
}

// protocolError is a WebAuthn error with its details, for people.
func protocolError(err error) string {
	var pe *protocol.Error
	if errors.As(err, &pe) && pe.DevInfo != "" {
		return strings.TrimSuffix(pe.Details, ".") + ": " + pe.DevInfo
	}
	return err.Error()
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
