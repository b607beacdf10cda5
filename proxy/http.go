package proxy

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/guard-mcp/guard/wire"
)

// HTTPOptions configure an HTTPServer: one wrapped server, reached by
// clients over Streamable HTTP, run as a stdio child per client session.
type HTTPOptions struct {
	// Name is the server's name; its endpoint is /mcp/Name.
	Name string
	// Argv is the server's command line.
	Argv []string
	// Start, when set, starts each session's server process: see
	// Stdio.Start.
	Start func(cmd *exec.Cmd) (*exec.Cmd, error)
	// Env is the environment of its processes (KEY=VALUE); nil inherits
	// guard's.
	Env []string
	// Remote, when its URL is set, is a server reached over Streamable
	// HTTP instead: each client session gets its own upstream session.
	Remote Remote
	// Run, when set, serves a new client session itself (the aggregate
	// endpoint) instead of Argv or Remote, relaying with conn until its
	// input ends.
	Run func(ctx context.Context, client string, conn Conn) error
	// Session returns the relay options of a new client session; client
	// is the name its bearer token authenticated ("" without tokens).
	Session func(client string) Options
	// Authenticate, when set, names the client of a request from its
	// Authorization header, or refuses it (false: 401).
	Authenticate func(r *http.Request) (string, bool)
	// AllowedHosts are the Host headers answered; any other gets 403.
	// Origins, when a request carries one, must be http(s)://HOST of one.
	AllowedHosts []string
	// MaxBody bounds a request body (default 64 MiB).
	MaxBody int64
	// BodyTimeout bounds how long a client may take to send a request's
	// body (default 30s): a body that trickles in is cut. Only reading
	// the request is bounded, never the response streams.
	BodyTimeout time.Duration
	// Grace is how long a session's server has to exit once its session
	// ends (default 5s), as for guard run.
	Grace time.Duration
	// SessionIdle ends a session no request has used for that long
	// (default 30m), so that a client that never says DELETE does not keep
	// a server process forever.
	SessionIdle time.Duration
	Stderr      io.Writer
	Logger      *slog.Logger
}

// HTTPServer serves one wrapped server over Streamable HTTP: POST carries
// the client's messages (answered as JSON or as an SSE stream), GET opens
// the stream of the server's messages that belong to no request, DELETE
// ends the session. Each session (Mcp-Session-Id) runs its own server
// process behind its own relay session, so policy, holds and the audit
// work exactly as on stdio.
type HTTPServer struct {
	opts  HTTPOptions
	hosts hostCheck

	mu       sync.Mutex
	sessions map[string]*httpSession
	shared   map[string]*httpSession // 2026-07-28, by client
	closed   bool

	reapOnce sync.Once
	headers  toolHeaders // x-mcp-header arguments, for 2026-07-28 requests
}

// NewHTTPServer returns the handler of one server's endpoint.
func NewHTTPServer(o HTTPOptions) *HTTPServer {
	if o.MaxBody <= 0 {
		o.MaxBody = 64 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	if o.SessionIdle <= 0 {
		o.SessionIdle = 30 * time.Minute
	}
	if o.BodyTimeout <= 0 {
		o.BodyTimeout = 30 * time.Second
	}
	return &HTTPServer{opts: o, hosts: newHostCheck(o.AllowedHosts), sessions: map[string]*httpSession{}, shared: map[string]*httpSession{}}
}

// hostCheck is the allowlist of Host headers (against DNS rebinding).
type hostCheck map[string]bool

func newHostCheck(hosts []string) hostCheck {
	hc := hostCheck{}
	for _, x := range hosts {
		hc[strings.ToLower(x)] = true
	}
	return hc
}

// CheckHosts serves next only for a request whose Host is one of hosts
// and whose Origin, when sent, is http(s)://HOST of one (403 otherwise):
// every route of guard serve answers only its own names.
func CheckHosts(hosts []string, next http.Handler) http.Handler {
	hc := newHostCheck(hosts)
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
	client string // the token's name that started it
	writeM sync.Mutex
	in     *inbox // the client's messages, in the order POSTed
	router *router
	done   chan struct{} // the session's relay ended
}

// frontConn is the client of an HTTP session as its relay sees it.
type frontConn struct{ s *httpSession }

func (c frontConn) Read(ctx context.Context) (wire.Message, error) {
	m, err := c.s.in.take(ctx)
	if err == nil && m.Kind == 0 {
		return readMessage(m.Raw)
	}
	return m, err
}

func (c frontConn) Write(_ context.Context, m wire.Message) error {
	c.s.router.deliver(m)
	return nil
}

// Close does nothing: the session's streams end when its relay returns.
func (c frontConn) Close() error { return nil }

// Close ends every session: their servers get their stdin closed.
func (h *HTTPServer) Close() {
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
		s.in.close()
	}
	for _, s := range ss {
		<-s.done
	}
}

// allow refuses a foreign Host (DNS rebinding) or Origin.
func (hc hostCheck) allow(w http.ResponseWriter, r *http.Request) bool {
	if !hc[strings.ToLower(r.Host)] {
		http.Error(w, "Forbidden: unknown Host", http.StatusForbidden)
		return false
	}
	if o := r.Header.Get("Origin"); o != "" {
		ok := false
		for host := range hc {
			if strings.EqualFold(o, "http://"+host) || strings.EqualFold(o, "https://"+host) {
				ok = true
			}
		}
		if !ok {
			http.Error(w, "Forbidden: foreign Origin", http.StatusForbidden)
			return false
		}
	}
	return true
}

type clientKey struct{}

func (h *HTTPServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.hosts.allow(w, r) {
		return
	}
	if h.opts.Authenticate != nil {
		name, ok := h.opts.Authenticate(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="guard"`)
			jsonRPCError(w, http.StatusUnauthorized, wire.CodeInvalidRequest, "Unauthorized: a bearer token configured in guard's clients is needed")
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), clientKey{}, name))
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

func jsonRPCError(w http.ResponseWriter, status, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(wire.ErrorResponse(nil, code, msg, nil))
}

// session returns the request's session; a session belongs to the client
// (token) that started it, and is not found for another.
func (h *HTTPServer) session(r *http.Request) *httpSession {
	id := r.Header.Get("Mcp-Session-Id")
	if id == "" {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.sessions[id]
	if s != nil && s.client != clientOf(r) {
		return nil
	}
	if s != nil {
		s.used.Store(time.Now().UnixNano())
	}
	return s
}

func clientOf(r *http.Request) string {
	name, _ := r.Context().Value(clientKey{}).(string)
	return name
}

// start runs a new session's server behind a relay session.
func (h *HTTPServer) start(ctx context.Context, client string) (*httpSession, error) {
	s := &httpSession{id: uuid.NewString(), client: client, in: newInbox(), router: newRouter(), done: make(chan struct{})}
	conn := frontConn{s}
	s.router.headers = &h.headers
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, errors.New("the server is shutting down")
	}
	h.sessions[s.id] = s
	h.mu.Unlock()
	s.used.Store(time.Now().UnixNano())
	h.reapOnce.Do(func() { go h.reap() })
	started := make(chan error, 1)
	go func() {
		defer close(s.done)
		defer func() {
			h.mu.Lock()
			delete(h.sessions, s.id)
			if h.shared[s.client] == s {
				delete(h.shared, s.client)
			}
			h.mu.Unlock()
			s.router.end()
			s.in.close()
		}()
		if h.opts.Run != nil {
			started <- nil
			if err := h.opts.Run(context.WithoutCancel(ctx), client, conn); err != nil {
				h.opts.Logger.Info("session ended", "session", s.id, "err", err)
			}
			return
		}
		opts := h.opts.Session(client)
		if h.opts.Remote.URL != "" {
			started <- nil
			if err := RunRemote(context.WithoutCancel(ctx), opts, h.opts.Remote, conn); err != nil {
				h.opts.Logger.Info("session ended", "session", s.id, "err", err)
			}
			return
		}
		code, err := RunStdio(context.WithoutCancel(ctx), opts, Stdio{Argv: h.opts.Argv, Start: h.opts.Start, Env: h.opts.Env, Stderr: h.opts.Stderr, Grace: h.opts.Grace,
			started: started}, conn)
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
		if err := s.in.put(context.Background(), m); err != nil {
			return err
		}
	}
	return nil
}

func (h *HTTPServer) post(w http.ResponseWriter, r *http.Request) {
	// A body that trickles in is cut: only reading it is bounded, and the
	// response (an SSE stream may last long) is not.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(h.opts.BodyTimeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.opts.MaxBody))
	if err == nil {
		// A stream's connection is read in the background (to see the
		// client go): it must not time out.
		_ = rc.SetReadDeadline(time.Time{})
	}
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		jsonRPCError(w, http.StatusRequestEntityTooLarge, wire.CodeInvalidRequest, "Request body too large")
		return
	case err != nil:
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
	if len(body) > 0 && body[0] == '[' {
		if parts, err = wire.SplitBatch(body); err != nil {
			jsonRPCError(w, http.StatusBadRequest, wire.CodeParseError, "Parse error: "+err.Error())
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
		m, err := wire.Parse(oneLine(p))
		msgs[i] = m
		var inv *wire.InvalidError
		if errors.As(err, &inv) {
			// An id no peer reads the same way is not echoed (inv.ID is
			// nil then): the answer carries id null.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write(wire.ErrorResponse(inv.ID, wire.CodeInvalidRequest, "Invalid request: "+inv.Reason, nil))
			return
		}
		if err != nil {
			jsonRPCError(w, http.StatusBadRequest, wire.CodeParseError, "Parse error: "+err.Error())
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
	s := h.session(r)
	modern := s == nil && r.Header.Get("Mcp-Session-Id") == "" && isModern(r, requests, initialize)
	if modern {
		// 2026-07-28: no sessions; the request headers must agree with
		// the body, and the requests share one relay session (ids made
		// unique on the way in, restored on the way out).
		if len(parts) != 1 {
			jsonRPCError(w, http.StatusBadRequest, wire.CodeInvalidRequest, "Bad Request: batches are not allowed in this revision")
			return
		}
		if len(requests) == 1 {
			if msg := missingMeta(requests[0]); msg != "" {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				_, _ = w.Write(wire.ErrorResponse(requests[0].ID, wire.CodeInvalidParams, "Invalid params: "+msg, nil))
				return
			}
			if msg := h.checkHeaders(r, requests[0]); msg != "" {
				writeHeaderMismatch(w, requests[0].ID, msg)
				return
			}
		}
		if s, err = h.sharedSession(r.Context(), clientOf(r)); err != nil {
			jsonRPCError(w, http.StatusInternalServerError, wire.CodeInternalError, "The server could not be started: "+err.Error())
			return
		}
	}
	switch {
	case modern:
	case s == nil && r.Header.Get("Mcp-Session-Id") != "":
		jsonRPCError(w, http.StatusNotFound, wire.CodeInvalidRequest, "Session not found: start a new one with initialize")
		return
	case s == nil && !initialize:
		jsonRPCError(w, http.StatusBadRequest, wire.CodeInvalidRequest, "Bad Request: no Mcp-Session-Id (send initialize first)")
		return
	case s == nil:
		if s, err = h.start(r.Context(), clientOf(r)); err != nil {
			jsonRPCError(w, http.StatusInternalServerError, wire.CodeInternalError, "The server could not be started: "+err.Error())
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
	if len(parts) == 1 {
		_, _ = w.Write(answers[0])
		return
	}
	_, _ = w.Write(joinBatch(answers))
}

func acceptsSSE(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

// headerDelay is how long a POST's event stream waits for its first event
// before sending its headers alone. Most answers come sooner: the headers
// then go out with the first event, and when that event ends the stream
// (one request, one answer) the whole response is one write. A slower
// answer (a held call, a long tool) does not keep a client that waits for
// the headers of each POST (go-sdk's does) from sending its next message.
const headerDelay = 50 * time.Millisecond

// streamSSE writes a stream's messages as server-sent events until it ends
// or the client goes away. Before 2026-07-28 a client that goes away does
// not cancel its calls (the spec says a disconnect is not a cancellation):
// their answers wait for a resumption (Last-Event-ID). On 2026-07-28 the
// caller cancels them (cancelUnanswered). Events that are ready together
// are written together, and a flush is left to net/http when the stream
// ends after them.
func (h *HTTPServer) streamSSE(w http.ResponseWriter, r *http.Request, st *stream, first *event) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	flush := func() {
		if fl != nil {
			fl.Flush()
		}
	}
	ctx := r.Context()
	var buf []byte
	if first == nil {
		if st.standby {
			// The GET stream: the client learns at once that it is open.
			flush()
		} else {
			e, res := st.wait(ctx, headerDelay)
			switch res {
			case streamEvent:
				first = &e
			case streamEmpty:
				flush()
			default:
				return
			}
		}
	}
	for {
		var msg event
		if first != nil {
			msg, first = *first, nil
		} else {
			var res streamResult
			if msg, res = st.wait(ctx, 0); res != streamEvent {
				return
			}
		}
		for {
			buf = appendEvent(buf[:0], msg)
			if _, err := w.Write(buf); err != nil {
				return
			}
			var res streamResult
			msg, res = st.poll()
			if res == streamEnded {
				return // net/http writes what is buffered, in one piece
			}
			if res == streamEmpty {
				break
			}
		}
		flush()
	}
}

// appendEvent appends one server-sent event.
func appendEvent(b []byte, e event) []byte {
	b = append(b, "id: "...)
	b = append(b, e.id...)
	b = append(b, "\nevent: message\ndata: "...)
	b = append(b, e.msg.Raw...)
	return append(b, "\n\n"...)
}

func (h *HTTPServer) get(w http.ResponseWriter, r *http.Request) {
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

func (h *HTTPServer) delete(w http.ResponseWriter, r *http.Request) {
	s := h.session(r)
	if s == nil {
		jsonRPCError(w, http.StatusNotFound, wire.CodeInvalidRequest, "Session not found")
		return
	}
	h.mu.Lock()
	delete(h.sessions, s.id)
	h.mu.Unlock()
	s.in.close()
	w.WriteHeader(http.StatusNoContent)
}

// event is one message on a stream, with its event id.
type event struct {
	id  string
	msg wire.Message
}

// stream is where the answers to one POST (or the session's standalone
// GET stream) go. Events are kept until the stream ends, for resumption.
type stream struct {
	id      string
	mu      sync.Mutex
	cond    chan struct{} // closed and replaced when an event arrives
	events  []event
	sent    int             // events written to the current reader
	pending map[string]bool // request ids not answered yet
	ended   bool
	standby bool // the standalone stream: never ends by itself
}

func newStream(id string) *stream {
	return &stream{id: id, cond: make(chan struct{}), pending: map[string]bool{}}
}

func (st *stream) push(m wire.Message) {
	st.mu.Lock()
	st.events = append(st.events, event{id: st.id + "-" + strconv.Itoa(len(st.events)+1), msg: m})
	close(st.cond)
	st.cond = make(chan struct{})
	st.mu.Unlock()
}

func (st *stream) finish() {
	st.mu.Lock()
	st.ended = true
	close(st.cond)
	st.cond = make(chan struct{})
	st.mu.Unlock()
}

// streamResult is what a reader of a stream got.
type streamResult int

const (
	streamEvent streamResult = iota // an event
	streamEmpty                     // nothing yet
	streamEnded                     // the stream ended: everything is sent
	streamGone                      // the reader's context ended
)

// next returns the next event for the reader, or false when the stream has
// ended (everything sent) or ctx ended.
func (st *stream) next(ctx context.Context) (event, bool) {
	e, res := st.wait(ctx, 0)
	return e, res == streamEvent
}

// poll returns the next event if there is one, without waiting.
func (st *stream) poll() (event, streamResult) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.sent < len(st.events) {
		e := st.events[st.sent]
		st.sent++
		return e, streamEvent
	}
	if st.ended {
		return event{}, streamEnded
	}
	return event{}, streamEmpty
}

// wait returns the next event, waiting for it at most d (0: without
// limit), or why there is none.
func (st *stream) wait(ctx context.Context, d time.Duration) (event, streamResult) {
	var timeout <-chan time.Time
	for {
		st.mu.Lock()
		if st.sent < len(st.events) {
			e := st.events[st.sent]
			st.sent++
			st.mu.Unlock()
			return e, streamEvent
		}
		if st.ended {
			st.mu.Unlock()
			return event{}, streamEnded
		}
		c := st.cond
		st.mu.Unlock()
		if d > 0 && timeout == nil {
			t := time.NewTimer(d)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-c:
		case <-timeout:
			return event{}, streamEmpty
		case <-ctx.Done():
			return event{}, streamGone
		}
	}
}

// router hands the relay's output for the client to the HTTP streams: a
// response to the stream of its request; progress to the stream of the
// request that carries its token; the server's other requests and
// notifications to the one request stream open, else the standalone
// stream, else the newest request stream.
type router struct {
	mu       sync.Mutex
	buf      []byte
	seq      int
	byID     map[string]*stream
	byToken  map[string]*stream
	reqs     []*stream
	all      map[string]*stream // streams by id, for resumption
	alone    *stream
	attached bool
	backlog  []wire.Message // for a standalone stream not yet opened
	ended    bool
	unique   int
	orig     map[string][]byte // unique id key → the client's id (2026-07-28)
	modern   bool              // the session-less revision: nothing unsolicited
	headers  *toolHeaders      // what tools lists teach, when set
}

func newRouter() *router {
	return &router{byID: map[string]*stream{}, byToken: map[string]*stream{}, all: map[string]*stream{}, orig: map[string][]byte{}}
}

// open registers a POST's requests and returns their stream.
func (rt *router) open(reqs []wire.Message) *stream {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.seq++
	st := newStream("s" + strconv.Itoa(rt.seq))
	for _, m := range reqs {
		k := wire.IDKey(m.ID)
		st.pending[k] = true
		rt.byID[k] = st
		if tok := wire.MetaMember(m.Params, "progressToken"); len(tok) > 0 {
			rt.byToken[wire.IDKey(tok)] = st
		}
	}
	rt.reqs = append(rt.reqs, st)
	rt.all[st.id] = st
	if rt.ended {
		st.ended = true
	}
	return st
}

// close forgets a request stream once its reader is done with it; its
// events stay for resumption while requests are unanswered.
func (rt *router) close(st *stream) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	st.mu.Lock()
	done := len(st.pending) == 0 || st.ended
	st.mu.Unlock()
	for i, x := range rt.reqs {
		if x == st {
			rt.reqs = append(rt.reqs[:i], rt.reqs[i+1:]...)
			break
		}
	}
	if done {
		delete(rt.all, st.id)
	}
}

// standalone returns the session's GET stream, unless one is attached.
func (rt *router) standalone() (*stream, bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.attached {
		return nil, false
	}
	if rt.alone == nil || rt.alone.ended {
		rt.seq++
		rt.alone = newStream("g" + strconv.Itoa(rt.seq))
		rt.alone.standby = true
		rt.all[rt.alone.id] = rt.alone
	}
	rt.attached = true
	for _, b := range rt.backlog {
		rt.alone.push(b)
	}
	rt.backlog = nil
	if rt.ended {
		rt.alone.finish()
	}
	return rt.alone, true
}

func (rt *router) detach(st *stream) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.alone == st {
		rt.attached = false
	}
}

// resume returns the stream of an event id, positioned after that event.
func (rt *router) resume(last string) *stream {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	sid, n, ok := strings.Cut(last, "-")
	st := rt.all[sid]
	if !ok || st == nil {
		return nil
	}
	i, err := strconv.Atoi(n)
	if err != nil {
		return nil
	}
	st.mu.Lock()
	if i > len(st.events) {
		i = len(st.events)
	}
	st.sent = i
	st.mu.Unlock()
	return st
}

// end closes every stream: the session is over.
func (rt *router) end() {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.ended = true
	for _, st := range rt.all {
		st.finish()
	}
}

// deliver takes one message the relay writes to the client.
func (rt *router) deliver(m wire.Message) {
	m = parsed(m)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.route(m)
}

// route delivers one message. The caller holds rt.mu.
func (rt *router) route(m wire.Message) {
	line := m.Raw
	if m.Kind == wire.KindBatch { // a batch's answers: by their first id
		if parts, err := wire.SplitBatch(line); err == nil && len(parts) > 0 {
			if pm, err := wire.Parse(parts[0]); err == nil {
				if st := rt.byID[wire.IDKey(pm.ID)]; st != nil {
					st.push(m)
					for _, p := range parts {
						if pm, err := wire.Parse(p); err == nil {
							rt.answered(st, wire.IDKey(pm.ID))
						}
					}
					return
				}
			}
		}
	}
	if m.Kind == 0 {
		return
	}
	if m.Kind == wire.KindResponse {
		k := wire.IDKey(m.ID)
		if rt.headers != nil {
			rt.headers.learn(line, m)
		}
		if st := rt.byID[k]; st != nil {
			if o, ok := rt.orig[k]; ok {
				delete(rt.orig, k)
				m = wire.WithID(m, o)
			}
			st.push(m)
			rt.answered(st, k)
		}
		return
	}
	if sub := wire.MetaMember(m.Params, metaSubscription); sub != nil {
		// A subscriptions/listen stream's notification: to that stream,
		// naming the subscription by the client's id.
		k := wire.IDKey(sub)
		if st := rt.byID[k]; st != nil {
			if o, ok := rt.orig[k]; ok {
				m = unparsed(withMeta(m, metaSubscription, o))
			}
			st.push(m)
		}
		return
	}
	if m.Method == "notifications/cancelled" {
		if rid := wire.ParamsMember(m.Params, "requestId"); rid != nil {
			k := wire.IDKey(rid)
			if st := rt.byID[k]; st != nil {
				if o, ok := rt.orig[k]; ok {
					m = unparsed(rewriteParamsMember(m, "requestId", o))
					delete(rt.orig, k)
				}
				st.push(m)
				rt.answered(st, k)
				return
			}
		}
	}
	if m.Method == "notifications/progress" {
		if tok := wire.ParamsMember(m.Params, "progressToken"); tok != nil {
			if st := rt.byToken[wire.IDKey(tok)]; st != nil && !st.ended {
				st.push(m)
				return
			}
		}
	}
	if rt.modern {
		return // no stream asked for it
	}
	switch {
	case len(rt.reqs) == 1:
		rt.reqs[0].push(m)
	case rt.alone != nil && rt.attached:
		rt.alone.push(m)
	case len(rt.reqs) > 0:
		rt.reqs[len(rt.reqs)-1].push(m)
	default:
		rt.backlog = append(rt.backlog, m)
		if len(rt.backlog) > 1000 {
			rt.backlog = rt.backlog[1:]
		}
	}
}

// answered marks a request answered; a stream whose requests are all
// answered ends. The caller holds rt.mu.
func (rt *router) answered(st *stream, k string) {
	delete(rt.byID, k)
	st.mu.Lock()
	delete(st.pending, k)
	done := len(st.pending) == 0
	st.mu.Unlock()
	if done {
		for tok, x := range rt.byToken {
			if x == st {
				delete(rt.byToken, tok)
			}
		}
		st.finish()
	}
}

// clientCancelled reads the client's notifications/cancelled among a
// POST's parts (at the indexes given) and returns the parts to send on and
// the keys of the requests they cancel, whose streams then end: no answer
// will come (the receiver of a cancellation ignores a late one). On
// 2026-07-28 (modern) the client names a request by its own id, which
// guard made unique on the way in: the cancellation is passed on under
// that unique id, and dropped when it names no request in flight, or more
// than one (two POSTs may carry the same id; a 2026-07-28 client cancels
// by closing the request's stream, and is not expected to send these).
func (rt *router) clientCancelled(parts []wire.Message, at []int, modern bool) ([]wire.Message, []string) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	var keys []string
	drop := map[int]bool{}
	for _, i := range at {
		m := parts[i]
		rid := wire.ParamsMember(m.Params, "requestId")
		if rid == nil {
			continue
		}
		k := wire.IDKey(rid)
		if !modern {
			if rt.byID[k] != nil {
				keys = append(keys, k)
			}
			continue
		}
		u := ""
		for uk, o := range rt.orig {
			if wire.IDKey(o) == k && rt.byID[uk] != nil {
				if u != "" {
					u = ""
					break
				}
				u = uk
			}
		}
		if u == "" {
			drop[i] = true
			continue
		}
		parts[i] = unparsed(rewriteParamsMember(m, "requestId", uniqueID(u)))
		keys = append(keys, u)
	}
	if len(drop) == 0 {
		return parts, keys
	}
	kept := parts[:0:0]
	for i, p := range parts {
		if !drop[i] {
			kept = append(kept, p)
		}
	}
	return kept, keys
}

// uniqueID is the id, as sent, of a unique id's key (see uniqueIDs).
func uniqueID(key string) []byte {
	return []byte(strconv.Quote(strings.TrimPrefix(key, "s")))
}

// cancelled ends the requests the client cancelled: their streams end
// once nothing else of theirs is pending.
func (rt *router) cancelled(keys []string) {
	if len(keys) == 0 {
		return
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for _, k := range keys {
		if st := rt.byID[k]; st != nil {
			delete(rt.orig, k)
			rt.answered(st, k)
		}
	}
}

// abandon ends a 2026-07-28 POST's stream whose client went before every
// answer was written, and returns the ids (as sent to the relay) of the
// requests left unanswered; none once the session has ended.
func (rt *router) abandon(st *stream) [][]byte {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.ended {
		return nil
	}
	st.mu.Lock()
	keys := make([]string, 0, len(st.pending))
	for k := range st.pending {
		keys = append(keys, k)
	}
	st.mu.Unlock()
	var ids [][]byte
	for _, k := range keys {
		if _, ok := rt.orig[k]; !ok {
			continue
		}
		delete(rt.orig, k)
		rt.answered(st, k)
		ids = append(ids, uniqueID(k))
	}
	return ids
}

// cancelUnanswered cancels the requests of a 2026-07-28 POST whose
// response ended before their answers were written. In that revision the
// close of a request's stream is the client's cancellation (no
// notifications/cancelled is expected): the relay gets one, as from the
// client, and records the call cancelled, withdraws a hold, and tells the
// server. In earlier revisions a disconnect is not a cancellation, and
// this is not called.
func (h *HTTPServer) cancelUnanswered(s *httpSession, st *stream) {
	ids := s.router.abandon(st)
	if len(ids) == 0 {
		return
	}
	msgs := make([]wire.Message, len(ids))
	for i, id := range ids {
		msgs[i] = unparsed([]byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + string(id) +
			`,"reason":"the client closed the request's stream"}}`))
	}
	if err := s.send(msgs); err != nil {
		h.opts.Logger.Info("cancellation not passed on: the session ended", "session", s.id, "err", err)
	}
}

// uniqueIDs gives a POST's requests ids no other POST uses (requests of
// the session-less revision share one relay session), registering them
// for its stream; responses get the client's ids back.
func (rt *router) uniqueIDs(st *stream, parts []wire.Message) []wire.Message {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	out := make([]wire.Message, len(parts))
	for i, m := range parts {
		if m.Kind != wire.KindRequest {
			out[i] = m
			continue
		}
		rt.unique++
		id := []byte(`"guard-http-` + strconv.Itoa(rt.unique) + `"`)
		old, k := wire.IDKey(m.ID), wire.IDKey(id)
		delete(rt.byID, old)
		rt.byID[k] = st
		rt.orig[k] = append([]byte(nil), m.ID...)
		st.mu.Lock()
		delete(st.pending, old)
		st.pending[k] = true
		st.mu.Unlock()
		out[i] = wire.WithID(m, id)
	}
	return out
}

// sharedSession is the relay session of the session-less revision for a
// client (token), started on first use.
func (h *HTTPServer) sharedSession(ctx context.Context, client string) (*httpSession, error) {
	h.mu.Lock()
	s := h.shared[client]
	h.mu.Unlock()
	if s != nil {
		return s, nil
	}
	s, err := h.start(ctx, client)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	delete(h.sessions, s.id) // not reachable by Mcp-Session-Id
	if prev := h.shared[client]; prev != nil {
		h.mu.Unlock()
		s.in.close()
		return prev, nil
	}
	s.router.mu.Lock()
	s.router.modern = true
	s.router.mu.Unlock()
	h.shared[client] = s
	h.mu.Unlock()
	return s, nil
}

// isModern reports whether a POST speaks the session-less revision
// (2026-07-28 or later), by its MCP-Protocol-Version header or its
// requests' _meta.
func isModern(r *http.Request, reqs []wire.Message, initialize bool) bool {
	if v := strings.TrimSpace(r.Header.Get("MCP-Protocol-Version")); v != "" {
		return v >= "2026-07-28"
	}
	if initialize {
		return false
	}
	for _, m := range reqs {
		if v, ok := wire.String(wire.MetaMember(m.Params, metaProtocol)); ok && v >= "2026-07-28" {
			return true
		}
	}
	return false
}

// codeHeaderMismatch is the JSON-RPC error of request headers that do not
// agree with the body (2026-07-28).
const codeHeaderMismatch = -32020

func writeHeaderMismatch(w http.ResponseWriter, id []byte, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write(wire.ErrorResponse(id, codeHeaderMismatch, "Header mismatch: "+msg, nil))
}

// checkHeaders checks a 2026-07-28 request's Mcp-Method, Mcp-Name and
// Mcp-Param-* headers against its body, as the server behind guard would:
// guard is the HTTP server its clients see. It returns what is wrong.
func (h *HTTPServer) checkHeaders(r *http.Request, m wire.Message) string {
	if v, ok := wire.String(wire.MetaMember(m.Params, metaProtocol)); ok {
		if hv := strings.TrimSpace(r.Header.Get("MCP-Protocol-Version")); hv != "" && hv != v {
			return fmt.Sprintf("MCP-Protocol-Version %q does not match the request's _meta %q", hv, v)
		}
	}
	method := strings.TrimSpace(r.Header.Get("Mcp-Method"))
	if method == "" {
		return "the Mcp-Method header is missing"
	}
	if method != m.Method {
		return fmt.Sprintf("Mcp-Method %q does not match the body's method %q", method, m.Method)
	}
	name := requestName(m)
	if name != "" {
		got := strings.TrimSpace(r.Header.Get("Mcp-Name"))
		if got == "" {
			return "the Mcp-Name header is missing"
		}
		if got != name {
			return fmt.Sprintf("Mcp-Name %q does not match the body's %q", got, name)
		}
	}
	if m.Method != "tools/call" {
		return ""
	}
	params := h.headers.of(name)
	var args map[string]json.RawMessage
	_ = json.Unmarshal(wire.ParamsMember(m.Params, "arguments"), &args)
	for arg, header := range params {
		raw, inBody := args[arg]
		hv, inHeader := r.Header[http.CanonicalHeaderKey("Mcp-Param-"+header)]
		if !inBody {
			continue
		}
		if !inHeader || len(hv) == 0 {
			return fmt.Sprintf("the Mcp-Param-%s header is missing for argument %q", header, arg)
		}
		v := strings.TrimSpace(hv[0])
		if strings.HasPrefix(v, "=?base64?") && strings.HasSuffix(v, "?=") {
			b, err := base64.StdEncoding.Strict().DecodeString(v[len("=?base64?") : len(v)-2])
			if err != nil {
				return fmt.Sprintf("Mcp-Param-%s is not valid Base64", header)
			}
			v = string(b)
		}
		var want string
		if s, ok := wire.String(raw); ok {
			want = s
		} else {
			want = string(raw)
		}
		if v != want {
			return fmt.Sprintf("Mcp-Param-%s does not match argument %q", header, arg)
		}
	}
	return ""
}

// metaSubscription names the subscriptions/listen stream a notification
// belongs to (2026-07-28).
const metaSubscription = "io.modelcontextprotocol/subscriptionId"

// statusOf is the HTTP status of a session-less answer: its error's.
func statusOf(m wire.Message) int {
	if m.Error == nil {
		return http.StatusOK
	}
	switch wire.ErrorCode(m.Error) {
	case wire.CodeMethodNotFound:
		return http.StatusNotFound
	case wire.CodeInvalidParams, codeHeaderMismatch, -32021, -32022, wire.CodeInvalidRequest, wire.CodeParseError:
		return http.StatusBadRequest
	}
	return http.StatusOK
}

// missingMeta says what a session-less request lacks of the _meta every
// request carries: the revision and the client's capabilities.
func missingMeta(m wire.Message) string {
	if wire.ParamsMember(m.Params, "_meta") == nil {
		return "the request has no _meta (io.modelcontextprotocol/protocolVersion, clientCapabilities)"
	}
	if wire.MetaMember(m.Params, metaProtocol) == nil {
		return "_meta lacks " + metaProtocol
	}
	if wire.MetaMember(m.Params, metaCapabilities) == nil {
		return "_meta lacks " + metaCapabilities
	}
	return ""
}

// withMeta returns the message with one member of params._meta replaced.
func withMeta(m wire.Message, key string, value []byte) []byte {
	var p map[string]json.RawMessage
	if json.Unmarshal(m.Params, &p) != nil {
		return m.Raw
	}
	var meta map[string]json.RawMessage
	if json.Unmarshal(p["_meta"], &meta) != nil {
		return m.Raw
	}
	meta[key] = value
	b, err := json.Marshal(meta)
	if err != nil {
		return m.Raw
	}
	p["_meta"] = b
	return replaceParams(m, p)
}

// reap ends sessions idle for longer than SessionIdle, unless a stream of
// theirs is still open (a held call, a GET stream).
func (h *HTTPServer) reap() {
	every := min(h.opts.SessionIdle/4, time.Minute)
	for {
		time.Sleep(every)
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return
		}
		var idle []*httpSession
		cut := time.Now().Add(-h.opts.SessionIdle).UnixNano()
		for id, s := range h.sessions {
			if s.used.Load() < cut && !s.router.busy() {
				delete(h.sessions, id)
				idle = append(idle, s)
			}
		}
		h.mu.Unlock()
		for _, s := range idle {
			h.opts.Logger.Info("session ended: idle", "session", s.id)
			s.in.close()
		}
	}
}

// busy reports whether a stream of the session is open.
func (rt *router) busy() bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return len(rt.reqs) > 0 || rt.attached
}
