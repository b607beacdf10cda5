package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

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
	// Client makes the requests (default: one with no overall timeout).
	Client *http.Client
	// SSE selects the legacy HTTP+SSE transport (2024-11-05): a GET event
	// stream carries every server message, and the client POSTs to the
	// endpoint its first event names.
	SSE bool
}

// RunRemote relays between the client and a server reached over
// Streamable HTTP (or the legacy HTTP+SSE transport), until the client ends
// its input. It ends the upstream session (DELETE) when done.
func RunRemote(ctx context.Context, opts Options, rm Remote, client Conn) error {
	opts.fill()
	if rm.Client == nil {
		rm.Client = &http.Client{}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	up := &upstream{ctx: ctx, rm: rm, in: newInbox(), logger: opts.Logger}
	s := NewSession(ctx, opts)
	p := s.pump(client, up)
	readDone := make(chan struct{})
	go func() {
		s.readServer(up)
		close(readDone)
	}()
	<-p.serverWritten // the client ended and everything was sent
	// Requests still open get a moment to finish; a stream that never
	// ends (subscriptions/listen) is then cut.
	waited := make(chan struct{})
	go func() { up.wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(remoteGrace):
		cancel()
		<-waited
	}
	up.end()
	up.in.close()
	<-readDone
	s.ServerGone(0, "the remote session ended")
	s.toClient.close()
	return <-p.clientWritten
}

// upstream is the Conn of a server reached over HTTP: each message the
// relay writes is POSTed, and what comes back (JSON, or an SSE stream) is
// what the relay reads, each message parsed once.
type upstream struct {
	ctx    context.Context
	rm     Remote
	logger interface {
		Warn(string, ...any)
	}
	in *inbox // the server's messages, for Read

	mu       sync.Mutex
	session  string
	protocol string
	initID   string // the initialize request's id key, until answered
	getOnce  sync.Once
	inflight sync.WaitGroup
	closed   bool
	// 2026-07-28 requests in flight, by id key: closing a request's
	// stream is how that revision cancels it.
	modern map[string]*modernCall

	// x-mcp-header arguments of each tool, from the tools lists relayed
	// (2026-07-28 requests mirror them in Mcp-Param-* headers).
	headers toolHeaders

	// The legacy transport: its event stream, opened on first use, and
	// the endpoint it named.
	sseOnce     sync.Once
	sseEndpoint string
	sseErr      error
}

// Write sends one message to the server; a request's answer comes back
// through Read.
func (u *upstream) Write(_ context.Context, msg wire.Message) error {
	if m := parsed(msg); m.Kind != 0 {
		u.post(m)
	}
	return nil
}

// Read returns the server's next message.
func (u *upstream) Read(ctx context.Context) (wire.Message, error) {
	m, err := u.in.take(ctx)
	if err == nil && m.Kind == 0 {
		return readMessage(m.Raw)
	}
	return m, err
}

// Close is the end of the relay's output for the server: the upstream
// session ends once its open requests are done (RunRemote).
func (u *upstream) Close() error { return nil }

func (u *upstream) wait() { u.inflight.Wait() }

// emit hands one message to the relay.
func (u *upstream) emit(line []byte) {
	line = oneLine(bytes.TrimSpace(line))
	if len(line) == 0 {
		return
	}
	m, err := wire.Parse(line)
	if err != nil {
		// Delivered unparsed: Read reports why it does not parse.
		_ = u.in.put(context.Background(), unparsed(line))
		return
	}
	u.headers.learn(line, m)
	u.mu.Lock()
	if m.Kind == wire.KindResponse && u.initID != "" && wire.IDKey(m.ID) == u.initID {
		u.initID = ""
		if v, ok := wire.String(wire.ParamsMember(m.Result, "protocolVersion")); ok {
			u.protocol = v
		}
	}
	u.mu.Unlock()
	_ = u.in.put(context.Background(), m)
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
		req.Header.Set("MCP-Protocol-Version", u.protocol)
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
		go func() {
			defer u.inflight.Done()
			u.exchange(m, req)
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
		}()
		return
	}
	// Notifications and responses: in order, and quickly answered (202).
	u.exchange(m, req)
	if m.Method == "notifications/initialized" {
		u.getOnce.Do(func() { go u.listen() })
	}
}

// modernCall is a 2026-07-28 request in flight to the upstream, whose
// stream closing is its cancellation.
type modernCall struct{ cancel context.CancelFunc }

// cancelModern passes on the relay's cancellation of a 2026-07-28 request
// as that revision's server expects it: its request's stream is closed,
// and no notifications/cancelled is sent. It reports whether the
// cancellation named such a request in flight.
func (u *upstream) cancelModern(m wire.Message) bool {
	rid := wire.ParamsMember(m.Params, "requestId")
	if rid == nil {
		return false
	}
	key := wire.IDKey(rid)
	u.mu.Lock()
	c := u.modern[key]
	delete(u.modern, key)
	u.mu.Unlock()
	if c == nil {
		return false
	}
	c.cancel()
	return true
}

// exchange sends one POST and relays what comes back.
func (u *upstream) exchange(m wire.Message, req *http.Request) {
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
		readSSE(resp.Body, u.emit)
		return
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil && req.Context().Err() != nil && u.ctx.Err() == nil {
		return // cancelled by the client
	}
	if err != nil {
		u.fail(m, "reading the remote server's answer: "+err.Error())
		return
	}
	u.emit(b)
}

// fail answers a request that could not be relayed with an error; other
// messages are only logged.
func (u *upstream) fail(m wire.Message, why string) {
	u.logger.Warn("remote server", "method", m.Method, "err", why)
	if m.Kind != wire.KindRequest {
		return
	}
	u.emit(wire.ErrorResponse(m.ID, wire.CodeInternalError, "Upstream failed: "+why, nil))
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
		readSSE(resp.Body, u.emit)
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

// readSSE calls emit with the data of each event of an SSE stream.
func readSSE(r io.Reader, emit func([]byte)) {
	readEvents(r, func(_ string, data []byte) { emit(data) })
}

// openLegacy opens the legacy transport's event stream and waits for the
// endpoint event; the stream's messages go to the relay until it ends.
func (u *upstream) openLegacy() {
	req, err := u.newRequest(http.MethodGet, u.rm.URL, nil)
	if err != nil {
		u.sseErr = err
		return
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := u.rm.Client.Do(req)
	if err != nil {
		u.sseErr = err
		return
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		u.sseErr = fmt.Errorf("HTTP %d", resp.StatusCode)
		return
	}
	endpoint := make(chan string, 1)
	go func() {
		defer resp.Body.Close()
		readEvents(resp.Body, func(event string, data []byte) {
			if event == "endpoint" {
				select {
				case endpoint <- string(data):
				default:
				}
				return
			}
			u.emit(data)
		})
		close(endpoint)
	}()
	select {
	case e, ok := <-endpoint:
		if !ok {
			u.sseErr = fmt.Errorf("the event stream ended before naming an endpoint")
			return
		}
		base, err := url.Parse(u.rm.URL)
		if err != nil {
			u.sseErr = err
			return
		}
		ref, err := url.Parse(e)
		if err != nil {
			u.sseErr = err
			return
		}
		u.sseEndpoint = base.ResolveReference(ref).String()
	case <-time.After(30 * time.Second):
		u.sseErr = fmt.Errorf("no endpoint event within 30s")
	}
}

// postLegacy sends one message to the legacy transport's endpoint; the
// answer comes on the event stream.
func (u *upstream) postLegacy(m wire.Message, line []byte) {
	u.sseOnce.Do(u.openLegacy)
	if u.sseErr != nil {
		u.fail(m, "the remote server's event stream: "+u.sseErr.Error())
		return
	}
	req, err := u.newRequest(http.MethodPost, u.sseEndpoint, line)
	if err != nil {
		u.fail(m, err.Error())
		return
	}
	resp, err := u.rm.Client.Do(req)
	if err != nil {
		u.fail(m, "the remote server could not be reached: "+err.Error())
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		u.fail(m, fmt.Sprintf("the remote server answered HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b))))
	}
}

// readEvents calls fn with each event of an SSE stream: its type
// ("message" when unnamed) and data.
func readEvents(r io.Reader, fn func(event string, data []byte)) {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 64<<20)
	var data []byte
	event := ""
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case len(line) == 0:
			if len(data) > 0 {
				if event == "" {
					event = "message"
				}
				fn(event, data)
			}
			data, event = nil, ""
		case bytes.HasPrefix(line, []byte("event:")):
			event = strings.TrimSpace(string(line[6:]))
		case bytes.HasPrefix(line, []byte("data:")):
			v := bytes.TrimPrefix(line[5:], []byte(" "))
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, v...)
		}
	}
	if len(data) > 0 {
		if event == "" {
			event = "message"
		}
		fn(event, data)
	}
}

// modernHeaders sets the headers a 2026-07-28 request carries over HTTP:
// its revision, method, name, and the arguments its tool mirrors. It
// reports whether the message is of that revision.
func (u *upstream) modernHeaders(req *http.Request, m wire.Message) bool {
	v, ok := wire.String(wire.MetaMember(m.Params, metaProtocol))
	if !ok || v < "2026-07-28" {
		return false
	}
	req.Header.Set("MCP-Protocol-Version", v)
	if m.Method != "" {
		req.Header.Set("Mcp-Method", m.Method)
	}
	name := requestName(m)
	if name != "" {
		req.Header.Set("Mcp-Name", name)
	}
	if m.Method != "tools/call" {
		return true
	}
	params := u.headers.of(name)
	if len(params) == 0 {
		return true
	}
	var args map[string]json.RawMessage
	_ = json.Unmarshal(wire.ParamsMember(m.Params, "arguments"), &args)
	for arg, header := range params {
		raw, ok := args[arg]
		if !ok {
			continue
		}
		val, isStr := wire.String(raw)
		if !isStr {
			val = string(raw)
		}
		// Values that are not plain ASCII travel Base64-encoded.
		if !printableASCII(val) {
			val = "=?base64?" + base64.StdEncoding.EncodeToString([]byte(val)) + "?="
		}
		req.Header.Set("Mcp-Param-"+header, val)
	}
	return true
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return s == strings.TrimSpace(s)
}
