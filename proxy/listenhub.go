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
// connection for each kind of list change, and for each resource: the
// go-sdk's does, where a second listen replaces the first and the end of
// either ends both. Were the clients' listens passed on, one client's
// would silence another's. So on such a relay (Options.ShareListens)
// guard holds listens of its own, one for the list changes and one for
// each resource a client subscribes to, and serves itself each client
// listen that asks for these and nothing else: it acknowledges it with
// what the server agreed to, passes every notification to each listen
// that asked for it, under that listen's id, and records it as any other
// request. A resource's listen is cancelled once no client listens to it;
// a new one for the same resource waits for the server to end the old (a
// go-sdk server unsubscribes the resource when a listen ends, whichever
// listen holds it then). A listen that asks for something else goes to
// the server as before; so does every listen when the server refuses
// guard's.

// listKinds are the list changes a subscriptions/listen can ask for, by
// the notification that tells each.
var listKinds = map[string]string{
	"notifications/tools/list_changed":     "toolsListChanged",
	"notifications/prompts/list_changed":   "promptsListChanged",
	"notifications/resources/list_changed": "resourcesListChanged",
}

// hubKinds is the order in which acknowledgements name them.
var hubKinds = []string{"toolsListChanged", "promptsListChanged", "resourcesListChanged"}

const (
	// resourceSubscriptions is the member of a listen's notifications that
	// names the resources it subscribes to.
	resourceSubscriptions = "resourceSubscriptions"
	// resourceUpdated tells a subscribed resource's change.
	resourceUpdated = "notifications/resources/updated"
	// maxHubResources bounds the resources guard listens to at once on one
	// connection: a client listen that would take it past goes to the
	// server as it is.
	maxHubResources = 1024
)

// listenHub is guard's own listens on a shared connection, and the client
// listens they serve.
type listenHub struct {
	s  *Session
	mu sync.Mutex
	// lists is guard's listen for list changes (nil until opened, and once
	// it ended); resources are its listens for resources, by URI, a
	// cancelled one until the server ended it; bySent are all of them by
	// the id guard sent.
	lists     *hubListen
	resources map[string]*hubListen
	bySent    map[string]*hubListen
	// clients are the client listens served, by the client's id key.
	clients map[string]*hubClient
}

// hubListen is one listen of guard's toward the server.
type hubListen struct {
	own *call  // nil until sent
	uri string // the resource it subscribes to; "" for list changes
	// ready is closed once the server acknowledged the listen (agreed is
	// then what it agreed to: list kinds, or the URI; nil before) or
	// ended it; done once it ended (ended).
	ready, done chan struct{}
	ended       bool
	agreed      map[string]bool
	users       int  // the client listens that count on a resource's
	cancelled   bool // guard cancelled it: no client listens to it
}

type hubClient struct {
	c     *call
	asked map[string]bool // the list kinds asked for
	uris  []string        // the resources asked for
	// on are the listens of guard's it waits for, then those it counts on.
	on []*hubListen
	// kinds and subscribed are what it hears, once acknowledged (nil
	// before).
	kinds      map[string]bool
	subscribed map[string]bool
}

func newListenHub(s *Session) *listenHub {
	return &listenHub{s: s, resources: map[string]*hubListen{}, bySent: map[string]*hubListen{}, clients: map[string]*hubClient{}}
}

// hubRequest reads what a listen's notifications ask for: list kinds and
// resources. ok is false unless they ask for these only, and for at least
// one.
func hubRequest(params []byte) (kinds map[string]bool, uris []string, ok bool) {
	var n map[string]json.RawMessage
	if json.Unmarshal(wire.ParamsMember(params, "notifications"), &n) != nil || len(n) == 0 {
		return nil, nil, false
	}
	kinds = map[string]bool{}
	for k, v := range n {
		switch {
		case k == resourceSubscriptions:
			var list []string
			if json.Unmarshal(v, &list) != nil {
				return nil, nil, false
			}
			for _, u := range list {
				if u == "" {
					return nil, nil, false
				}
				if !slices.Contains(uris, u) {
					uris = append(uris, u)
				}
			}
		case !slices.Contains(hubKinds, k):
			return nil, nil, false
		case bytes.Equal(v, []byte("true")):
			kinds[k] = true
		case !bytes.Equal(v, []byte("false")):
			return nil, nil, false
		}
	}
	if len(kinds) == 0 && len(uris) == 0 {
		return nil, nil, false
	}
	return kinds, uris, true
}

// serve takes a client's subscriptions/listen, already decided, when it
// asks only for what guard's listens serve, and reports whether it did.
func (h *listenHub) serve(msg wire.Message, c *call) bool {
	kinds, uris, ok := hubRequest(msg.Params)
	if !ok {
		return false
	}
	h.mu.Lock()
	fresh := 0
	for _, u := range uris {
		if h.resources[u] == nil {
			fresh++
		}
	}
	if len(h.resources)+fresh > maxHubResources {
		h.mu.Unlock()
		h.s.opts.Logger.Warn("a client listen goes to the server as it is: guard listens to as many resources as it may on this connection",
			"resources", len(h.resources), "max", maxHubResources)
		return false
	}
	hc := &hubClient{c: c, asked: kinds, uris: uris}
	if len(kinds) > 0 {
		hc.on = append(hc.on, h.listsLocked())
	}
	for _, u := range uris {
		hc.on = append(hc.on, h.resourceLocked(u))
	}
	h.clients[c.origKey] = hc
	h.mu.Unlock()
	go h.acknowledge(msg, hc)
	return true
}

// listsLocked returns guard's listen for list changes, opening it unless
// it is open. The caller holds h.mu.
func (h *listenHub) listsLocked() *hubListen {
	if h.lists != nil {
		return h.lists
	}
	hl := &hubListen{ready: make(chan struct{}), done: make(chan struct{})}
	h.lists = hl
	all := map[string]bool{}
	for _, k := range hubKinds {
		all[k] = true
	}
	h.startLocked(hl, all)
	return hl
}

// resourceLocked returns guard's listen for uri, counting one more client
// listen on it, and opens it unless it is open. The caller holds h.mu.
func (h *listenHub) resourceLocked(uri string) *hubListen {
	prev := h.resources[uri]
	if prev != nil && !prev.cancelled {
		prev.users++
		return prev
	}
	hl := &hubListen{uri: uri, users: 1, ready: make(chan struct{}), done: make(chan struct{})}
	h.resources[uri] = hl
	notifications := map[string]any{resourceSubscriptions: []string{uri}}
	if prev == nil {
		h.startLocked(hl, notifications)
		return hl
	}
	// The server still holds the one cancelled: were the new one sent
	// first, the old one's end would unsubscribe the resource from it.
	go func() {
		t := time.NewTimer(h.s.opts.RefreshTimeout)
		defer t.Stop()
		select {
		case <-prev.done:
		case <-t.C:
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if hl.users > 0 {
			h.startLocked(hl, notifications)
		} else {
			h.endUnsentLocked(hl)
		}
	}()
	return hl
}

// startLocked sends hl to the server. The caller holds h.mu.
func (h *listenHub) startLocked(hl *hubListen, notifications any) {
	s := h.s
	s.mu.Lock()
	if s.gone {
		s.mu.Unlock()
		h.endUnsentLocked(hl)
		return
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
	data, err := wire.Request(id, "subscriptions/listen", map[string]any{"_meta": meta, "notifications": notifications})
	if err != nil {
		s.forget(own)
		h.endUnsentLocked(hl)
		return
	}
	hl.own = own
	h.bySent[own.sentKey] = hl
	s.toServer.push(item{msg: Unparsed(data)})
	go h.ended(hl)
}

// endUnsentLocked ends a listen never sent. The caller holds h.mu.
func (h *listenHub) endUnsentLocked(hl *hubListen) {
	if hl.ended {
		return
	}
	hl.ended = true
	close(hl.ready)
	close(hl.done)
	h.forgetLocked(hl)
}

// forgetLocked takes an ended listen out of the hub. The caller holds h.mu.
func (h *listenHub) forgetLocked(hl *hubListen) {
	if h.lists == hl {
		h.lists = nil
	}
	if hl.uri != "" && h.resources[hl.uri] == hl {
		delete(h.resources, hl.uri)
	}
	if hl.own != nil && h.bySent[hl.own.sentKey] == hl {
		delete(h.bySent, hl.own.sentKey)
	}
}

// acknowledgedLocked reads the server's acknowledgement of one of guard's
// listens. The caller holds h.mu.
func (h *listenHub) acknowledgedLocked(hl *hubListen, msg wire.Message) {
	if hl.agreed != nil || hl.ended {
		return
	}
	notifications := wire.ParamsMember(msg.Params, "notifications")
	hl.agreed = map[string]bool{}
	if hl.uri != "" {
		var list []string
		_ = json.Unmarshal(wire.ParamsMember(notifications, resourceSubscriptions), &list)
		hl.agreed[hl.uri] = slices.Contains(list, hl.uri)
	} else {
		var n map[string]json.RawMessage
		_ = json.Unmarshal(notifications, &n)
		for _, k := range hubKinds {
			hl.agreed[k] = bytes.Equal(n[k], []byte("true"))
		}
	}
	close(hl.ready)
}

// acknowledge waits for the listens of guard's a client listen needs to
// be acknowledged, then records the client's listen and acknowledges it
// with what they agreed to. When one of them was refused, or ended having
// agreed to what the client asked, the client's listen goes to the server.
func (h *listenHub) acknowledge(msg wire.Message, hc *hubClient) {
	s, c := h.s, hc.c
	t := time.NewTimer(s.opts.RefreshTimeout)
	defer t.Stop()
wait:
	for _, hl := range hc.on {
		select {
		case <-hl.ready:
		case <-t.C:
			break wait
		}
	}
	h.mu.Lock()
	if h.clients[c.origKey] != hc {
		h.mu.Unlock()
		return // the client cancelled it meanwhile
	}
	kinds, subscribed := map[string]bool{}, map[string]bool{}
	var on []*hubListen
	fallback := false
	for _, hl := range hc.on {
		if hl.agreed == nil {
			fallback = true
			break
		}
		counts := false
		if hl.uri == "" {
			for _, k := range hubKinds {
				// guard tells of tool list changes itself where it
				// rewrites listings (relist).
				if hc.asked[k] && (hl.agreed[k] || k == "toolsListChanged" && s.lists.rewritesListing()) {
					kinds[k] = true
					counts = counts || hl.agreed[k]
				}
			}
		} else if hl.agreed[hl.uri] {
			subscribed[hl.uri] = true
			counts = true
		}
		if counts && hl.ended {
			fallback = true
			break
		}
		if counts || hl.uri == "" && len(kinds) > 0 {
			on = append(on, hl)
		}
	}
	if fallback {
		delete(h.clients, c.origKey)
		h.releaseLocked(hc)
		h.mu.Unlock()
		s.forward(msg, c, false)
		return
	}
	for _, hl := range hc.on {
		if !slices.Contains(on, hl) {
			h.releaseOneLocked(hl)
		}
	}
	hc.on, hc.kinds, hc.subscribed = on, kinds, subscribed
	notifications := []byte(`{}`)
	for _, k := range hubKinds {
		if kinds[k] {
			notifications = wire.SetMember(notifications, k, []byte("true"))
		}
	}
	if len(subscribed) > 0 {
		var list []string
		for _, u := range hc.uris {
			if subscribed[u] {
				list = append(list, u)
			}
		}
		b, _ := json.Marshal(list)
		notifications = wire.SetMember(notifications, resourceSubscriptions, b)
	}
	c.recorded.Store(true)
	wait := s.appendRecords(c, false, nil, s.record(guard.KindRequest, c))
	ack := []byte(`{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{}}`)
	params := setIn(nil, "_meta", setIn(nil, MetaSubscription, c.origID))
	ack = wire.SetMember(ack, "params", wire.SetMember(params, "notifications", notifications))
	// Pushed under h.mu: no notification reaches the stream before it.
	// push may deliver at once, fail included: fail must not take h.mu
	// (ended keeps notifications from a listen refused meanwhile).
	s.toClient.push(item{msg: built(ack), wait: wait, fail: func(err error) wire.Message {
		s.opts.Logger.Error("request refused: audit write failed", "method", c.st.Method, "err", err)
		c.end()
		go h.drop(c)
		return refusal(c.origID)(err)
	}})
	nothing := len(on) == 0 && len(kinds) == 0
	if nothing {
		delete(h.clients, c.origKey)
	}
	h.mu.Unlock()
	if nothing {
		// As a server does, a listen that was agreed nothing ends at
		// once.
		h.drop(c)
		result := setIn(nil, "_meta", setIn(nil, MetaSubscription, c.origID))
		answer, _ := wire.Response(c.origID, json.RawMessage(result))
		s.settle(c, ending{outcome: guard.OutcomeOK, answer: answer})
	}
}

// releaseLocked takes a client listen off the resources' listens it
// counted on, and cancels those no client listens to any more. The caller
// holds h.mu.
func (h *listenHub) releaseLocked(hc *hubClient) {
	for _, hl := range hc.on {
		h.releaseOneLocked(hl)
	}
	hc.on = nil
}

// releaseOneLocked takes one client listen off hl, and cancels it when it
// was a resource's last. The caller holds h.mu.
func (h *listenHub) releaseOneLocked(hl *hubListen) {
	if hl.uri == "" {
		return
	}
	if hl.users--; hl.users > 0 || hl.own == nil || hl.ended || hl.cancelled {
		return
	}
	hl.cancelled = true
	n, err := wire.Notification("notifications/cancelled", map[string]any{"requestId": json.RawMessage(hl.own.sentID),
		"reason": "no client listens to this resource any more"})
	if err == nil {
		h.s.toServer.push(item{msg: Unparsed(n)})
	}
}

// drop forgets a client listen.
func (h *listenHub) drop(c *call) {
	s := h.s
	h.mu.Lock()
	if hc := h.clients[c.origKey]; hc != nil && hc.c == c {
		delete(h.clients, c.origKey)
		h.releaseLocked(hc)
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

// fromServer takes a notification of one of guard's listens, and reports
// whether msg was one.
func (h *listenHub) fromServer(msg wire.Message) bool {
	const ack = "notifications/subscriptions/acknowledged"
	kind := listKinds[msg.Method]
	if kind == "" && msg.Method != ack && msg.Method != resourceUpdated {
		return false // a notification guard's listens do not ask for
	}
	sub := wire.MetaMember(msg.Params, MetaSubscription)
	if sub == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	hl := h.bySent[wire.IDKey(sub)]
	if hl == nil {
		return false
	}
	if msg.Method == ack {
		h.acknowledgedLocked(hl, msg)
		return true
	}
	if hl.cancelled {
		return true // no client listens to it
	}
	meta := wire.ParamsMember(msg.Params, "_meta")
	for _, hc := range h.clients {
		if hc.kinds == nil || hc.c.ended.Load() {
			continue
		}
		if hl.uri == "" && !hc.kinds[kind] || hl.uri != "" && (kind != "" || !hc.subscribed[hl.uri]) {
			continue
		}
		params := setIn(msg.Params, "_meta", setIn(meta, MetaSubscription, hc.c.origID))
		h.s.toClient.push(item{msg: built(wire.SetMember(msg.Raw, "params", params))})
	}
	if kind == "toolsListChanged" && hl.uri == "" {
		go h.s.pipe.refreshTools()
	}
	return true
}

// ended waits for the server to end one of guard's listens, then ends the
// client listens that counted on it with the server's answer under each
// one's id. When the server is gone instead, serverGone answers them.
func (h *listenHub) ended(hl *hubListen) {
	s := h.s
	ans, ok := <-hl.own.own
	h.mu.Lock()
	if hl.agreed == nil {
		close(hl.ready)
	}
	hl.ended = true
	close(hl.done)
	h.forgetLocked(hl)
	if !ok || hl.cancelled {
		h.mu.Unlock()
		return
	}
	var served []*call
	for k, hc := range h.clients {
		if hc.kinds != nil && slices.Contains(hc.on, hl) {
			served = append(served, hc.c)
			delete(h.clients, k)
			h.releaseLocked(hc)
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
		hc.on = nil // the server is gone: nothing to cancel
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
