package web

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
)

// What a "changed" message names: the page parts to fetch again.
const (
	whatPending  = "pending"
	whatActivity = "activity"
	whatTools    = "tools"
	whatConfig   = "config"
)

// message is what /ws sends.
type message struct {
	Type string `json:"type"`
	What string `json:"what"`
}

// client is one open WebSocket.
type client struct {
	send  chan []byte
	fresh bool // joined since the last poll: gets every "changed" after the next one
}

// hub keeps the open WebSockets.
type hub struct {
	mu      sync.Mutex
	clients map[*client]struct{}
	closed  bool
	quit    chan struct{}
	joined  chan struct{} // a client joined: Run catches it up at once
}

func newHub() *hub {
	return &hub{clients: make(map[*client]struct{}), quit: make(chan struct{}), joined: make(chan struct{}, 1)}
}

func (h *hub) add(c *client) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	c.fresh = true
	h.clients[c] = struct{}{}
	select {
	case h.joined <- struct{}{}:
	default:
	}
	return true
}

func (h *hub) remove(c *client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.clients, c)
}

func (h *hub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.clients)
}

// broadcast sends "changed" for each of what to every client, and for
// every kind to clients that joined before this poll's snapshot was taken
// (so that they catch up on what changed while they connected). A client
// too slow to take a message misses it; the next one makes it fetch anew.
func (h *hub) broadcast(what []string, joined map[*client]bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.clients {
		ws := what
		if joined[c] {
			ws = []string{whatPending, whatActivity, whatTools, whatConfig}
		}
		for _, w := range ws {
			b, _ := json.Marshal(message{Type: "changed", What: w})
			select {
			case c.send <- b:
			default:
			}
		}
	}
}

// takeFresh returns the clients that joined since the last call.
func (h *hub) takeFresh() map[*client]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out map[*client]bool
	for c := range h.clients {
		if c.fresh {
			if out == nil {
				out = make(map[*client]bool)
			}
			out[c] = true
			c.fresh = false
		}
	}
	return out
}

func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		close(h.quit)
	}
}

// Run finds changes and tells open pages about them, until ctx ends; then
// it closes the open WebSockets. While a page is open it reads the store
// every Options.PollEvery (other processes share the database, so reading
// it is how their holds and decisions are seen), and, where the store
// tells of changes as they commit (PostgreSQL), at once on each: a hold
// taken on another replica shows within milliseconds. A page that opens
// its WebSocket is caught up at once. With no page open it only ends idle
// sessions. Pages work without Run, but do not update live.
func (s *Server) Run(ctx context.Context) {
	t := time.NewTicker(s.opts.PollEvery)
	defer t.Stop()
	defer s.hub.close()
	var changes <-chan struct{} // nil: poll only
	if n, ok := s.opts.Store.(changeNotifier); ok {
		changes = n.Changes(ctx)
	}
	var last signature
	have := false
	failing := false
	sweep := s.opts.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-changes:
		case <-s.hub.joined:
		}
		if now := s.opts.Now(); now.Sub(sweep) > time.Minute {
			s.sessions.sweep()
			sweep = now
		}
		if s.hub.count() == 0 {
			have = false
			continue
		}
		joined := s.hub.takeFresh()
		sig, err := s.views.signature(ctx)
		if err != nil {
			if !failing && ctx.Err() == nil {
				s.log.Error("ui: reading the store for changes", "err", err)
			}
			failing = true
			continue
		}
		failing = false
		var what []string
		if have {
			if sig.pending != last.pending {
				what = append(what, whatPending)
			}
			if sig.activity != last.activity {
				what = append(what, whatActivity)
			}
			if sig.tools != last.tools {
				what = append(what, whatTools)
			}
			if sig.config != last.config {
				what = append(what, whatConfig)
			}
		}
		last, have = sig, true
		if len(what) > 0 || len(joined) > 0 {
			s.hub.broadcast(what, joined)
		}
	}
}

// signature sums what the pages show, to tell when it changed.
type signature struct {
	pending, activity, tools [sha256.Size]byte
	config                   string // the digest of the pending configuration change
}

// activityWindow is how many of the newest calls the poller watches: an
// outcome recorded for one of them changes its row.
const activityWindow = 20

func (s *views) signature(ctx context.Context) (signature, error) {
	var sig signature
	n, newest, err := s.opts.Holds.CountApprovals(ctx, guard.ApprovalPending)
	if err != nil {
		return sig, err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%d\x00%s", n, newest)
	h.Sum(sig.pending[:0])

	h = sha256.New()
	err = s.opts.Calls.Query(ctx, store.Filter{Limit: activityWindow}, func(c *store.Call) error {
		io.WriteString(h, c.ID+"\x00"+c.Time+"\x00"+c.Outcome+"\x00"+c.Decision+"\x00"+c.Hash+"\x00")
		return nil
	})
	if err != nil {
		return sig, fmt.Errorf("recent calls: %w", err)
	}
	h.Sum(sig.activity[:0])

	// Every definition a server lists gets a review: the reviews tell of
	// new definitions and of decisions on them.
	reviews, err := s.opts.Tools.Reviews(ctx, "")
	if err != nil {
		return sig, fmt.Errorf("tool reviews: %w", err)
	}
	h = sha256.New()
	for _, r := range reviews {
		io.WriteString(h, r.Server+"\x00"+r.Name+"\x00"+r.Pin+"\x00"+r.State+"\x00")
	}
	h.Sum(sig.tools[:0])

	c, err := s.opts.Store.Configs().PendingConfigChange(ctx)
	if err != nil {
		return sig, fmt.Errorf("configuration change: %w", err)
	}
	if c != nil {
		sig.config = c.Digest
	}
	return sig, nil
}

const (
	wsWriteWait = 5 * time.Second
	wsPingEvery = 30 * time.Second
)

// serveWS upgrades to a WebSocket that carries "changed" messages. The
// session and Host were checked by ServeHTTP; the Origin is checked here
// (and again by the upgrader).
func (s *Server) serveWS(w http.ResponseWriter, r *http.Request) {
	if !s.origins.originOK(r) {
		s.log.Warn("ui: WebSocket from a foreign origin", "origin", r.Header.Get("Origin"))
		plainError(w, "Forbidden: the WebSocket did not come from the guard UI's own page.", http.StatusForbidden)
		return
	}
	sess := sessionOf(r.Context())
	// The upgrader writes its own answer: it carries the same headers.
	hdr := http.Header{}
	for _, k := range []string{"Content-Security-Policy", "X-Content-Type-Options", "Referrer-Policy", "Cache-Control", "X-Frame-Options"} {
		if v := w.Header().Get(k); v != "" {
			hdr.Set(k, v)
		}
	}
	conn, err := s.upgrader.Upgrade(w, r, hdr)
	if err != nil {
		return // the upgrader answered
	}
	defer conn.Close()
	c := &client{send: make(chan []byte, 8)}
	if !s.hub.add(c) {
		return
	}
	defer s.hub.remove(c)
	conn.SetReadLimit(512)
	gone := make(chan struct{})
	go func() { // reads only to notice the close
		defer close(gone)
		for {
			if _, _, err := conn.NextReader(); err != nil {
				return
			}
		}
	}()
	ping := time.NewTicker(wsPingEvery)
	defer ping.Stop()
	for {
		select {
		case b := <-c.send:
			_ = conn.SetWriteDeadline(time.Now().Add(wsWriteWait))
			if err := conn.WriteMessage(websocket.TextMessage, b); err != nil {
				return
			}
		case <-ping.C:
			if !s.sessions.alive(sess.key) {
				_ = conn.WriteControl(websocket.CloseMessage,
					websocket.FormatCloseMessage(websocket.ClosePolicyViolation, "session ended"), time.Now().Add(wsWriteWait))
				return
			}
			if err := conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(wsWriteWait)); err != nil {
				return
			}
		case <-gone:
			return
		case <-s.hub.quit:
			_ = conn.WriteControl(websocket.CloseMessage,
				websocket.FormatCloseMessage(websocket.CloseGoingAway, "guard is stopping"), time.Now().Add(wsWriteWait))
			return
		case <-r.Context().Done():
			return
		}
	}
}
