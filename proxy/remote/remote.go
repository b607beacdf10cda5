// Package remote is guard's side of a server reached over HTTP: the
// Streamable HTTP transport, and the legacy HTTP+SSE one (2024-11-05), as a
// proxy.Conn that a relay session runs against its client. Each message the
// relay writes is POSTed; what comes back (a JSON body, an event stream,
// the session's GET stream) is what the relay reads, each message parsed
// once. Upstream credentials come from guard's configuration, or from a
// token exchange for the session's caller; a client's own never travel.
package remote

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/guard-mcp/guard/proxy"
	"github.com/guard-mcp/guard/proxy/mcpheader"
	"github.com/guard-mcp/guard/wire"
)

// remoteGrace is how long a remote session's open requests may take to
// finish once its client has gone.
const remoteGrace = 5 * time.Second

// Remote describes a server guard reaches over Streamable HTTP.
type Remote struct {
	// URL is the server's MCP endpoint.
	URL string
	// Headers are sent with every request (upstream credentials come from
	// guard's configuration; a client's own never travel upstream).
	Headers map[string]string
	// Client makes the requests (default: NewClient's, for this
	// session alone). Sessions of one server share one, so that its
	// connections are reused.
	Client *http.Client
	// SSE selects the legacy HTTP+SSE transport (2024-11-05): a GET event
	// stream carries every server message, and the client POSTs to the
	// endpoint its first event names.
	SSE bool
	// Authorization, when set, gives the Authorization header of each
	// request: credentials obtained for the session's caller (a token
	// exchange), in place of the one Headers configure. An error fails
	// the request, and the client is told why.
	Authorization func(ctx context.Context) (string, error)
	// TraceHeaders sends a request's trace context (params._meta's
	// traceparent and tracestate, which guard sets when it traces) as
	// the W3C headers too, for a server whose HTTP stack reads those.
	TraceHeaders bool
}

// NewClient returns the HTTP client of a server reached over HTTP,
// for the sessions of every client at once: it keeps an idle connection for
// each of them (net/http's default keeps two per host, and the rest would
// open a connection per request), and has no overall timeout (a held call
// or an event stream lasts).
func NewClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 256
	return &http.Client{Transport: t}
}

// Run relays between the client and a server reached over Streamable
// HTTP (or the legacy HTTP+SSE transport), through a relay session with
// options opts, until the client ends its input. It ends the upstream
// session (DELETE) when done.
func Run(ctx context.Context, opts proxy.Options, rm Remote, client proxy.Conn) error {
	opts = opts.WithDefaults()
	if rm.Client == nil {
		rm.Client = NewClient()
		defer rm.Client.CloseIdleConnections()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	up := &upstream{ctx: ctx, rm: rm, in: proxy.NewInbox(), max: opts.MaxMessage, logger: opts.Logger,
		work: workers{jobs: make(chan func([]byte)), done: ctx.Done()}}
	up.cancel = cancel
	return proxy.Run(ctx, client, up, proxy.NewSession(ctx, opts))
}

// upstream is the Conn of a server reached over HTTP: each message the
// relay writes is POSTed, and what comes back (JSON, or an SSE stream) is
// what the relay reads, each message parsed once.
type upstream struct {
	ctx    context.Context
	cancel context.CancelFunc // cuts the requests still open
	rm     Remote
	logger interface {
		Warn(string, ...any)
	}
	in  *proxy.Inbox // the server's messages, for Read
	max int          // the largest message relayed (Options.MaxMessage)

	mu       sync.Mutex
	session  string
	protocol string
	initID   string // the initialize request's id key, until answered
	getOnce  sync.Once
	inflight sync.WaitGroup
	// 2026-07-28 requests in flight, by id key: closing a request's
	// stream is how that revision cancels it.
	modern map[string]*modernCall

	// x-mcp-header arguments of each tool, from the tools lists relayed
	// (2026-07-28 requests mirror them in Mcp-Param-* headers).
	headers mcpheader.Tools

	// The goroutines that wait for requests' answers.
	work workers

	// The legacy transport: its event stream, opened on first use, and
	// the endpoint it named.
	sseOnce     sync.Once
	sseEndpoint string
	sseErr      error
}

// Write sends one message to the server; a request's answer comes back
// through Read.
func (u *upstream) Write(_ context.Context, msg wire.Message) error {
	if m := proxy.Parsed(msg); m.Kind != 0 {
		u.post(m)
	}
	return nil
}

// Read returns the server's next message.
func (u *upstream) Read(ctx context.Context) (wire.Message, error) {
	return u.in.Take(ctx)
}

// Close is the end of the relay's output for the server: requests still
// open get a moment to finish (a stream that never ends,
// subscriptions/listen, is then cut), the upstream session ends, and so
// does what Read returns.
func (u *upstream) Close() error {
	waited := make(chan struct{})
	go func() { u.wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(remoteGrace):
		u.cancel()
		<-waited
	}
	u.end()
	u.in.Close()
	return nil
}

// Status is how the server ended, for ServerEnded: its session did.
func (u *upstream) Status() (int, string) { return 0, "the remote session ended" }

func (u *upstream) wait() { u.inflight.Wait() }

// tooLong tells the relay that the server sent a message over max_message,
// which is not relayed.
func (u *upstream) tooLong(size int) {
	_ = u.in.PutError(context.Background(), &wire.TooLongError{Size: int64(size), Max: u.max})
}

// emit hands one message to the relay.
func (u *upstream) emit(line []byte) {
	line = proxy.OneLine(bytes.TrimSpace(line))
	if len(line) == 0 {
		return
	}
	if len(line) > u.max {
		u.tooLong(len(line))
		return
	}
	m, err := wire.Parse(line)
	if err != nil {
		// Delivered unparsed: Read reports why it does not parse.
		_ = u.in.Put(context.Background(), proxy.Unparsed(line))
		return
	}
	u.headers.Learn(line, m)
	u.mu.Lock()
	if m.Kind == wire.KindResponse && u.initID != "" && wire.IDKey(m.ID) == u.initID {
		u.initID = ""
		if v, ok := wire.String(wire.ParamsMember(m.Result, "protocolVersion")); ok {
			u.protocol = v
		}
	}
	u.mu.Unlock()
	_ = u.in.Put(context.Background(), m)
}

// traceHeaders sets the W3C trace context headers of a request m carries
// in its _meta, with Remote.TraceHeaders.
func (u *upstream) traceHeaders(req *http.Request, m wire.Message) {
	if !u.rm.TraceHeaders || m.Kind != wire.KindRequest {
		return
	}
	if tp, ts := proxy.TraceMeta(m.Params); tp != "" {
		req.Header.Set("Traceparent", tp)
		if ts != "" {
			req.Header.Set("Tracestate", ts)
		}
	}
}

// newRequest is a request to url with the configured headers (the
// upstream credentials; the client's own never travel).
func (u *upstream) newRequest(method, url string, body []byte) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(u.ctx, method, url, rd)
	if err != nil {
		return nil, err
	}
	for k, v := range u.rm.Headers {
		req.Header.Set(k, v)
	}
	if u.rm.Authorization != nil {
		v, err := u.rm.Authorization(u.ctx)
		if err != nil {
			return nil, fmt.Errorf("no credentials for the remote server: %w", err)
		}
		req.Header.Set("Authorization", v)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

// request is a Streamable HTTP request to the server, in its session.
func (u *upstream) request(method string, body []byte) (*http.Request, error) {
	req, err := u.newRequest(method, u.rm.URL, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json, text/event-stream")
	u.mu.Lock()
	if u.session != "" {
		req.Header.Set("Mcp-Session-Id", u.session)
	}
	if u.protocol != "" {
		req.Header.Set("Mcp-Protocol-Version", u.protocol)
	}
	u.mu.Unlock()
	return req, nil
}

// post sends one message and relays its answer, off the caller's path.
func (u *upstream) post(m wire.Message) {
	line := m.Raw
	if u.rm.SSE {
		u.postLegacy(m, line)
		return
	}
	if m.Kind == wire.KindRequest && m.Method == "initialize" {
		u.mu.Lock()
		u.initID = wire.IDKey(m.ID)
		u.mu.Unlock()
	}
	if m.Kind == wire.KindNotification && m.Method == "notifications/cancelled" && u.cancelModern(m) {
		return
	}
	req, err := u.request(http.MethodPost, line)
	if err != nil {
		u.fail(m, err.Error())
		return
	}
	u.traceHeaders(req, m)
	modern := u.modernHeaders(req, m)
	if m.Kind == wire.KindRequest {
		var key string
		var mine *modernCall
		if modern {
			key = wire.IDKey(m.ID)
			ctx, cancel := context.WithCancel(req.Context())
			req = req.WithContext(ctx)
			mine = &modernCall{cancel: cancel}
			u.mu.Lock()
			if u.modern == nil {
				u.modern = map[string]*modernCall{}
			}
			u.modern[key] = mine
			u.mu.Unlock()
		}
		u.inflight.Add(1)
		u.work.run(func(buf []byte) {
			defer u.inflight.Done()
			u.exchange(m, req, buf)
			if mine != nil {
				mine.cancel()
				// Once answered, the id may already name a newer
				// request: only this one's entry goes.
				u.mu.Lock()
				if u.modern[key] == mine {
					delete(u.modern, key)
				}
				u.mu.Unlock()
			}
		})
		return
	}
	// Notifications and responses: in order, and quickly answered (202).
	u.exchange(m, req, nil)
	if m.Method == "notifications/initialized" {
		u.getOnce.Do(func() { go u.listen() })
	}
}

// exchange sends one POST and relays what comes back; an event stream is
// read with buf (see readEventsWith).
func (u *upstream) exchange(m wire.Message, req *http.Request, buf []byte) {
	resp, err := u.rm.Client.Do(req)
	if err != nil && req.Context().Err() != nil && u.ctx.Err() == nil {
		return // cancelled by the client: no answer is expected
	}
	if err != nil {
		u.fail(m, "the remote server could not be reached: "+err.Error())
		return
	}
	defer resp.Body.Close()
	if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
		u.mu.Lock()
		if u.session == "" {
			u.session = sid
		}
		u.mu.Unlock()
	}
	switch {
	case resp.StatusCode == http.StatusAccepted:
		return
	case resp.StatusCode == http.StatusNotFound && req.Header.Get("Mcp-Session-Id") != "":
		// The upstream session is gone: nothing of this request was
		// done, and the client is told so rather than left waiting.
		u.fail(m, "the remote server's session expired (HTTP 404): the request was not processed; reconnect to start a new session")
		return
	case resp.StatusCode >= 300:
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if em, err := wire.Parse(bytes.TrimSpace(b)); err == nil && em.Kind == wire.KindResponse && m.Kind == wire.KindRequest {
			u.emit(bytes.TrimSpace(b))
			return
		}
		u.fail(m, fmt.Sprintf("the remote server answered HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b))))
		return
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		readSSE(resp.Body, u.max, buf, u.emit, u.tooLong)
		return
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, int64(u.max)+1))
	if len(b) > u.max {
		u.tooLong(len(b))
		return
	}
	if err != nil && req.Context().Err() != nil && u.ctx.Err() == nil {
		return // cancelled by the client
	}
	if err != nil {
		u.fail(m, "reading the remote server's answer: "+err.Error())
		return
	}
	u.emit(b)
}

// workers run the exchanges of an upstream's requests, each on a
// goroutine of its own while it lasts. A goroutine whose exchange is done
// waits for the next one rather than ending, until the upstream ends: its
// stack, which net/http's client grows, and its buffer for reading event
// streams serve again instead of being made anew for every request.
type workers struct {
	jobs chan func(buf []byte) // taken by a goroutine that waits
	done <-chan struct{}       // the upstream ended: waiting goroutines end
}

// workerBuffer is the size of a worker's buffer for event streams, the
// size bufio.Scanner starts with.
const workerBuffer = 4096

// run runs job on a waiting goroutine, or on a new one when none waits.
func (w *workers) run(job func(buf []byte)) {
	select {
	case w.jobs <- job:
	default:
		go w.loop(job)
	}
}

func (w *workers) loop(job func(buf []byte)) {
	buf := make([]byte, workerBuffer)
	for {
		job(buf)
		job = nil // what it holds (a message, up to max_message) is not kept
		select {
		case job = <-w.jobs:
		case <-w.done:
			return
		}
	}
}

// fail answers a request that could not be relayed with an error; other
// messages are only logged.
func (u *upstream) fail(m wire.Message, why string) {
	u.logger.Warn("remote server", "method", m.Method, "err", why)
	if m.Kind != wire.KindRequest {
		return
	}
	u.emit(wire.Internal("Upstream failed: " + why).Answer(m.ID))
}

// listen keeps the session's GET stream open for the server's messages
// that belong to no request, reconnecting while the relay runs.
func (u *upstream) listen() {
	for u.ctx.Err() == nil {
		req, err := u.request(http.MethodGet, nil)
		if err != nil {
			return
		}
		req.Header.Set("Accept", "text/event-stream")
		resp, err := u.rm.Client.Do(req)
		if err != nil {
			return
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return // 405: the server offers no such stream
		}
		readSSE(resp.Body, u.max, nil, u.emit, u.tooLong)
		resp.Body.Close()
		select {
		case <-u.ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// end closes the upstream session.
func (u *upstream) end() {
	u.mu.Lock()
	sid := u.session
	u.mu.Unlock()
	if sid == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := u.request(http.MethodDelete, nil)
	if err != nil {
		return
	}
	req = req.WithContext(ctx)
	if resp, err := u.rm.Client.Do(req); err == nil {
		resp.Body.Close()
	}
}
