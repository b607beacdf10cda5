// Package streamable is guard's Streamable HTTP front: the endpoint MCP
// clients reach over HTTP. It keeps their sessions (Mcp-Session-Id, each
// with a relay session of its own, and on 2026-07-28, where there are no
// sessions, one relay session per caller), routes what the relay writes to
// the response streams of the requests it answers, writes those streams as
// server-sent events (resumable by event id), applies the 2026-07-28 rules
// for headers, status codes and cancellation, checks Host and Origin
// against DNS rebinding, and bounds sessions, bodies and the time a body
// may take. It imports proxy, and tells the relay when a client went away
// (proxy.Departures, proxy.InputEnder); what runs a session's server is a
// hook (package proxy/stdio, proxy/remote, the aggregate).
package streamable

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/hosts"
	"github.com/guard-mcp/guard/httplimit"
	"github.com/guard-mcp/guard/proxy"
	"github.com/guard-mcp/guard/proxy/mcpheader"
	"github.com/guard-mcp/guard/wire"
)

// Options configure a Server: one wrapped server, reached by
// clients over Streamable HTTP, run as a stdio child per client session.
type Options struct {
	// Name is the server's name; its endpoint is /mcp/Name.
	Name string
	// Child runs each client session's server as a child process
	// (package proxy/stdio: Stdio.Serve), relaying between it and conn,
	// the session's client, through a relay session with options opts,
	// until it exits. It sends on started, once, nil when the server runs
	// or the error that kept it from starting, and returns the server's
	// exit status, or an error when it did not run.
	Child func(ctx context.Context, opts proxy.Options, conn proxy.Conn, started chan<- error) (int, error)
	// Remote, when set, serves each client session with a server reached
	// over HTTP instead (package proxy/remote: remote.Run), relaying
	// between it and conn, the session's client, through a relay session
	// with options opts, until conn's input ends: each client session
	// gets its own upstream session, with the credentials of c, the
	// caller that started it, where the upstream takes a caller's.
	Remote func(ctx context.Context, opts proxy.Options, c Caller, conn proxy.Conn) error
	// Run, when set, serves a new client session itself (the aggregate
	// endpoint) instead of Child or Remote, relaying with conn until its
	// input ends.
	Run func(ctx context.Context, c Caller, conn proxy.Conn) error
	// Session returns the relay options of a new client session, which
	// belongs to caller c (zero without authentication).
	Session func(c Caller) proxy.Options
	// Authenticate, when set, finds who sent a request from its
	// Authorization header, or refuses it.
	Authenticate func(r *http.Request) (Caller, *AuthError)
	// AllowedHosts are the Host headers answered (entries of package
	// hosts: names, name:port, *.suffix); any other gets 403.
	// Origins, when a request carries one, must be http(s)://HOST of one.
	AllowedHosts []string
	// MaxBody bounds a request body (default 64 MiB).
	MaxBody int64
	// BodyTimeout bounds how long a client may take to send a request's
	// body once its headers are in (default 30s), every request's,
	// those refused before their body is read included: a body that
	// trickles in is cut. Only reading the request is bounded, never
	// the response streams.
	BodyTimeout time.Duration
	// Sessions, when set, bounds the sessions (on 2026-07-28, a caller's
	// requests in flight) of every endpoint that shares it: past it, a
	// request is answered 503.
	Sessions *SessionLimit
	// SessionIdle ends a session no request has used for that long
	// (default 30m), so that a client that never says DELETE does not keep
	// a server process forever.
	SessionIdle time.Duration
	// ResumeWithin is how long a response stream that dropped while a
	// request of it was held may take to be resumed (Last-Event-ID)
	// before the call's client counts as gone (default 10s): its hold is
	// then withdrawn, or marked as its client gone under approval.scope:
	// any.
	ResumeWithin time.Duration
	// Logger gets the front's log (default: discarded).
	Logger *slog.Logger
	// TraceContext, when set (guard traces), puts a request's W3C trace
	// context headers (traceparent, tracestate) in the params._meta of
	// each request of its body that carries none there, where the relay
	// reads a request's trace context.
	TraceContext bool
}

// Caller is who sent a request to the HTTP front, as Authenticate found
// it. A session belongs to the caller that started it: another caller's
// requests do not find it.
type Caller struct {
	// Client names the client: a static token's name, or the OAuth client
	// an access token was issued to; "" when nothing says.
	Client string
	// User is who an access token speaks for; zero for a static token, or
	// without authentication.
	User guard.Identity
	// Token returns the access token of the latest request of the
	// caller's session (a client refreshes its token as a long session
	// goes on), for an exchange at the identity provider (RFC 8693) only:
	// it never travels upstream. nil for a static token.
	Token func() string
}

// key identifies whose a session is.
func (c Caller) key() string { return c.Client + "\x00" + c.User.Subject }

// AuthError refuses a request: its status (401, 403, 503), the
// WWW-Authenticate challenge that goes with it, and what the body says.
type AuthError struct {
	Status    int
	Challenge string
	Message   string
}

// Error is what the body says.
func (e *AuthError) Error() string { return e.Message }

// Server serves one wrapped server over Streamable HTTP: POST carries
// the client's messages (answered as JSON or as an SSE stream), GET opens
// the stream of the server's messages that belong to no request, DELETE
// ends the session. Each session (Mcp-Session-Id) runs its own server
// process behind its own relay session, so policy, holds and the audit
// work exactly as on stdio.
type Server struct {
	opts    Options
	hosts   hostCheck
	handler http.Handler // serve, its reading bounded (BodyTimeout)

	mu       sync.Mutex
	sessions map[string]*httpSession
	shared   map[string]*httpSession // 2026-07-28, by Caller.key
	closed   bool

	reapOnce sync.Once
	headers  mcpheader.Tools // x-mcp-header arguments, for 2026-07-28 requests
}

// NewServer returns the handler of one server's endpoint.
func NewServer(o Options) *Server {
	if o.MaxBody <= 0 {
		o.MaxBody = 64 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.SessionIdle <= 0 {
		o.SessionIdle = 30 * time.Minute
	}
	if o.BodyTimeout <= 0 {
		o.BodyTimeout = 30 * time.Second
	}
	h := &Server{opts: o, hosts: newHostCheck(o.AllowedHosts), sessions: map[string]*httpSession{}, shared: map[string]*httpSession{}}
	h.handler = httplimit.Bound(o.BodyTimeout, http.HandlerFunc(h.serve))
	return h
}

// hostCheck is the allowlist of Host headers (against DNS rebinding).
type hostCheck struct{ hosts.List }

func newHostCheck(allowed []string) hostCheck { return hostCheck{hosts.New(allowed...)} }

// CheckHosts serves next only for a request whose Host is one of allowed
// (entries of package hosts: names, name:port, *.suffix) and whose Origin,
// when sent, is http(s)://HOST of one (403 otherwise).
func CheckHosts(allowed []string, next http.Handler) http.Handler {
	hc := newHostCheck(allowed)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hc.allow(w, r) {
			next.ServeHTTP(w, r)
		}
	})
}

// httpSession is one client session: a relay session whose client Conn
// takes the messages of the session's POSTs and hands what the relay
// writes to the router, which gives it to the HTTP streams.
type httpSession struct {
	used   atomic.Int64 // unix nanoseconds of the last request
	id     string
	caller Caller // who started it; its Token reads token
	token  atomic.Pointer[string]
	writeM sync.Mutex
	in     *proxy.Inbox // the client's messages, in the order POSTed
	router *router
	done   chan struct{} // the session's relay ended
	// ended is why its input was ended (see end).
	ended atomic.Pointer[string]
}

// frontConn is the client of an HTTP session as its relay sees it.
type frontConn struct{ s *httpSession }

func (c frontConn) Read(ctx context.Context) (wire.Message, error) {
	return c.s.in.Take(ctx)
}

func (c frontConn) Write(_ context.Context, m wire.Message) error {
	c.s.router.deliver(m)
	return nil
}

// Close does nothing: the session's streams end when its relay returns.
func (c frontConn) Close() error { return nil }

// The relay learns from the client Conn when its client went away.
var (
	_ proxy.Departures = frontConn{}
	_ proxy.InputEnder = frontConn{}
)

// Departed reports requests whose response stream dropped and was not
// resumed in time: their client is gone.
func (c frontConn) Departed() <-chan proxy.Departure { return c.s.router.gone }

// InputEnded says why the session's input ended: its client went (DELETE,
// expiry), or guard serve is stopping, which is not the client's going.
func (c frontConn) InputEnded() (string, bool) {
	if r := c.s.ended.Load(); r != nil && *r != "" {
		return *r, true
	}
	return "", false
}

// end ends the session's input; reason says why its client is gone, ""
// when it is not (guard serve stops).
func (s *httpSession) end(reason string) {
	s.ended.CompareAndSwap(nil, &reason)
	s.in.Close()
}

// Close ends every session: their servers get their stdin closed.
func (h *Server) Close() {
	h.mu.Lock()
	h.closed = true
	ss := make([]*httpSession, 0, len(h.sessions)+len(h.shared))
	for _, s := range h.sessions {
		ss = append(ss, s)
	}
	for _, s := range h.shared {
		ss = append(ss, s)
	}
	h.mu.Unlock()
	for _, s := range ss {
		// Not the clients' going: they are still there, and their held
		// calls are answered as at the end of approval.wait.
		s.end("")
	}
	for _, s := range ss {
		<-s.done
	}
}

// allow refuses a foreign Host (DNS rebinding) or Origin.
func (hc hostCheck) allow(w http.ResponseWriter, r *http.Request) bool {
	if !hc.Allows(r.Host) {
		http.Error(w, "Forbidden: unknown Host", http.StatusForbidden)
		return false
	}
	if o := r.Header.Get("Origin"); o != "" && !hc.AllowsOrigin(o) {
		http.Error(w, "Forbidden: foreign Origin", http.StatusForbidden)
		return false
	}
	return true
}

type callerKey struct{}

// ServeHTTP serves one request, the reading of its body bounded from the
// start: a request refused before its body is read (a foreign Host, no
// token) must not hold its connection either.
func (h *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.handler.ServeHTTP(w, r) }

func (h *Server) serve(w http.ResponseWriter, r *http.Request) {
	if !h.hosts.allow(w, r) {
		return
	}
	if h.opts.Authenticate != nil {
		c, refused := h.opts.Authenticate(r)
		if refused != nil {
			if refused.Challenge != "" {
				w.Header().Set("WWW-Authenticate", refused.Challenge)
			}
			jsonRPCError(w, refused.Status, wire.CodeInvalidRequest, refused.Message)
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), callerKey{}, c))
	}
	switch r.Method {
	case http.MethodPost:
		h.post(w, r)
	case http.MethodGet:
		h.get(w, r)
	case http.MethodDelete:
		h.delete(w, r)
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		http.Error(w, "Method not allowed", http.StatusMethodNotAllowed)
	}
}

// codeBusy is the JSON-RPC error of a request refused past max_sessions:
// one of the codes the specification leaves to servers (-32000 to
// -32099).
const codeBusy = -32000

// refuseStart answers the requests of a POST whose session could not be
// started: 503 past the sessions' limit (*LimitError), else 500 saying
// why the server could not be started, with the id of the request when
// there is one (initialize).
func refuseStart(w http.ResponseWriter, requests []wire.Message, err error) {
	var id []byte
	if len(requests) == 1 {
		id = requests[0].ID
	}
	status, code, msg := http.StatusInternalServerError, wire.CodeInternalError, "The server could not be started: "+err.Error()
	if le := (*LimitError)(nil); errors.As(err, &le) {
		status, code, msg = http.StatusServiceUnavailable, codeBusy, le.Message
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(wire.Refusal{Code: code, Text: msg}.Answer(id))
}

func jsonRPCError(w http.ResponseWriter, status, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(wire.Refusal{Code: code, Text: msg}.Answer(nil))
}

// session returns the request's session; a session belongs to the caller
// (a static token's client, an access token's client and subject) that
// started it, and is not found for another.
func (h *Server) session(r *http.Request) *httpSession {
	id := r.Header.Get("Mcp-Session-Id")
	if id == "" {
		return nil
	}
	c := callerOf(r)
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.sessions[id]
	if s != nil && s.caller.key() != c.key() {
		return nil
	}
	if s != nil {
		s.used.Store(time.Now().UnixNano())
		s.noteToken(c)
	}
	return s
}

func callerOf(r *http.Request) Caller {
	c, _ := r.Context().Value(callerKey{}).(Caller)
	return c
}

// noteToken keeps the access token of the caller's latest request.
func (s *httpSession) noteToken(c Caller) {
	if c.Token != nil {
		t := c.Token()
		s.token.Store(&t)
	}
}

// latestToken is the session's Caller.Token.
func (s *httpSession) latestToken() string {
	if t := s.token.Load(); t != nil {
		return *t
	}
	return ""
}

// start runs a new session's server behind a relay session, within the
// sessions' limit (a *LimitError past it).
func (h *Server) start(ctx context.Context, caller Caller, stateless bool) (*httpSession, error) {
	release, err := h.opts.Sessions.session(caller.key())
	if err != nil {
		h.opts.Logger.Warn("session refused", "err", err, "client", caller.Client)
		return nil, err
	}
	s := &httpSession{id: uuid.NewString(), in: proxy.NewInbox(), router: newRouter(), done: make(chan struct{})}
	if caller.Token != nil {
		s.noteToken(caller)
		caller.Token = s.latestToken
	}
	s.caller = caller
	conn := frontConn{s}
	s.router.headers = &h.headers
	if h.opts.ResumeWithin > 0 {
		s.router.resumeWithin = h.opts.ResumeWithin
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		release()
		return nil, errors.New("the server is shutting down")
	}
	h.sessions[s.id] = s
	h.mu.Unlock()
	s.used.Store(time.Now().UnixNano())
	h.reapOnce.Do(func() { go h.reap() })
	started := make(chan error, 1)
	go func() {
		defer close(s.done)
		defer release()
		defer func() {
			h.mu.Lock()
			delete(h.sessions, s.id)
			if h.shared[s.caller.key()] == s {
				delete(h.shared, s.caller.key())
			}
			h.mu.Unlock()
			s.router.end()
			s.in.Close()
		}()
		if h.opts.Run != nil {
			started <- nil
			if err := h.opts.Run(context.WithoutCancel(ctx), caller, conn); err != nil {
				h.opts.Logger.Info("session ended", "session", s.id, "err", err)
			}
			return
		}
		opts := h.opts.Session(caller)
		if stateless {
			opts.HoldScope = guard.ClientHold + strings.ReplaceAll(caller.key(), "\x00", "/")
		}
		if h.opts.Remote != nil {
			started <- nil
			if err := h.opts.Remote(context.WithoutCancel(ctx), opts, caller, conn); err != nil {
				h.opts.Logger.Info("session ended", "session", s.id, "err", err)
			}
			return
		}
		if h.opts.Child == nil {
			h.opts.Logger.Error("session's server", "session", s.id, "err", errors.New("the server could not be started: no command"))
			return
		}
		// One process serves every client of the caller here: a server
		// that keeps one listen per connection would let one client's
		// listen silence another's.
		opts.ShareListens = stateless
		code, err := h.opts.Child(context.WithoutCancel(ctx), opts, conn, started)
		if err != nil {
			h.opts.Logger.Error("session's server", "session", s.id, "err", err)
			return
		}
		h.opts.Logger.Info("session's server exited", "session", s.id, "status", code)
	}()
	select {
	case err := <-started:
		if err != nil {
			<-s.done
			return nil, err
		}
	case <-s.done:
		return nil, errors.New("the server could not be started")
	}
	return s, nil
}

// send hands the client's messages to the session's relay, in order.
func (s *httpSession) send(msgs []wire.Message) error {
	s.writeM.Lock()
	defer s.writeM.Unlock()
	for _, m := range msgs {
		if err := s.in.Put(context.Background(), m); err != nil {
			return err
		}
	}
	return nil
}

func (h *Server) post(w http.ResponseWriter, r *http.Request) {
	// A body that trickles in is cut (ServeHTTP bounds the reading): only
	// reading it is bounded, and the response (an SSE stream may last
	// long) is not.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.opts.MaxBody))
	if err == nil {
		// A stream's connection is read in the background (to see the
		// client go): it must not time out. (net/http lifts the bound
		// itself once the body is read; this says it here.)
		_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	}
	if err != nil {
		if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
			jsonRPCError(w, http.StatusRequestEntityTooLarge, wire.CodeInvalidRequest, "Request body too large")
			return
		}
		// The deadline stays passed, so that the server does not read
		// the rest of the body before it closes the connection.
		h.opts.Logger.Warn("request body not read", "err", err)
		w.Header().Set("Connection", "close")
		jsonRPCError(w, http.StatusRequestTimeout, wire.CodeInvalidRequest,
			fmt.Sprintf("Request timeout: the body was not received within %v", h.opts.BodyTimeout))
		return
	}
	body = bytes.TrimSpace(body)
	var parts [][]byte
	batch := len(body) > 0 && body[0] == '['
	if batch {
		if parts, err = wire.SplitBatch(body); err != nil {
			jsonRPCError(w, http.StatusBadRequest, wire.CodeParseError, wire.ParseError(err.Error()).Text)
			return
		}
	} else {
		parts = [][]byte{body}
	}
	var requests []wire.Message
	var cancels []int // parts that are notifications/cancelled
	initialize := false
	msgs := make([]wire.Message, len(parts))
	for i, p := range parts {
		// One line: the relay may pass it to a server on stdio.
		m, err := wire.Parse(proxy.OneLine(p))
		msgs[i] = m
		if err != nil {
			if proxy.TooDeep(err) == wire.KindResponse {
				// An answer to a server's request: the relay answers
				// that request with guard's error in its place (it
				// parses the message again, and refuses it).
				msgs[i] = proxy.Unparsed(m.Raw)
				continue
			}
			if inv := (*wire.InvalidError)(nil); errors.As(err, &inv) {
				// An id no peer reads the same way is not echoed
				// (inv.ID is nil then): the answer carries id null.
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				_, _ = w.Write(wire.InvalidRequest(inv.Reason).Answer(inv.ID))
				return
			}
			jsonRPCError(w, http.StatusBadRequest, wire.CodeParseError, wire.ParseError(err.Error()).Text)
			return
		}
		if m.Kind == wire.KindRequest {
			requests = append(requests, m)
			initialize = initialize || m.Method == "initialize"
		}
		if m.Kind == wire.KindNotification && m.Method == "notifications/cancelled" {
			cancels = append(cancels, i)
		}
	}
	if tp := r.Header.Get("Traceparent"); tp != "" && h.opts.TraceContext {
		for i, m := range msgs {
			if m.Kind == wire.KindRequest {
				if own, _ := proxy.TraceMeta(m.Params); own == "" {
					msgs[i] = proxy.WithTraceMeta(m, tp, r.Header.Get("Tracestate"))
				}
			}
		}
	}
	s := h.session(r)
	modern := s == nil && r.Header.Get("Mcp-Session-Id") == "" && isModern(r, requests, initialize)
	if modern {
		// 2026-07-28: no sessions; the request headers must agree with
		// the body, and the requests share one relay session (ids made
		// unique on the way in, restored on the way out).
		if batch {
			jsonRPCError(w, http.StatusBadRequest, wire.CodeInvalidRequest, "Bad Request: batches are not allowed in this revision")
			return
		}
		if len(requests) == 1 {
			if msg := missingMeta(requests[0]); msg != "" {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				_, _ = w.Write(wire.InvalidParams(msg).Answer(requests[0].ID))
				return
			}
			if msg := h.checkHeaders(r, requests[0]); msg != "" {
				writeHeaderMismatch(w, requests[0].ID, msg)
				return
			}
		}
		if len(requests) > 0 {
			release, err := h.opts.Sessions.request(callerOf(r).key())
			if err != nil {
				h.opts.Logger.Warn("request refused", "err", err, "client", callerOf(r).Client)
				refuseStart(w, requests, err)
				return
			}
			defer release()
		}
		if s, err = h.sharedSession(r.Context(), callerOf(r)); err != nil {
			refuseStart(w, requests, err)
			return
		}
	}
	switch {
	case modern:
	case s == nil && r.Header.Get("Mcp-Session-Id") != "":
		jsonRPCError(w, http.StatusNotFound, wire.CodeInvalidRequest, "Session not found: start a new one with initialize")
		return
	case batch && (s == nil || !s.router.batches()):
		// As on stdio. Without a session the revision is not known
		// yet, and 2025-03-26 does not allow initialize in a batch.
		jsonRPCError(w, http.StatusBadRequest, wire.CodeInvalidRequest, proxy.BatchRefused().Text)
		return
	case s == nil && !initialize:
		jsonRPCError(w, http.StatusBadRequest, wire.CodeInvalidRequest, "Bad Request: no Mcp-Session-Id (send initialize first)")
		return
	case s == nil:
		if s, err = h.start(r.Context(), callerOf(r), false); err != nil {
			refuseStart(w, requests, err)
			return
		}
		w.Header().Set("Mcp-Session-Id", s.id)
	}
	if len(requests) == 0 {
		// Notifications and responses only.
		var ended []string // requests the client cancelled: no answer comes
		if len(cancels) > 0 {
			msgs, ended = s.router.clientCancelled(msgs, cancels, modern)
		}
		if len(msgs) > 0 {
			if err := s.send(msgs); err != nil {
				jsonRPCError(w, http.StatusNotFound, wire.CodeInvalidRequest, "Session ended")
				return
			}
		}
		s.router.cancelled(ended)
		w.WriteHeader(http.StatusAccepted)
		return
	}
	st := s.router.open(requests)
	defer s.router.close(st)
	if modern {
		msgs = s.router.uniqueIDs(st, msgs)
		// 2026-07-28: closing a request's stream cancels the request.
		defer h.cancelUnanswered(s, st)
	}
	if err := s.send(msgs); err != nil {
		jsonRPCError(w, http.StatusNotFound, wire.CodeInvalidRequest, "Session ended")
		return
	}
	if modern && len(requests) == 1 {
		// The answer decides the HTTP status (2026-07-28: an error such
		// as an unknown method is a 404, invalid params a 400); anything
		// before it makes the response a stream.
		first, ok := st.next(r.Context())
		if !ok {
			return
		}
		if fm := first.msg; fm.Kind == wire.KindResponse && (fm.Error != nil || !acceptsSSE(r)) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(statusOf(fm))
			_, _ = w.Write(fm.Raw)
			return
		}
		if acceptsSSE(r) {
			h.streamSSE(w, r, st, &first)
			return
		}
	}
	if acceptsSSE(r) {
		h.streamSSE(w, r, st, nil)
		return
	}
	// JSON: the answers, once all are in.
	var answers [][]byte
	for {
		msg, ok := st.next(r.Context())
		if !ok {
			break
		}
		if msg.msg.Kind == wire.KindResponse {
			answers = append(answers, msg.msg.Raw)
		}
	}
	if len(answers) == 0 {
		jsonRPCError(w, http.StatusInternalServerError, wire.CodeInternalError, "No answer: the session ended")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if !batch {
		_, _ = w.Write(answers[0])
		return
	}
	_, _ = w.Write(proxy.JoinBatch(answers))
}

func (h *Server) get(w http.ResponseWriter, r *http.Request) {
	if !acceptsSSE(r) {
		http.Error(w, "Not Acceptable: GET opens an event stream", http.StatusNotAcceptable)
		return
	}
	s := h.session(r)
	if s == nil {
		jsonRPCError(w, http.StatusNotFound, wire.CodeInvalidRequest, "Session not found")
		return
	}
	if last := r.Header.Get("Last-Event-ID"); last != "" {
		st := s.router.resume(last)
		if st == nil {
			http.Error(w, "Unknown Last-Event-ID", http.StatusNotFound)
			return
		}
		defer s.router.resumed(st)
		h.streamSSE(w, r, st, nil)
		return
	}
	st, ok := s.router.standalone()
	if !ok {
		http.Error(w, "Conflict: this session has its event stream open already", http.StatusConflict)
		return
	}
	defer s.router.detach(st)
	h.streamSSE(w, r, st, nil)
}

func (h *Server) delete(w http.ResponseWriter, r *http.Request) {
	s := h.session(r)
	if s == nil {
		jsonRPCError(w, http.StatusNotFound, wire.CodeInvalidRequest, "Session not found")
		return
	}
	h.mu.Lock()
	delete(h.sessions, s.id)
	h.mu.Unlock()
	s.end(guard.ClientGoneReason + ": it ended its session (DELETE)")
	w.WriteHeader(http.StatusNoContent)
}

// reap ends sessions idle for longer than SessionIdle, unless a stream of
// theirs is still open (a held call, a GET stream).
func (h *Server) reap() {
	every := min(h.opts.SessionIdle/4, time.Minute)
	for {
		time.Sleep(every)
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return
		}
		var idle []*httpSession
		cut := time.Now().Add(-h.opts.SessionIdle)
		for id, s := range h.sessions {
			// The idle clock runs while no stream of the session is
			// read, whether or not requests of it wait (a held
			// call's client may never come back).
			since, idleNow := s.router.idle()
			if idleNow && s.used.Load() < cut.UnixNano() && since.Before(cut) {
				delete(h.sessions, id)
				idle = append(idle, s)
			}
		}
		h.mu.Unlock()
		for _, s := range idle {
			h.opts.Logger.Info("session ended: idle", "session", s.id)
			s.end(fmt.Sprintf("%s: its session expired (none of its streams read for %v)", guard.ClientGoneReason, h.opts.SessionIdle))
		}
	}
}
