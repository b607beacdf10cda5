// Package web is guard's browser UI: a server-rendered page of the calls
// waiting for a person (approve, deny, or approve and allow the tool from now
// on), the tool definitions waiting for a review, the configuration change
// waiting for a person (apply or dismiss), the activity recorded in the
// audit log and the servers' tools.
//
// Pages are templ components rendered on the server; every decision is a
// plain HTML form (POST, then a redirect), so the UI works without
// JavaScript. The one embedded script adds keyboard shortcuts and live
// updates: a WebSocket (/ws) tells the page that something changed, and the
// page fetches the fragment that shows it. Changes are found by polling the
// store (other processes share the database), in one goroutine per Server,
// started by Run; a store that tells of changes as they commit (PostgreSQL,
// whose replicas share the database) wakes that goroutine at once.
//
// Security: a person logs in with the UI token (GET /login?token=...), which
// is exchanged for a session cookie, or through the organisation's identity
// provider (/login/oidc, see OIDC), as a verified identity; every other
// route needs that session. With Passkeys, every decision also needs the
// approver's passkey, asked for that one decision.
// Every request's Host header must be on the allowlist (DNS rebinding);
// every POST and the WebSocket upgrade must come from the page's own
// Origin, exactly (Referrer-Policy same-origin, so that browsers send a
// same-origin form's real Origin rather than "null"), and every POST must
// carry the session's CSRF token. Responses
// carry a strict Content-Security-Policy: no inline script or style.
package web

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/approvals"
	"github.com/guard-mcp/guard/store"
)

// The templates' Go code is generated and committed; without the version
// line templ would otherwise put above the package clause, the package
// keeps one doc comment.
//go:generate go tool templ generate -include-version=false

// Store is where the UI finds the configuration changes and the audit
// log's verification; *store.DB implements it.
type Store interface {
	// Configs keeps the configuration changes that wait for a person:
	// the UI shows the pending one and applies or dismisses it (a change
	// that is not pending is refused, *store.NotPendingError).
	Configs() store.Configs
	// Verifier verifies the audit log: its LastVerification, the last
	// scheduled one (nil when there was none), is shown on every page
	// when it failed.
	Verifier() store.Verifier
}

// Calls is what the UI reads of the audit log; store.Reader implements
// it.
type Calls interface {
	// Query calls fn for each recorded invocation matching f, newest first.
	Query(ctx context.Context, f store.Filter, fn func(*store.Call) error) error
}

var _ Calls = store.Reader{}

// Tools is what the UI reads and decides on tool reviews with;
// store.Catalog implements it.
type Tools interface {
	CountReviews(ctx context.Context, state string) (int, error)
	// Tools returns the latest definition of each tool of a server ("" for
	// every server).
	Tools(ctx context.Context, server string) ([]guard.Tool, error)
	// ToolByPin returns one definition of a tool, nil when unknown.
	ToolByPin(ctx context.Context, server, name, pin string) (*guard.Tool, error)
	Reviews(ctx context.Context, server string) ([]*guard.Review, error)
	Review(ctx context.Context, server, name, pin string) (*guard.Review, error)
	// AcceptedTool returns the definition accepted most recently, nil when
	// none is.
	AcceptedTool(ctx context.Context, server, name string) (*guard.Tool, error)
	DecideTool(ctx context.Context, server, name, pin string, accept bool, by string) (*guard.Review, error)
}

var _ Tools = store.Catalog{}

// Holds is what the UI reads of held calls; store.Holds implements it.
type Holds interface {
	// Approvals lists approvals in a state ("pending"), or all for "".
	Approvals(ctx context.Context, state string) ([]*guard.Approval, error)
	Approval(ctx context.Context, id string) (*guard.Approval, error)
	// ApprovalsByID lists the approvals with these ids (at most 10,000),
	// leaving out those none has.
	ApprovalsByID(ctx context.Context, ids []string) ([]*guard.Approval, error)
	// CountApprovals counts the approvals in a state and names the newest.
	CountApprovals(ctx context.Context, state string) (n int, newest string, err error)
}

var _ Holds = store.Holds{}

// changeNotifier is a Store that tells of changes to held calls, tool
// reviews and configuration changes as they commit, made by any process
// sharing the database: *store.DB does on PostgreSQL. Run reads the store
// at once on each rather than at its next poll. A nil channel (SQLite)
// means the poll alone finds changes.
type changeNotifier interface {
	Changes(ctx context.Context) <-chan struct{}
}

var _ changeNotifier = (*store.DB)(nil)

// Decider records a person's review of a held call, with their identity
// and how it was verified, and applies the approval's rules (who may, how
// many must, how they must have been verified), running a step of its own
// with the review that decides, under its lock, once the approval is
// known to be pending: "Approve, and allow from now on" writes its rule
// there. *approvals.Manager implements it.
type Decider = approvals.ReviewDecider

var _ Decider = (*approvals.Manager)(nil)

// Options configure a Server.
type Options struct {
	Store   Store
	Calls   Calls // the calls in the audit log
	Holds   Holds // the held calls
	Tools   Tools // the tools' definitions and their reviews
	Decider Decider
	// Token is the login token (guard ui url). It is compared in constant
	// time, and never logged or rendered.
	Token string
	// NoTokenLogin turns the token link off (ui.token_login: false): it
	// answers 403, and people log in through OIDC only.
	NoTokenLogin bool
	// OIDC, when set, logs people in through the organisation's identity
	// provider (/login/oidc), as verified identities.
	OIDC *OIDC
	// Passkeys, when set, make every decision need the approver's
	// passkey (ui.passkey: required).
	Passkeys *Passkeys
	// AllowedHosts are the Host headers the UI answers to, such as
	// "127.0.0.1:8931" and "localhost:8931"; any other gets 403.
	AllowedHosts []string
	// PublicOrigin, when set, is the origin browsers reach the UI at
	// through a load balancer or TLS terminator (public_url, such as
	// "https://guard.example.com"): accepted as the UI's own Origin
	// although this connection's scheme may differ. Its host must be
	// among AllowedHosts.
	PublicOrigin string
	// AllowAlways writes a rule that allows the tool of a held call from
	// now on ("approve, and allow this tool from now on"), learned from
	// its approval; nil hides that choice.
	AllowAlways func(a *guard.Approval, by string) error
	// Explain says what the policy in force does with a call to a tool
	// (its arguments aside), for the servers and tools page; nil hides it.
	Explain func(t guard.Tool, r *guard.Review) string
	Logger  *slog.Logger
	Now     func() time.Time
	// PollEvery is how often Run reads the store for changes while a page
	// is open (default 100ms). Where the store tells of changes (see
	// changeNotifier), Run also reads it on each; the poll still finds
	// new activity, which is not announced, and anything missed.
	PollEvery time.Duration
	// SessionIdle is how long an unused session lasts (default 12h).
	SessionIdle time.Duration
	// ActivityLimit is how many calls the activity page shows by default
	// (default 100).
	ActivityLimit int
	// Undelivered lists the receivers of the announcements of new
	// holds (notify:) whose last delivery failed, for a line on the
	// Pending page; nil shows none.
	Undelivered func(ctx context.Context) ([]string, error)
}

// Server is the UI: an http.Handler. Call Run for live updates.
type Server struct {
	opts     Options
	log      *slog.Logger
	origins  origins // the Host names and the origin the UI answers to
	tokenSum [sha256.Size]byte
	sessions *sessions
	oidc     *oidcLogin // nil without OIDC
	passkeys *passkeys  // nil without passkeys
	hub      *hub
	mux      *http.ServeMux
	cop      *http.CrossOriginProtection
	upgrader websocket.Upgrader
	static   http.Handler
	views    *views
}

//go:embed static
var staticFS embed.FS

// Security headers sent with every response.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
	"img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

const sessionCookie = "guard_session"

// New returns the UI handler.
func New(o Options) (*Server, error) {
	if o.Store == nil || o.Calls == nil || o.Holds == nil || o.Tools == nil || o.Decider == nil {
		return nil, errors.New("web: a store, the calls, the held calls, the tools and a decider are needed")
	}
	if o.Token == "" {
		return nil, errors.New("web: no login token")
	}
	if len(o.AllowedHosts) == 0 {
		return nil, errors.New("web: no allowed hosts")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.PollEvery <= 0 {
		o.PollEvery = 100 * time.Millisecond
	}
	if o.SessionIdle <= 0 {
		o.SessionIdle = 12 * time.Hour
	}
	if o.ActivityLimit <= 0 {
		o.ActivityLimit = 100
	}
	s := &Server{
		opts:     o,
		log:      o.Logger,
		origins:  origins{hosts: make(map[string]bool, len(o.AllowedHosts)), public: o.PublicOrigin},
		tokenSum: sha256.Sum256([]byte(o.Token)),
		sessions: newSessions(o.SessionIdle, o.Now),
		hub:      newHub(),
		cop:      http.NewCrossOriginProtection(),
	}
	for _, h := range o.AllowedHosts {
		s.origins.hosts[strings.ToLower(h)] = true
	}
	if o.NoTokenLogin && o.OIDC == nil {
		return nil, errors.New("web: with the token link off, OIDC is the way in: none is configured")
	}
	if o.OIDC != nil {
		var err error
		if s.oidc, err = newOIDCLogin(*o.OIDC, o.Now); err != nil {
			return nil, err
		}
		if u, _ := url.Parse(o.OIDC.RedirectURL); !s.origins.hosts[strings.ToLower(u.Host)] {
			return nil, fmt.Errorf("web: the OIDC redirect URL's host %s is not among the allowed hosts", u.Host)
		}
	}
	if o.Passkeys != nil {
		var err error
		if s.passkeys, err = newPasskeys(*o.Passkeys, o.Now); err != nil {
			return nil, err
		}
		if u, _ := url.Parse(o.Passkeys.Origin); !s.origins.hosts[strings.ToLower(u.Host)] {
			return nil, fmt.Errorf("web: the passkeys' origin %s is not among the allowed hosts", o.Passkeys.Origin)
		}
	}
	s.views = &views{opts: &s.opts, passkeys: s.passkeys}
	s.upgrader = websocket.Upgrader{
		ReadBufferSize:  512,
		WriteBufferSize: 1024,
		CheckOrigin:     s.origins.originOK,
	}
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, fmt.Errorf("web: static files: %w", err)
	}
	s.static = http.StripPrefix("/static/", http.FileServerFS(sub))
	s.routes()
	return s, nil
}

func (s *Server) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", s.pendingPage)
	m.HandleFunc("GET /tools/changes", s.changesPage)
	m.HandleFunc("GET /tools", s.toolsPage)
	m.HandleFunc("GET /activity", s.activityPage)
	m.HandleFunc("GET /activity/{id}", s.callPage)
	m.HandleFunc("GET /name", s.namePage)
	m.HandleFunc("POST /name", s.setName)
	m.HandleFunc("POST /logout", s.logout)
	m.HandleFunc("POST /approvals/{id}/approve", s.decide(actionApprove))
	m.HandleFunc("POST /approvals/{id}/deny", s.decide(actionDeny))
	m.HandleFunc("POST /approvals/{id}/approve-always", s.decide(actionApproveAlways))
	m.HandleFunc("POST /tools/changes/decide", s.decideTool)
	m.HandleFunc("GET /config", s.configPage)
	m.HandleFunc("POST /config/decide", s.decideConfig)
	m.HandleFunc("GET /fragments/config", s.configFragment)
	m.HandleFunc("GET /fragments/pending", s.pendingFragment)
	m.HandleFunc("GET /fragments/activity", s.activityFragment)
	m.HandleFunc("GET /fragments/changes", s.changesFragment)
	m.HandleFunc("GET /fragments/tools", s.toolsFragment)
	m.HandleFunc("GET /fragments/nav", s.navFragment)
	m.HandleFunc("GET /ws", s.serveWS)
	if s.passkeys != nil {
		m.HandleFunc("POST "+passkeyChallenge, s.passkeyChallengeFor)
	}
	m.Handle("GET /static/", s.static)
	s.mux = m
}

// ServeHTTP checks the Host header, the session and, for a state-changing
// request, its Origin and CSRF token, then serves the route.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Frame-Options", "DENY")
	if !s.origins.hosts[strings.ToLower(r.Host)] {
		s.log.Warn("ui: request for a host not allowed", "host", r.Host, "path", r.URL.Path)
		plainError(w, "Forbidden: this host name is not one the guard UI answers to.", http.StatusForbidden)
		return
	}
	switch {
	case r.URL.Path == "/login":
		s.login(w, r)
		return
	case r.URL.Path == oidcLoginPath && s.oidc != nil:
		s.oidcStart(w, r)
		return
	case r.URL.Path == oidcCallbackPath && s.oidc != nil:
		s.oidcCallback(w, r)
		return
	case s.passkeys != nil && (r.URL.Path == passkeyEnrollPath || r.URL.Path == passkeyBeginPath || r.URL.Path == passkeyFinishPath):
		s.passkeyEnrolmentRoute(w, r)
		return
	case s.passkeys != nil && r.URL.Path == "/static/passkey.js" && r.Method == http.MethodGet:
		// The enrolment page's script, for a person who has only the
		// code of guard ui enroll yet.
		s.static.ServeHTTP(w, r)
		return
	}
	sess, ok := s.session(r)
	if !ok {
		s.unauthorized(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		if !s.origins.formOriginOK(r) {
			s.log.Warn("ui: state-changing request from a foreign origin", "origin", r.Header.Get("Origin"), "path", r.URL.Path)
			plainError(w, "Forbidden: the request did not come from the guard UI's own page.", http.StatusForbidden)
			return
		}
		if err := s.cop.Check(r); err != nil {
			plainError(w, "Forbidden: cross-origin request.", http.StatusForbidden)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if err := r.ParseForm(); err != nil {
			plainError(w, "Bad request: the form could not be read.", http.StatusBadRequest)
			return
		}
		if subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf")), []byte(sess.csrf)) != 1 {
			s.log.Warn("ui: form with a bad CSRF token", "path", r.URL.Path)
			plainError(w, "Forbidden: the form's token does not match this session. Reload the page and try again.", http.StatusForbidden)
			return
		}
		if s.passkeys != nil && decisionPathRE.MatchString(r.URL.Path) {
			var err error
			if sess, err = s.verifyDecision(r, sess); err != nil {
				s.log.Warn("ui: decision refused: no valid passkey", "path", r.URL.Path, "why", err)
				s.render(w, r, http.StatusForbidden, messagePage("Passkey needed", "Not recorded: "+err.Error()+"."))
				return
			}
		}
	}
	s.mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, sess)))
}

// origins are the Host names the UI answers to and its public origin
// (Options.PublicOrigin): what a request's Host and Origin are checked
// against.
type origins struct {
	hosts  map[string]bool // lower case
	public string
}

// originOK says whether the request's Origin is the UI's own: the scheme
// of this connection and an allowed Host, exactly, or the public origin.
func (o origins) originOK(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" || !o.hosts[strings.ToLower(r.Host)] {
		return false
	}
	if o.public != "" && strings.EqualFold(origin, o.public) {
		return true
	}
	scheme := "http://"
	if r.TLS != nil {
		scheme = "https://"
	}
	return strings.EqualFold(origin, scheme+r.Host)
}

// secure says whether the browser reached the UI over HTTPS: this
// connection, or the public origin's terminator in front of it.
func (o origins) secure(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	host, ok := strings.CutPrefix(strings.ToLower(o.public), "https://")
	return ok && strings.TrimSuffix(strings.ToLower(r.Host), ":443") == host
}

// formOriginOK is originOK for a form the UI's page sent: its Origin must
// be exactly the UI's own ("null" never passes).
func (o origins) formOriginOK(r *http.Request) bool { return o.originOK(r) }

// login exchanges the token for a session cookie and sends the browser to
// the pending page, so that the token leaves the address bar. With the
// token link off, it says to log in through the identity provider.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		plainError(w, "Method not allowed.", http.StatusMethodNotAllowed)
		return
	}
	if s.opts.NoTokenLogin {
		s.log.Warn("ui: login with the token link, which is off")
		plainError(w, "Forbidden: the token link is off (ui.token_login: false). Log in through the identity provider at "+oidcLoginPath+".",
			http.StatusForbidden)
		return
	}
	sum := sha256.Sum256([]byte(r.URL.Query().Get("token")))
	if subtle.ConstantTimeCompare(sum[:], s.tokenSum[:]) != 1 {
		s.log.Warn("ui: login with a wrong token")
		s.unauthorized(w, r)
		return
	}
	if _, err := s.newSession(w, r, http.SameSiteStrictMode); err != nil {
		return
	}
	s.log.Info("ui: login")
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// newSession starts a session, ending this browser's previous one, and
// sets its cookie; it answers the request itself when it fails.
func (s *Server) newSession(w http.ResponseWriter, r *http.Request, sameSite http.SameSite) (string, error) {
	if c, err := r.Cookie(sessionCookie); err == nil {
		s.sessions.remove(c.Value)
	}
	id, err := s.sessions.create()
	if err != nil {
		s.log.Error("ui: new session", "err", err)
		plainError(w, "Internal error: no session could be made.", http.StatusInternalServerError)
		return "", err
	}
	http.SetCookie(w, &http.Cookie{
		Name:     sessionCookie,
		Value:    id,
		Path:     "/",
		HttpOnly: true,
		Secure:   s.origins.secure(r),
		SameSite: sameSite,
	})
	return id, nil
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(sessionCookie); err == nil {
		s.sessions.remove(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		Secure: s.origins.secure(r), SameSite: http.SameSiteStrictMode})
	s.unauthorized(w, r)
}

// session returns the request's session, marking it used unless the
// request is the page's own live update (a fragment, the WebSocket): a
// page left open does not keep its session alive.
func (s *Server) session(r *http.Request) (session, bool) {
	c, err := r.Cookie(sessionCookie)
	if err != nil || c.Value == "" {
		return session{}, false
	}
	background := strings.HasPrefix(r.URL.Path, "/fragments/") || r.URL.Path == "/ws"
	return s.sessions.get(c.Value, !background)
}

type sessionKey struct{}

// sessionOf returns the session ServeHTTP checked.
func sessionOf(ctx context.Context) session {
	sess, _ := ctx.Value(sessionKey{}).(session)
	return sess
}

func (s *Server) unauthorized(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusUnauthorized)
	var issuer string
	if s.oidc != nil {
		issuer = s.oidc.cfg.Issuer
	}
	_ = unauthorizedPage(issuer, !s.opts.NoTokenLogin).Render(r.Context(), w)
}

// plainError answers with a short text, for refusals before any page.
func plainError(w http.ResponseWriter, msg string, code int) {
	http.Error(w, msg, code)
}
