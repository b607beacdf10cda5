package proxy

import (
	"bytes"
	"encoding/json"
	"slices"
	"sync"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/proxy/intercept"
	"github.com/guard-mcp/guard/wire"
)

// On the session-less revision (2026-07-28) guard serve relays the
// requests of all a caller's clients over one connection to a server
// process, and such a server may keep a single subscriptions/listen per
// connection for each kind of list change: the go-sdk's does, where a
// second listen replaces the first and the end of either ends both. Were
// the clients' listens passed on, one client's would silence another's.
// So on such a relay (Options.ShareListens) guard holds one listen of its
// own for the list changes, and serves itself each client listen that asks
// for list changes only: it acknowledges it with what the server agreed
// to, passes every list change to each listen that asked for that kind,
// under that listen's id, and records it as any other request. A listen
// that asks for more (resource subscriptions) goes to the server as
// before; so does every listen when the server refuses guard's.

// listKinds are the list changes a subscriptions/listen can ask for, by
// the notification that tells each.
var listKinds = map[string]string{
	"notifications/tools/list_changed":     "toolsListChanged",
	"notifications/prompts/list_changed":   "promptsListChanged",
	"notifications/resources/list_changed": "resourcesListChanged",
}

// hubKinds is the order in which acknowledgements name them.
var hubKinds = []string{"toolsListChanged", "promptsListChanged", "resourcesListChanged"}

// listenHub is guard's own listen on a shared connection, and the client
// listens it serves.
type listenHub struct {
	s  *Session
	mu sync.Mutex
	// own is guard's listen toward the server (nil until opened, and once
	// it ended); ready is closed when the server acknowledged it (agreed
	// then says to what) or ended it (agreed nil).
	own    *call
	ready  chan struct{}
	agreed map[string]bool
	// clients are the client listens served, by the client's id key;
	// kinds is nil until the client was acknowledged.
	clients map[string]*hubClient
}

type hubClient struct {
	c     *call
	asked map[string]bool
	kinds map[string]bool
}

func newListenHub(s *Session) *listenHub {
	return &listenHub{s: s, clients: map[string]*hubClient{}}
}

// listChangesOnly returns the kinds a listen's notifications ask for when
// it asks for list changes and nothing else; nil otherwise.
func listChangesOnly(params []byte) map[string]bool {
	var n map[string]json.RawMessage
	if json.Unmarshal(wire.ParamsMember(params, "notifications"), &n) != nil || len(n) == 0 {
		return nil
	}
	asked := map[string]bool{}
	for k, v := range n {
		switch {
		case !slices.Contains(hubKinds, k):
			return nil
		case bytes.Equal(v, []byte("true")):
			asked[k] = true
		case !bytes.Equal(v, []byte("false")):
			return nil
		}
	}
	if len(asked) == 0 {
		return nil
	}
	return asked
}

// serve takes a client's subscriptions/listen, already decided, when it
// asks for list changes only, and reports whether it did.
func (h *listenHub) serve(msg wire.Message, c *call) bool {
	asked := listChangesOnly(msg.Params)
	if asked == nil {
		return false
	}
	h.mu.Lock()
	h.clients[c.origKey] = &hubClient{c: c, asked: asked}
	h.mu.Unlock()
	ready := h.open()
	go h.acknowledge(msg, c, ready)
	return true
}

// open opens guard's listen unless it is open, and returns the channel
// closed once the server answered it.
func (h *listenHub) open() chan struct{} {
	s := h.s
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.own != nil {
		return h.ready
	}
	ready := make(chan struct{})
	s.mu.Lock()
	if s.gone {
		s.mu.Unlock()
		close(ready)
		return ready
	}
	id := s.up.Own()
	own := &call{st: intercept.New("subscriptions/listen"), sentID: id, sentKey: wire.IDKey(id), own: make(chan wire.Message, 1)}
	s.up.Put(own.sentKey, own)
	meta := map[string]any{MetaProtocol: s.protocol, MetaCapabilities: json.RawMessage(`{}`)}
	if s.meta.caps != nil {
		meta[MetaCapabilities] = s.meta.caps
	}
	if s.meta.info != nil {
		meta[metaClientInfo] = s.meta.info
	}
	s.mu.Unlock()
	all := map[string]bool{}
	for _, k := range hubKinds {
		all[k] = true
	}
	data, err := wire.Request(id, "subscriptions/listen", map[string]any{"_meta": meta, "notifications": all})
	if err != nil {
		s.forget(own)
		close(ready)
		return ready
	}
	h.own, h.ready, h.agreed = own, ready, nil
	s.toServer.push(item{msg: Unparsed(data)})
	go h.ended(own)
	return ready
}

// acknowledgedLocked reads the server's acknowledgement of guard's listen.
// The caller holds h.mu.
func (h *listenHub) acknowledgedLocked(msg wire.Message) {
	if h.agreed != nil {
		return
	}
	var n map[string]json.RawMessage
	_ = json.Unmarshal(wire.ParamsMember(msg.Params, "notifications"), &n)
	h.agreed = map[string]bool{}
	for _, k := range hubKinds {
		h.agreed[k] = bytes.Equal(n[k], []byte("true"))
	}
	close(h.ready)
}

// acknowledge waits for guard's listen to be acknowledged, then records
// the client's listen and acknowledges it; when guard's listen is
// refused, the client's goes to the server.
func (h *listenHub) acknowledge(msg wire.Message, c *call, ready chan struct{}) {
	s := h.s
	t := time.NewTimer(s.opts.RefreshTimeout)
	defer t.Stop()
	select {
	case <-ready:
	case <-t.C:
	}
	h.mu.Lock()
	hc := h.clients[c.origKey]
	if hc == nil || hc.c != c {
		h.mu.Unlock()
		return // the client cancelled it meanwhile
	}
	if h.agreed == nil || h.ready != ready {
		delete(h.clients, c.origKey)
		h.mu.Unlock()
		s.forward(msg, c, false)
		return
	}
	hc.kinds = map[string]bool{}
	notifications := []byte(`{}`)
	for _, k := range hubKinds {
		// guard tells of tool list changes itself where it rewrites
		// listings (relist).
		if hc.asked[k] && (h.agreed[k] || k == "toolsListChanged" && s.lists.rewritesListing()) {
			hc.kinds[k] = true
			notifications = wire.SetMember(notifications, k, []byte("true"))
		}
	}
	c.recorded.Store(true)
	wait := s.appendRecords(c, false, nil, s.record(guard.KindRequest, c))
	ack := []byte(`{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{}}`)
	params := setIn(nil, "_meta", setIn(nil, MetaSubscription, c.origID))
	ack = wire.SetMember(ack, "params", wire.SetMember(params, "notifications", notifications))
	// Pushed under h.mu: no list change reaches the stream before it.
	// push may deliver at once, fail included: fail must not take h.mu
	// (ended keeps list changes from a listen refused meanwhile).
	s.toClient.push(item{msg: built(ack), wait: wait, fail: func(err error) wire.Message {
		s.opts.Logger.Error("request refused: audit write failed", "method", c.st.Method, "err", err)
		c.end()
		go h.drop(c)
		return refusal(c.origID)(err)
	}})
	h.mu.Unlock()
}

// drop forgets a client listen.
func (h *listenHub) drop(c *call) {
	s := h.s
	h.mu.Lock()
	if hc := h.clients[c.origKey]; hc != nil && hc.c == c {
		delete(h.clients, c.origKey)
	}
	h.mu.Unlock()
	s.mu.Lock()
	if s.view.listens[c.origKey] == c {
		delete(s.view.listens, c.origKey)
	}
	s.mu.Unlock()
}

// cancelled ends a client listen guard serves, which the client
// cancelled; it reports whether key names one.
func (h *listenHub) cancelled(key, why string) bool {
	h.mu.Lock()
	hc := h.clients[key]
	h.mu.Unlock()
	if hc == nil {
		return false
	}
	h.drop(hc.c)
	detail := map[string]any{"cancelled_by": "client"}
	if why != "" {
		detail["cancel_reason"] = why
	}
	h.s.settle(hc.c, ending{outcome: guard.OutcomeCancelled, detail: detail})
	return true
}

// fromServer takes a notification of guard's listen, and reports whether
// msg was one.
func (h *listenHub) fromServer(msg wire.Message) bool {
	const ack = "notifications/subscriptions/acknowledged"
	kind := listKinds[msg.Method]
	if kind == "" && msg.Method != ack {
		return false // a notification guard's listen does not ask for
	}
	sub := wire.MetaMember(msg.Params, MetaSubscription)
	if sub == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.own == nil || wire.IDKey(sub) != h.own.sentKey {
		return false
	}
	if msg.Method == ack {
		h.acknowledgedLocked(msg)
		return true
	}
	meta := wire.ParamsMember(msg.Params, "_meta")
	for _, hc := range h.clients {
		if !hc.kinds[kind] || hc.c.ended.Load() {
			continue
		}
		params := setIn(msg.Params, "_meta", setIn(meta, MetaSubscription, hc.c.origID))
		h.s.toClient.push(item{msg: built(wire.SetMember(msg.Raw, "params", params))})
	}
	if kind == "toolsListChanged" {
		go h.s.pipe.refreshTools()
	}
	return true
}

// ended waits for the server to end guard's listen, then ends the client
// listens it served with the server's answer under each one's id. When
// the server is gone instead, serverGone answers them.
func (h *listenHub) ended(own *call) {
	s := h.s
	ans, ok := <-own.own
	h.mu.Lock()
	if h.own == own {
		h.own = nil
		if h.agreed == nil {
			close(h.ready)
		}
		h.agreed = nil // a listen waiting for it goes to the server
	}
	if !ok {
		h.mu.Unlock()
		return
	}
	var served []*call
	for k, hc := range h.clients {
		if hc.kinds != nil {
			served = append(served, hc.c)
			delete(h.clients, k)
		}
	}
	h.mu.Unlock()
	for _, c := range served {
		h.drop(c)
		out, _ := responseOutcome(&s.opts, ans)
		answer := wire.WithID(ans, c.origID).Raw
		if ans.Result != nil {
			result := setIn(ans.Result, "_meta", setIn(wire.ParamsMember(ans.Result, "_meta"), MetaSubscription, c.origID))
			answer = wire.SetMember(answer, "result", result)
		}
		s.settle(c, ending{outcome: out, answer: answer})
	}
}

// serverGone answers every client listen the hub holds as for a server
// gone, before the session's output closes (Session.ServerGone).
func (h *listenHub) serverGone() {
	h.mu.Lock()
	clients := make([]*call, 0, len(h.clients))
	for k, hc := range h.clients {
		clients = append(clients, hc.c)
		delete(h.clients, k)
	}
	h.mu.Unlock()
	for _, c := range clients {
		h.drop(c)
		h.s.pipe.serverGoneAnswer(c)
	}
}

// setIn is wire.SetMember on an object that may be absent.
func setIn(obj []byte, key string, value []byte) []byte {
	if len(bytes.TrimSpace(obj)) == 0 || bytes.Equal(obj, []byte("null")) {
		obj = []byte(`{}`)
	}
	return wire.SetMember(obj, key, value)
}
