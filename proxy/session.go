package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/proxy/intercept"
	"github.com/guard-mcp/guard/wire"
)

// MetaProtocol and metaClientInfo are the per-request _meta members that
// carry the revision and the client on 2026-07-28, where there is no
// initialize.
const (
	MetaProtocol     = "io.modelcontextprotocol/protocolVersion"
	metaClientInfo   = "io.modelcontextprotocol/clientInfo"
	MetaCapabilities = "io.modelcontextprotocol/clientCapabilities"
)

// call is one request in flight through guard, in either direction, or one
// of guard's own requests.
type call struct {
	id  string // call id: links the audit records
	dir string
	// st is its method and where the rules' decision on it stands (a
	// tools/call, or a request the rules decide): only intercept.Step
	// changes it.
	st          intercept.Call
	pin         string
	def         *guard.Tool // the definition it was decided on
	pc          *guard.Call // what the rules read of a tools/call
	holds       int         // approvals asked for it
	heldOn      string      // the approval its latest request record names
	askedInBand bool        // guard's own input request was answered (2026-07-28)
	origID      []byte      // the id as its sender wrote it
	origKey     string
	sentID      []byte // the id as forwarded, when guard had to rewrite it
	sentKey     string
	start       time.Time
	reqSize     int

	// held calls
	progress  []byte // the client's progressToken, raw
	progBase  float64
	withdrawn chan struct{}

	own   chan wire.Message // guard's own request: where its response goes
	batch *batch

	recorded atomic.Bool // its request record has been appended
	// tr is its trace, nil without Options.Tracer.
	tr *callTrace
	// cancelled: the client cancelled it after it was forwarded (under
	// Session.mu).
	cancelled bool
	// nextPage: a tools/list that asks for a page after the first.
	nextPage bool
	// holding: it waits for a person's decision; goneWhy, once its
	// client went away, why (both under Session.mu).
	holding bool
	goneWhy string
	ended   atomic.Bool // it has been answered inside guard

	// A tools/call is "deciding" from its arrival until it is forwarded,
	// answered or held: the client's end of input waits for that. deciding
	// is the session's count of such calls (nil for other calls), undecided
	// whether this one is still counted in it.
	deciding  *sync.WaitGroup
	undecided atomic.Bool
}

// decided ends the call's deciding phase (once; a no-op for other calls).
func (c *call) decided() {
	if c.deciding != nil && c.undecided.CompareAndSwap(true, false) {
		c.deciding.Done()
	}
}

// end marks a call answered inside guard; only the first caller may answer.
func (c *call) end() bool { return c.ended.CompareAndSwap(false, true) }

// Session relays one client session to one server. It is transport-free:
// OnClient and OnServer take whole messages, and what it sends goes to
// the two outboxes that Run drains (it is the Interceptor of Run).
type Session struct {
	opts     Options
	id       string
	toServer *queue
	toClient *queue
	catalog  *catalog
	ctx      context.Context
	cancel   context.CancelFunc

	mu       sync.Mutex
	protocol string
	client   guard.ClientInfo
	byClient map[string]*call // client requests in flight, by the client's id
	up       *IDMap[*call]    // requests sent to the server, by the id sent
	down     *IDMap[*call]    // server requests sent to the client, by the id sent
	progress map[string]*call // held-then-forwarded calls whose progress guard rewrites
	rounds   map[string]*call // 2026-07-28 requestState → the call it continues
	refresh  chan struct{}    // closed when the running tools/list refresh ends
	// refreshErr is how the last refresh ended.
	refreshErr error
	deciding   sync.WaitGroup
	gone       bool
	exit       string // how the server ended, once it has
	meta       clientMeta
	accepted   map[string]time.Time // pins found accepted, and when
	stateKey   [32]byte             // signs guard's own requestState
	elicitForm bool                 // the client answers form elicitations
	held       int                  // calls waiting for approval now
	view       listingView
	left       leftState
	// cancelledKeys are the ids toward the server of forwarded requests
	// the client cancelled, oldest first (see cancelInFlight).
	cancelledKeys []string
	persist       persistence

	// The session's parts: the tools/call pipeline, the holds and the
	// listings. Each reads the session's state through it.
	pipe  *pipeline
	holds *holds
	lists *lister
	// hub serves the listens of a shared connection (nil unless
	// Options.ShareListens).
	hub *listenHub
}

// clientMeta is who the client is as the session shows it.
type clientMeta struct {
	// On 2026-07-28 every request carries the client's identity in _meta;
	// guard's own requests carry the client's last one.
	info, caps json.RawMessage
	// client is what info names (no name: nothing), capsForm whether
	// caps declare form elicitation.
	client   guard.ClientInfo
	capsForm bool
	// shownText is how the records show the client shown.
	shown     guard.ClientInfo
	shownText string
}

// listingView is what the client was shown of the server's tools.
type listingView struct {
	// seen is what the client's last listing of tools showed, by
	// name (nil until it lists); listens are its subscriptions/listen
	// requests that ask for tool list changes (2026-07-28), by id key.
	seen map[string]shown
	// served are the definitions the server served in that listing.
	served  []guard.Tool
	listens map[string]*call
	// reviewHolds are this session's calls held for their tool's review,
	// by tool, then argument digest, to their approval's id.
	reviewHolds map[string]map[string]string
}

// leftState is why the client left ("" while it is there); ch is
// closed then.
type leftState struct {
	why string
	ch  chan struct{}
}

// persistence counts the listings being recorded.
type persistence struct {
	mu   sync.Mutex
	cond *sync.Cond
	n    int
}

// NewSession returns a session; the transport drains ToServer and ToClient.
func NewSession(ctx context.Context, opts Options) *Session {
	opts.fill()
	ctx, cancel := context.WithCancel(ctx)
	id, _ := uuid.NewV7()
	s := &Session{
		opts:     opts,
		id:       id.String(),
		toServer: newQueue(),
		toClient: newQueue(),
		catalog:  newCatalog(),
		ctx:      ctx,
		cancel:   cancel,
		byClient: map[string]*call{},

		progress: map[string]*call{},
		rounds:   map[string]*call{},
		accepted: map[string]time.Time{},
		left:     leftState{ch: make(chan struct{})},
	}
	// guard's own ids name the session: a client that also talks to
	// the server directly does not pick them.
	mint := func(n uint64) []byte {
		return []byte(strconv.Quote("guard-" + s.id + "-" + strconv.FormatUint(n, 10)))
	}
	s.pipe, s.holds, s.lists = &pipeline{s: s}, &holds{s: s}, &lister{s: s}
	s.up, s.down = NewIDMap[*call](mint, false), NewIDMap[*call](mint, false)
	s.persist.cond = sync.NewCond(&s.persist.mu)
	if opts.ShareListens {
		s.hub = newListenHub(s)
	}
	if opts.Watch != nil {
		go s.lists.watchListing()
	}
	if len(opts.StateKey) > 0 {
		s.stateKey = sha256.Sum256(opts.StateKey)
	} else {
		_, _ = rand.Read(s.stateKey[:])
	}
	return s
}

// waitDecisions waits, at most d, until no tools/call is still being
// decided inside guard: when the client ends its input, calls it sent
// before reach the server as they would without guard.
func (s *Session) waitDecisions(d time.Duration) {
	done := make(chan struct{})
	go func() { s.deciding.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// ID is the session's id as audit records show it.
func (s *Session) ID() string { return s.id }

func (s *Session) now() time.Time { return s.opts.Now() }

// clientInfo returns what the records say about the client.
func (s *Session) clientInfo() (guard.ClientInfo, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clientLocked(), s.protocol
}

// clientLocked is clientInfo's client; the caller holds s.mu.
func (s *Session) clientLocked() guard.ClientInfo {
	if s.opts.ClientName != "" {
		return guard.ClientInfo{Name: s.opts.ClientName}
	}
	return s.client
}

// recordedClient returns the client as the records show it
// (ClientInfo.String of clientInfo), made again only when the client
// changed, and the revision.
func (s *Session) recordedClient() (string, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ci := s.clientLocked(); ci != s.meta.shown {
		s.meta.shown, s.meta.shownText = ci, ci.String()
	}
	return s.meta.shownText, s.protocol
}

func (s *Session) record(kind string, c *call) *guard.Record {
	client, proto := s.recordedClient()
	r := &guard.Record{
		ID:      guard.NewID(),
		CallID:  c.id,
		Kind:    kind,
		Time:    s.now(),
		Session: s.id,
		Client:  client,
		// The caller's groups are shared by every record of the
		// session: a record is not changed once made.
		User:       s.opts.Caller.Subject,
		UserEmail:  s.opts.Caller.Email,
		UserGroups: s.opts.Caller.Groups,
		Protocol:   proto,
		Server:     s.opts.Server,
		Direction:  c.dir,
		Method:     c.st.Method,
		Tool:       c.st.Tool,
		Pin:        c.pin,
		Decision:   c.st.Decision,
		DecidedBy:  c.st.DecidedBy,
		Approval:   c.st.Approval,
		Reason:     c.st.Reason,
	}
	if c.st.Detail != nil {
		d, _ := json.Marshal(c.st.Detail)
		r.Detail = string(d)
	}
	if kind == guard.KindRequest {
		r.RequestSize = int64(c.reqSize)
		if c.st.Args != nil {
			r.Arguments = auditText(&s.opts, c.st.Args)
		}
	}
	return r
}

// event records something guard noticed outside any invocation: a refused
// line, a dropped response, a server exit.
func (s *Session) event(method, dir string, detail map[string]any) {
	client, proto := s.recordedClient()
	d, _ := json.Marshal(detail)
	rec := &guard.Record{
		ID: guard.NewID(), CallID: guard.NewID(), Kind: guard.KindEvent, Time: s.now(),
		Session: s.id, Client: client, Protocol: proto, Server: s.opts.Server,
		User: s.opts.Caller.Subject, UserEmail: s.opts.Caller.Email, UserGroups: s.opts.Caller.Groups,
		Direction: dir, Method: method, Detail: string(d),
	}
	ch := s.opts.Recorder.AppendAsync(rec)
	go func() {
		if err := <-ch; err != nil {
			s.opts.Logger.Error("audit event not recorded", "event", method, "err", err)
		}
	}()
}

// refusal is the answer for a request whose audit record failed.
func refusal(id []byte) func(error) wire.Message {
	return func(error) wire.Message {
		return built(wire.Internal(guard.AuditFailedText).Answer(id))
	}
}

// toolError is a tools/call result that reports an error to the model.
func toolError(id []byte, text string) []byte { return wire.ToolError(text).Answer(id) }

// OnClient takes one message of the client; err, when set, is about
// that message alone (a *BadMessage or a *wire.TooLongError).
func (s *Session) OnClient(msg wire.Message, err error) {
	switch {
	case err == nil && msg.Kind == wire.KindBatch:
		s.clientBatch(msg.Raw)
	case err == nil:
		s.clientMessage(msg, nil)
	default:
		// Declared here, not for every message: errors.As's targets
		// live on the heap.
		var bad *BadMessage
		var tl *wire.TooLongError
		switch {
		case errors.As(err, &bad):
			msg.Raw = bad.Raw
			s.badFromClient(msg, bad.Err, nil)
		case errors.As(err, &tl):
			s.Oversized(true, tl.Size)
		}
	}
}

// badFromClient answers a message guard cannot relay: msg is what Parse
// found in it (its Raw at least).
func (s *Session) badFromClient(msg wire.Message, err error, b *batch) {
	var inv *wire.InvalidError
	var answer, id []byte
	detail := map[string]any{"size": len(msg.Raw), "error": err.Error()}
	switch TooDeep(err) {
	case wire.KindResponse:
		// The server could not read it either: its request is answered
		// with guard's error instead.
		s.clientResponse(msg, "is "+wire.ErrTooDeep.Error())
		return
	case wire.KindNotification:
		detail["method"] = msg.Method
		s.opts.Logger.Warn("client notification dropped", "method", msg.Method, "err", err)
		s.event("guard/dropped", guard.ClientToServer, detail)
		return
	}
	switch {
	case droppedResponse(err):
		// A response whose id no request of guard's or the server's
		// could have: it answers nothing, and a response is not answered.
		s.opts.Logger.Warn("client response dropped", "err", err)
		s.event("guard/dropped", guard.ClientToServer, detail)
		return
	case errors.As(err, &inv):
		id = inv.ID
		answer = wire.InvalidRequest(inv.Reason).Answer(id)
	default:
		answer = wire.ParseError("the message is not valid JSON").Answer(nil)
	}
	s.event("guard/refused", guard.ClientToServer, detail)
	s.toClient.push(item{msg: built(answer), batch: b})
}

// droppedResponse reports whether err refuses a response for its id alone:
// such a response is dropped, not answered.
func droppedResponse(err error) bool {
	var inv *wire.InvalidError
	return errors.As(err, &inv) && inv.Kind == wire.KindResponse && inv.Err == nil
}

// TooDeep is the kind of a message refused for its depth alone (see
// wire.ErrTooDeep), or zero.
func TooDeep(err error) wire.Kind {
	var inv *wire.InvalidError
	if errors.As(err, &inv) && errors.Is(inv.Err, wire.ErrTooDeep) {
		return inv.Kind
	}
	return 0
}

// unanswered reports whether a client message refused for err gets no
// answer from guard: a response (it answers the server, or nothing), or a
// notification nested too deep.
func unanswered(err error) bool {
	k := TooDeep(err)
	return droppedResponse(err) || k == wire.KindResponse || k == wire.KindNotification
}

// Oversized tells the session that the client sent a line over the limit.
func (s *Session) Oversized(fromClient bool, size int64) {
	if fromClient {
		s.event("guard/refused", guard.ClientToServer, map[string]any{"size": size, "error": fmt.Sprintf("line over max_message (%d bytes)", s.opts.MaxMessage)})
		s.toClient.push(item{msg: built(wire.InvalidRequest(
			fmt.Sprintf("the message is larger than max_message (%d bytes)", s.opts.MaxMessage)).Answer(nil))})
		return
	}
	s.event("guard/dropped", guard.ServerToClient, map[string]any{"size": size, "error": "server line over max_message"})
}

// overMaxRequest refuses a client's message larger than the server reads
// (max_request): a request is answered -32600 with its id, a notification
// dropped, an answer to the server's request replaced by guard's error.
func (s *Session) overMaxRequest(msg wire.Message, b *batch) {
	limit := fmt.Sprintf("larger than max_request (%d bytes)", s.opts.MaxRequest)
	detail := map[string]any{"size": len(msg.Raw), "method": msg.Method, "error": "message " + limit}
	switch msg.Kind {
	case wire.KindResponse:
		s.clientResponse(msg, "is "+limit)
	case wire.KindNotification:
		s.event("guard/dropped", guard.ClientToServer, detail)
	default:
		s.event("guard/refused", guard.ClientToServer, detail)
		s.toClient.push(item{msg: built(wire.InvalidRequest("the message is " + limit).Answer(msg.ID)), batch: b})
	}
}

// BatchRefused answers a JSON-RPC batch of a session whose revision does
// not take batches.
func BatchRefused() wire.Refusal {
	return wire.InvalidRequest("JSON-RPC batches are allowed only under protocol revision 2025-03-26")
}

func (s *Session) clientBatch(raw []byte) {
	s.mu.Lock()
	proto := s.protocol
	s.mu.Unlock()
	if proto != guard.Rev20250326 {
		s.event("guard/refused", guard.ClientToServer, map[string]any{"error": "batch outside 2025-03-26", "protocol": proto})
		s.toClient.push(item{msg: built(BatchRefused().Answer(nil))})
		return
	}
	parts, err := wire.SplitBatch(raw)
	if err != nil {
		s.badFromClient(wire.Message{Raw: raw}, err, nil)
		return
	}
	b := &batch{}
	msgs := make([]wire.Message, len(parts))
	errs := make([]error, len(parts))
	for i, p := range parts {
		msgs[i], errs[i] = wire.Parse(p)
		if (errs[i] != nil && !unanswered(errs[i])) || (errs[i] == nil && (msgs[i].Kind == wire.KindRequest || msgs[i].Kind == wire.KindBatch)) {
			b.want++
		}
	}
	for i := range parts {
		switch {
		case errs[i] != nil:
			s.badFromClient(msgs[i], errs[i], b)
		case msgs[i].Kind == wire.KindBatch:
			s.badFromClient(msgs[i], &wire.InvalidError{Reason: "a batch inside a batch"}, b)
		case msgs[i].Kind == wire.KindRequest:
			s.clientMessage(msgs[i], b)
		default:
			s.clientMessage(msgs[i], nil)
		}
	}
}

func (s *Session) clientMessage(msg wire.Message, b *batch) {
	if len(msg.Raw) > s.opts.MaxRequest {
		s.overMaxRequest(msg, b)
		return
	}
	switch msg.Kind {
	case wire.KindRequest:
		s.clientRequest(msg, b)
	case wire.KindNotification:
		s.clientNotification(msg)
	case wire.KindResponse:
		s.clientResponse(msg, "")
	}
}

// requestMeta holds the members of a request's params._meta that guard
// reads.
type requestMeta struct {
	protocol, caps, info, progressToken []byte
}

// readMeta finds the members of a _meta object guard reads, in one pass.
func readMeta(meta []byte) requestMeta {
	var m [4][]byte
	wire.Members(meta, []string{MetaProtocol, MetaCapabilities, metaClientInfo, "progressToken"}, m[:])
	return requestMeta{protocol: m[0], caps: m[1], info: m[2], progressToken: m[3]}
}

// noteClient records the revision and client of a session from initialize,
// or from each request's _meta on 2026-07-28 (meta).
func (s *Session) noteClient(msg wire.Message, meta requestMeta) {
	if msg.Method == "initialize" {
		var p struct {
			ProtocolVersion string `json:"protocolVersion"`
			ClientInfo      struct {
				Name    string `json:"name"`
				Version string `json:"version"`
			} `json:"clientInfo"`
			Capabilities json.RawMessage `json:"capabilities"`
		}
		if json.Unmarshal(msg.Params, &p) == nil {
			s.mu.Lock()
			s.client = guard.ClientInfo{Name: p.ClientInfo.Name, Version: p.ClientInfo.Version}
			s.elicitForm = formElicitation(p.Capabilities)
			if s.protocol == "" {
				s.protocol = p.ProtocolVersion
			}
			s.mu.Unlock()
		}
		return
	}
	pv, caps, ci := meta.protocol, meta.caps, meta.info
	if pv == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !wire.StringIs(pv, s.protocol) { // decoded when it changes
		v, ok := wire.String(pv)
		if !ok {
			return
		}
		s.protocol = v
	}
	// A client repeats the same capabilities and clientInfo in every
	// request: they are decoded when they change.
	if caps != nil {
		if !bytes.Equal(caps, s.meta.caps) {
			s.meta.caps = append(json.RawMessage(nil), caps...)
			s.meta.capsForm = formElicitation(caps)
		}
		s.elicitForm = s.meta.capsForm
	}
	if ci != nil {
		if !bytes.Equal(ci, s.meta.info) {
			s.meta.info = append(json.RawMessage(nil), ci...)
			var info struct {
				Name    string `json:"name"`
				Version string `json:"version"`
			}
			s.meta.client = guard.ClientInfo{}
			if json.Unmarshal(ci, &info) == nil && info.Name != "" {
				s.meta.client = guard.ClientInfo{Name: info.Name, Version: info.Version}
			}
		}
		if s.meta.client.Name != "" {
			s.client = s.meta.client
		}
	}
}

func (s *Session) clientRequest(msg wire.Message, b *batch) {
	var p toolCallParams
	if msg.Method == "tools/call" {
		p = readToolCall(msg.Params)
	} else {
		p.meta = readMeta(wire.ParamsMember(msg.Params, "_meta"))
	}
	s.noteClient(msg, p.meta)
	c := &call{
		id:      guard.NewID(),
		dir:     guard.ClientToServer,
		st:      intercept.New(msg.Method),
		origID:  append([]byte(nil), msg.ID...),
		origKey: wire.IDKey(msg.ID),
		start:   s.now(),
		reqSize: len(msg.Raw),
		batch:   b,
	}
	if s.opts.Tracer != nil {
		s.startTrace(msg, c, traceTarget(msg, p.name))
	}
	switch msg.Method {
	case "tools/call":
		s.pipe.toolCall(msg, c, p)
		return
	case "tools/list":
		c.nextPage = wire.ParamsMember(msg.Params, "cursor") != nil
	case "subscriptions/listen":
		s.lists.noteListen(msg, c)
	}
	if gatedClient(msg.Method) && !s.pipe.gate(msg, c, false) {
		return
	}
	if s.hub != nil && msg.Method == "subscriptions/listen" && s.hub.serve(msg, c) {
		return
	}
	s.forward(msg, c, false)
}

// forward records the request and sends it to the server once the record
// is durable. Ids are kept unless they collide with a request already in
// flight, in which case guard sends one of its own and restores the
// client's on the way back.
// recorded says the request record was written already (a held call).
func (s *Session) forward(msg wire.Message, c *call, recorded bool) {
	s.mu.Lock()
	if s.gone {
		s.mu.Unlock()
		s.pipe.serverGoneAnswer(c)
		return
	}
	defer c.decided()
	if c.withdrawn != nil && c.isWithdrawn() {
		// The client cancelled it while it was being decided: per the
		// specification, a cancelled request gets no answer.
		s.mu.Unlock()
		s.settle(c, ending{outcome: guard.OutcomeCancelled})
		return
	}
	if _, dup := s.byClient[c.origKey]; !dup {
		s.byClient[c.origKey] = c
	}
	if c.tr != nil {
		msg = c.tr.forwarded(s, msg)
	}
	fwd := mapID(msg, c, s.up)
	if !recorded {
		// Marked before the lock goes: a cancellation that finds the
		// call forwarded must not record its request a second time.
		c.recorded.Store(true)
	}
	s.mu.Unlock()
	if recorded {
		s.toServer.push(item{msg: fwd})
		return
	}
	wait := s.appendRecords(c, false, nil, s.record(guard.KindRequest, c))
	s.toServer.push(item{msg: fwd, wait: wait, fail: func(err error) wire.Message {
		s.opts.Logger.Error("request refused: audit write failed", "method", c.st.Method, "err", err)
		c.endTrace(err)
		s.forget(c)
		s.toClient.push(item{msg: refusal(c.origID)(err), batch: c.batch})
		return wire.Message{}
	}})
}

// mapID registers a request forwarded in one direction under the id it is
// sent with: its own, unless a request with that id is already in flight
// that way, in which case it gets one of guard's. It returns the message to
// send. The caller holds the session's lock.
func mapID(msg wire.Message, c *call, inFlight *IDMap[*call]) wire.Message {
	sent, key, renamed := inFlight.Add(c.origID, c)
	c.sentKey = key
	if renamed {
		c.sentID = sent
		msg = wire.WithID(msg, sent)
	}
	return msg
}

// forget drops a call from the maps.
func (s *Session) forget(c *call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byClient[c.origKey] == c {
		delete(s.byClient, c.origKey)
	}
	if x, _ := s.up.Get(c.sentKey); c.sentKey != "" && x == c {
		s.up.Drop(c.sentKey)
	}
}

// ending is how guard ends a client request itself.
type ending struct {
	outcome string
	// answer is what the client reads; nil for a cancelled request, which
	// gets no answer.
	answer []byte
	// withRequest records the request even when it has a record.
	withRequest bool
	// forwarded: the server has the request (the client cancelled it),
	// whose id toward the server stays reserved (cancelInFlight).
	forwarded bool
	detail    map[string]any // added to the outcome's detail
}

// settle is the one transition that ends a client request inside guard:
// record, then answer. The first caller records the outcome (and the
// request, when it has no record yet or withRequest says so) and sends the
// answer once the records are durable (guard's refusal if they could not
// be written); a later caller does nothing. A request without an answer
// (cancelled) has its records written behind it.
func (s *Session) settle(c *call, e ending) {
	defer c.decided()
	if !c.end() {
		return
	}
	if !e.forwarded {
		s.forget(c)
	}
	var recs []*guard.Record
	// A forwarded request is recorded by forward.
	if (!c.recorded.Swap(true) || e.withRequest) && !e.forwarded {
		recs = append(recs, s.record(guard.KindRequest, c))
	}
	out := s.record(guard.KindOutcome, c)
	out.Outcome = e.outcome
	out.ResponseSize = int64(len(e.answer))
	out.DurationMS = s.now().Sub(c.start).Milliseconds()
	if e.detail != nil {
		detail := maps.Clone(e.detail)
		maps.Copy(detail, c.st.Detail)
		d, _ := json.Marshal(detail)
		out.Detail = string(d)
	}
	recs = append(recs, out)
	wait := s.appendRecords(c, true, e.answer, recs...)
	if e.answer != nil {
		s.toClient.push(item{msg: built(e.answer), wait: wait, fail: refusal(c.origID), batch: c.batch})
		return
	}
	go func() {
		if err := wait.wait(); err != nil {
			s.opts.Logger.Error("audit record of a cancelled call failed", "method", c.st.Method, "err", err)
		}
	}()
	if c.batch != nil {
		s.toClient.push(item{batch: c.batch}) // its batch no longer waits for it
	}
}

func (s *Session) clientNotification(msg wire.Message) {
	if msg.Method == "notifications/cancelled" {
		s.clientCancelled(msg)
		return
	}
	if s.requestAsNotification(msg, guard.ClientToServer) {
		return
	}
	s.toServer.push(item{msg: msg})
}

// requestAsNotification drops, and records, a notification whose method the
// session's revision defines as a request of its sender (dir): no decision
// is made on a notification, and no record of it kept, so a server that
// acted on a tools/call without an id would run it unjudged. It reports
// whether it dropped msg.
func (s *Session) requestAsNotification(msg wire.Message, dir string) bool {
	if strings.HasPrefix(msg.Method, "notifications/") {
		// The method of every notification the protocol defines, and of
		// no request: almost every notification passes here, without
		// the lock.
		return false
	}
	s.mu.Lock()
	proto := s.protocol
	s.mu.Unlock()
	if !isRequestMethod(proto, msg.Method, dir == guard.ClientToServer) {
		return false
	}
	s.opts.Logger.Warn("a notification with a request's method dropped", "method", msg.Method, "direction", dir)
	s.event("guard/dropped", dir, map[string]any{"method": msg.Method, "size": len(msg.Raw),
		"error": "a notification (no id) whose method is a request: dropped, never forwarded"})
	return true
}

// clientCancelled withdraws a held call, or passes the cancellation on
// with the request id the server knows.
func (s *Session) clientCancelled(msg wire.Message) {
	rid := wire.ParamsMember(msg.Params, "requestId")
	if rid == nil {
		s.toServer.push(item{msg: msg})
		return
	}
	why, _ := wire.String(wire.ParamsMember(msg.Params, "reason"))
	if s.hub != nil && s.hub.cancelled(wire.IDKey(rid), why) {
		return
	}
	s.mu.Lock()
	c := s.byClient[wire.IDKey(rid)]
	if c != nil && c.sentKey == "" {
		// Held or still being decided: it never reaches the server.
		// Closed under s.mu, so that forward sees it.
		if c.withdrawn != nil && !c.isWithdrawn() {
			close(c.withdrawn)
		}
		s.mu.Unlock()
		return
	}
	if c != nil {
		s.cancelInFlight(c)
	}
	s.mu.Unlock()
	switch {
	case c == nil:
		s.toServer.push(item{msg: msg})
	case c.sentID != nil:
		s.toServer.push(item{msg: Unparsed(RewriteParamsMember(msg, "requestId", c.sentID))})
	default:
		s.toServer.push(item{msg: msg})
	}
	if c != nil {
		s.pipe.cancelled(c, why)
	}
}

// maxCancelled bounds the cancelled requests whose ids guard keeps
// reserved toward the server (a server need not answer them).
const maxCancelled = 1024

// cancelInFlight unlinks a forwarded request the client cancelled from the
// client's ids. Its id toward the server stays taken until the server
// answers (or maxCancelled later ones push it out), so that a new request
// reusing the client's id is sent under one of guard's and a late answer
// to the cancelled one cannot be taken for it. The caller holds s.mu.
func (s *Session) cancelInFlight(c *call) {
	c.cancelled = true
	if s.byClient[c.origKey] == c {
		delete(s.byClient, c.origKey)
	}
	if c.progBase > 0 {
		delete(s.progress, wire.IDKey(c.progress))
	}
	s.cancelledKeys = append(s.cancelledKeys, c.sentKey)
	if len(s.cancelledKeys) > maxCancelled {
		old := s.cancelledKeys[0]
		s.cancelledKeys = s.cancelledKeys[1:]
		if x, _ := s.up.Get(old); x != nil && x.ended.Load() {
			s.up.Drop(old)
		}
	}
}

// cancelled records the outcome of a forwarded request the client
// cancelled. Per the specification a cancelled request gets no answer: the
// server's, should one still come, is dropped (serverResponse finds the
// call ended).
func (pl *pipeline) cancelled(c *call, why string) {
	s := pl.s
	detail := map[string]any{"cancelled_by": "client"}
	if why != "" {
		detail["cancel_reason"] = why
	}
	s.settle(c, ending{outcome: guard.OutcomeCancelled, forwarded: true, detail: detail})
}

// clientResponse passes the client's answer to a server request back. An
// answer refused (refused says why: "is nested deeper than ...") is not
// passed: the server gets guard's error in its place, and the outcome is
// invalid.
func (s *Session) clientResponse(msg wire.Message, refused string) {
	size := len(msg.Raw)
	if refused != "" {
		msg = built(wire.Internal("Refused: the client's answer " + refused).Answer(msg.ID))
	}
	key := wire.IDKey(msg.ID)
	s.mu.Lock()
	c, _, _ := s.down.Take(key)
	s.mu.Unlock()
	if c == nil {
		s.event("guard/dropped", guard.ClientToServer, map[string]any{"error": "response with an unknown id", "id": json.RawMessage(msg.ID)})
		return
	}
	if c.own != nil { // an answer to guard's own request
		c.own <- msg
		return
	}
	ans, out := s.answered(msg, c)
	if refused != "" {
		invalidOutcome(out, size, refused)
	}
	wait := s.appendRecords(c, true, ans.Raw, out)
	s.toServer.push(item{msg: ans, wait: wait, fail: refusal(c.origID)})
}

// invalidOutcome marks the outcome of a request whose answer guard refused:
// why says what was wrong with it, size how large it was.
func invalidOutcome(out *guard.Record, size int, why string) {
	out.Outcome = guard.OutcomeInvalid
	out.ResponseSize = int64(size)
	d, _ := json.Marshal(map[string]string{"invalid_result": why})
	out.Detail = string(d)
}

// answered returns a response as its request's sender must read it (with
// the id it sent) and the outcome record of the request.
func (s *Session) answered(msg wire.Message, c *call) (wire.Message, *guard.Record) {
	ans := msg
	if c.sentID != nil {
		ans = wire.WithID(msg, c.origID)
	}
	out := s.record(guard.KindOutcome, c)
	out.Outcome, out.Result = responseOutcome(&s.opts, msg)
	out.ResponseSize = int64(len(msg.Raw))
	out.DurationMS = s.now().Sub(c.start).Milliseconds()
	return ans, out
}

// responseOutcome classifies a response and returns its recorded result.
func responseOutcome(o *Options, msg wire.Message) (outcome, result string) {
	if msg.Error != nil {
		return guard.OutcomeProtocolError, auditText(o, msg.Error)
	}
	outcome = guard.OutcomeOK
	var m [2][]byte
	wire.Members(msg.Result, []string{"isError", "resultType"}, m[:])
	if v := m[0]; v != nil && string(v) == "true" {
		outcome = guard.OutcomeToolError
	}
	if wire.StringIs(m[1], "input_required") {
		outcome = guard.OutcomeInputRequired
	}
	return outcome, auditText(o, msg.Result)
}

// auditText is what the audit keeps of arguments or a result: redacted,
// and for a text over MaxResult only its size and the SHA-256 of its bytes.
func auditText(o *Options, raw []byte) string {
	if len(raw) > o.MaxResult {
		sum := sha256.Sum256(raw)
		b, _ := json.Marshal(map[string]any{"truncated": true, "size": len(raw), "sha256": hex.EncodeToString(sum[:])})
		return string(b)
	}
	if o.Redactor == nil {
		return string(raw)
	}
	return o.Redactor.Redact(raw)
}

// refusedServerRequest answers, and reports, a server request whose id no
// client could answer (the answer's id is null then) or that is nested too
// deep: the server is told, as guard tells a client, and the client never
// sees it. (Apart from FromServer so that the error's target is allocated
// only for a message that failed to parse.)
func (s *Session) refusedServerRequest(raw []byte, err error) bool {
	var inv *wire.InvalidError
	if !errors.As(err, &inv) || inv.Kind != wire.KindRequest {
		return false
	}
	s.opts.Logger.Warn("server request refused", "err", err)
	s.event("guard/refused", guard.ServerToClient, map[string]any{"error": err.Error(), "size": len(raw)})
	s.toServer.push(item{msg: built(wire.InvalidRequest(inv.Reason).Answer(inv.ID))})
	return true
}

// OnServer takes one message of the server; err, when set, is about
// that message alone (a *BadMessage or a *wire.TooLongError).
func (s *Session) OnServer(msg wire.Message, err error) {
	if err == nil {
		s.fromServer(msg, nil)
		return
	}
	var bad *BadMessage // declared here, as in OnClient
	var tl *wire.TooLongError
	switch {
	case errors.As(err, &bad):
		msg.Raw = bad.Raw
		s.fromServer(msg, bad.Err)
	case errors.As(err, &tl):
		s.Oversized(false, tl.Size)
	}
}

// fromServer handles one message from the server, or one that did not
// parse (err).
func (s *Session) fromServer(msg wire.Message, err error) {
	raw := msg.Raw
	if err != nil && s.refusedServerRequest(raw, err) {
		return
	}
	if err != nil && TooDeep(err) == wire.KindResponse {
		// Its request still gets an answer: guard's error.
		s.serverResponse(msg, "is "+wire.ErrTooDeep.Error())
		return
	}
	if err != nil {
		s.opts.Logger.Warn("server message dropped", "err", err)
		s.event("guard/dropped", guard.ServerToClient, map[string]any{"error": "server wrote a line that is not JSON-RPC: " + err.Error(), "size": len(raw)})
		return
	}
	switch msg.Kind {
	case wire.KindBatch:
		parts, err := wire.SplitBatch(raw)
		if err != nil {
			s.event("guard/dropped", guard.ServerToClient, map[string]any{"error": err.Error()})
			return
		}
		for _, p := range parts {
			pm, err := ReadMessage(p)
			s.fromServer(pm, err)
		}
	case wire.KindResponse:
		s.serverResponse(msg, "")
	case wire.KindRequest:
		s.serverRequest(msg)
	case wire.KindNotification:
		s.serverNotification(msg)
	}
}

// serverResponse passes the server's answer on to the request's sender. An
// answer refused (refused says why: "is nested deeper than ...") is not:
// guard's error stands in for it, read by guard's own requests as the
// server's error, and the client reads a refusal (as for an ambiguous
// result); the outcome is invalid.
func (s *Session) serverResponse(msg wire.Message, refused string) {
	size := len(msg.Raw)
	if refused != "" {
		msg = built(wire.Internal("Refused: the server's answer " + refused).Answer(msg.ID))
	}
	key := wire.IDKey(msg.ID)
	s.mu.Lock()
	c, _, _ := s.up.Take(key)
	cancelled := false
	if c != nil {
		if s.byClient[c.origKey] == c {
			delete(s.byClient, c.origKey)
		}
		cancelled = c.cancelled
	}
	s.mu.Unlock()
	if c == nil {
		s.event("guard/dropped", guard.ServerToClient, map[string]any{"error": "response with an unknown id", "id": json.RawMessage(msg.ID)})
		return
	}
	if cancelled {
		// The client cancelled it: it must not get an answer.
		s.event("guard/dropped", guard.ServerToClient, map[string]any{"error": "an answer to a request the client cancelled", "call": c.id, "method": c.st.Method})
		return
	}
	if c.own != nil {
		c.own <- msg
		return
	}
	if !c.end() {
		return
	}
	if c.tr != nil {
		c.tr.answered(msg)
	}
	switch c.st.Method {
	case "initialize", "server/discover":
		if v := wire.ParamsMember(msg.Result, "protocolVersion"); v != nil && c.st.Method == "initialize" {
			if pv, ok := wire.String(v); ok {
				s.mu.Lock()
				s.protocol = pv
				s.mu.Unlock()
			}
		}
		if msg.Result != nil && s.lists.rewritesListing() {
			msg = declareListChanged(msg)
		}
	case "tools/list":
		if msg.Result != nil && s.lists.rewritesListing() {
			s.lists.listed(msg, c)
			return
		}
		if msg.Result != nil {
			s.lists.learnTools(msg.Result, false)
		}
	case "subscriptions/listen":
		s.mu.Lock()
		delete(s.view.listens, c.origKey)
		s.mu.Unlock()
	}
	ans, out := s.answered(msg, c)
	data := ans.Raw
	switch {
	case refused != "":
		invalidOutcome(out, size, refused)
		data = s.pipe.refuseResult(c, "the server's result "+refused+" (clients cannot read it)")
	case msg.Result != nil && (c.st.Method == "tools/call" || c.st.Method == "resources/read" || c.st.Method == "prompts/get"):
		if err := wire.StrictResult(msg.Result, c.st.Method == "tools/call"); err != nil {
			// The record keeps the result, for what the server said.
			invalidOutcome(out, size, err.Error())
			data = s.pipe.refuseResult(c, "the server's result is ambiguous (clients would read it differently): "+err.Error())
		}
	}
	if out.Outcome == guard.OutcomeOK && c.st.Method == "tools/call" {
		data = s.pipe.checkOutput(c, msg, data, out)
	}
	if s.opts.MaskResults != nil && (c.st.Method == "tools/call" || c.st.Method == "resources/read" || c.st.Method == "prompts/get") {
		if masked, n := s.opts.MaskResults(data); n > 0 {
			data = masked
		}
	}
	if out.Outcome == guard.OutcomeInputRequired && c.st.Method == "tools/call" {
		s.pipe.noteRound(c, msg.Result)
	}
	if c.progBase > 0 {
		s.mu.Lock()
		delete(s.progress, wire.IDKey(c.progress))
		s.mu.Unlock()
	}
	if len(data) != len(ans.Raw) || &data[0] != &ans.Raw[0] {
		ans = built(data) // guard's own answer, or masked
	}
	wait := s.appendRecords(c, true, ans.Raw, out)
	s.toClient.push(item{msg: ans, wait: wait, fail: refusal(c.origID), batch: c.batch})
}

// learnTools updates the catalog from one tools/list page and persists it.
func (ls *lister) learnTools(result []byte, replace bool) (next string) {
	s := ls.s
	tools, next, err := parseTools(s.opts.Server, result)
	if err != nil {
		s.opts.Logger.Warn("tools/list", "server", s.opts.Server, "err", err)
	}
	s.catalog.add(tools, replace)
	s.lists.persistTools(tools)
	return next
}

// persistTools records tool definitions in the catalog store, off the
// relay's path.
func (ls *lister) persistTools(tools []guard.Tool) {
	s := ls.s
	if s.opts.Catalog != nil && len(tools) > 0 {
		seen := s.now()
		s.lists.persistStart()
		go func() {
			defer s.lists.persistEnd()
			s.lists.scanTools(tools)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := s.opts.Catalog.RecordTools(ctx, s.opts.Server, tools, seen, s.opts.AcceptNewTools); err != nil {
				s.opts.Logger.Error("tool catalog not recorded", "server", s.opts.Server, "err", err)
			}
		}()
	}
}

func (s *Session) serverRequest(msg wire.Message) {
	c := &call{
		id:      guard.NewID(),
		dir:     guard.ServerToClient,
		st:      intercept.New(msg.Method),
		origID:  append([]byte(nil), msg.ID...),
		origKey: wire.IDKey(msg.ID),
		start:   s.now(),
		reqSize: len(msg.Raw),
	}
	if s.opts.Tracer != nil {
		s.startTrace(msg, c, "")
	}
	if gatedServer(msg.Method) && !s.pipe.gate(msg, c, true) {
		return
	}
	s.mu.Lock()
	fwd := mapID(msg, c, s.down)
	s.mu.Unlock()
	wait := s.appendRecords(c, false, nil, s.record(guard.KindRequest, c))
	s.toClient.push(item{msg: fwd, wait: wait, fail: func(err error) wire.Message {
		c.endTrace(err)
		s.mu.Lock()
		s.down.Drop(c.sentKey)
		s.mu.Unlock()
		s.toServer.push(item{msg: refusal(c.origID)(err)})
		return wire.Message{}
	}})
}

func (s *Session) serverNotification(msg wire.Message) {
	if s.requestAsNotification(msg, guard.ServerToClient) {
		return
	}
	if s.hub != nil && s.hub.fromServer(msg) {
		return
	}
	switch msg.Method {
	case "notifications/subscriptions/acknowledged":
		s.toClient.push(item{msg: s.lists.acknowledged(msg)})
		return
	case "notifications/tools/list_changed":
		s.toClient.push(item{msg: msg})
		go s.pipe.refreshTools()
		return
	case "notifications/progress":
		if tok := wire.ParamsMember(msg.Params, "progressToken"); tok != nil {
			s.mu.Lock()
			c := s.progress[wire.IDKey(tok)]
			s.mu.Unlock()
			if c != nil {
				s.toClient.push(item{msg: Unparsed(shiftProgress(msg, c.progBase))})
				return
			}
		}
	}
	s.toClient.push(item{msg: msg})
}

// ServerGone answers every request still waiting on the server and records
// the exit. status describes how the server ended ("status 1", "signal 9").
func (s *Session) ServerGone(code int, status string) {
	s.mu.Lock()
	s.gone = true
	s.exit = status
	pending := make([]*call, 0, s.up.Size())
	s.up.Each(func(k string, c *call, _ []byte) {
		if !c.cancelled { // a cancelled one is recorded already
			pending = append(pending, c)
		}
		s.up.Drop(k)
	})
	for _, c := range s.byClient {
		if c.sentKey == "" { // held, or being decided: never forwarded
			pending = append(pending, c)
		}
	}
	s.down.Each(func(k string, _ *call, _ []byte) { s.down.Drop(k) })
	s.mu.Unlock()
	s.event("guard/server-exit", guard.ServerToClient, map[string]any{"status": status, "code": code, "pending": len(pending)})
	for _, c := range pending {
		if c.own != nil {
			close(c.own)
			continue
		}
		s.pipe.serverGoneAnswer(c)
	}
	if s.hub != nil {
		s.hub.serverGone()
	}
	s.cancel()
	s.holds.endHolds()
}

func (pl *pipeline) serverGoneAnswer(c *call) {
	s := pl.s
	s.mu.Lock()
	status := s.exit
	s.mu.Unlock()
	if status == "" {
		status = "status unknown"
	}
	msg := fmt.Sprintf("The server exited (%s) before answering", status)
	s.settle(c, ending{outcome: guard.OutcomeUpstreamFailed, answer: wire.Internal(msg).Answer(c.origID)})
}

// refuseResult is what the client reads in place of a result guard
// refused, text saying why: a tool error for tools/call (as for a result
// that breaks its outputSchema), -32603 for other methods, resources/read
// and prompts/get among them, which have no error result. A result is
// refused when clients would read it differently from guard (a member name
// given twice at any depth: a JavaScript or Python client reads the last,
// guard's checks the first; invalid UTF-8; in a tools/call result a case
// variant of a member the protocol defines) or cannot read it at all
// (nested too deep).
func (pl *pipeline) refuseResult(c *call, text string) []byte {
	s := pl.s
	s.opts.Logger.Warn("server result refused", "method", c.st.Method, "tool", c.st.Tool, "why", text)
	text = "Refused: " + text
	if c.st.Method == "tools/call" {
		return intercept.ToolError(c.origID, text)
	}
	return wire.Internal(text).Answer(c.origID)
}

// checkOutput validates a final tools/call result against the tool's
// outputSchema. With output: enforce a result that breaks it is replaced by
// an error the model reads; with warn it passes. Either way the record
// keeps the result and the violation.
func (pl *pipeline) checkOutput(c *call, msg wire.Message, data []byte, out *guard.Record) []byte {
	s := pl.s
	if s.opts.Contracts == nil || c.def == nil {
		return data
	}
	v, err := s.opts.Contracts.Result(c.def, msg.Result)
	if err != nil {
		if s.opts.IgnoreBadSchemas {
			return data
		}
		v = "the outputSchema cannot be used: " + err.Error()
	}
	if v == "" {
		return data
	}
	mode := "enforce"
	if s.opts.OutputWarn {
		mode = "warn"
	}
	d, _ := json.Marshal(map[string]string{"output_violation": v, "output": mode})
	out.Detail = string(d)
	if s.opts.OutputWarn {
		return data
	}
	out.Outcome = guard.OutcomeToolError
	return intercept.ToolError(c.origID, "The tool's result does not match its output schema: "+v)
}

// formElicitation reports whether client capabilities declare form
// elicitation: {} (before modes existed) or with a form member.
func formElicitation(caps json.RawMessage) bool {
	var c struct {
		Elicitation *struct {
			Form *json.RawMessage `json:"form"`
			URL  *json.RawMessage `json:"url"`
		} `json:"elicitation"`
	}
	if len(caps) == 0 || json.Unmarshal(caps, &c) != nil || c.Elicitation == nil {
		return false
	}
	return c.Elicitation.Form != nil || c.Elicitation.URL == nil
}
