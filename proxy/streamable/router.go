package streamable

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/proxy"
	"github.com/guard-mcp/guard/proxy/mcpheader"
	"github.com/guard-mcp/guard/wire"
)

// The router of an HTTP session: which of the session's streams each
// message the relay writes for the client goes to.

// router hands the relay's output for the client to the HTTP streams: a
// response to the stream of its request; progress to the stream of the
// request that carries its token; the server's other requests and
// notifications to the one request stream open, else the standalone
// stream, else the newest request stream.
type router struct {
	mu       sync.Mutex
	seq      int
	byID     map[string]*stream
	byToken  map[string]*stream
	reqs     []*stream
	all      map[string]*stream // streams by id, for resumption
	alone    *stream
	attached bool
	backlog  []wire.Message // for a standalone stream not yet opened
	ended    bool
	// renamed are the requests of the session-less revision (2026-07-28),
	// each sent under an id of guard's; their answers get the client's.
	renamed *proxy.IDMap[*stream]
	// initKey is the id of the session's initialize while it waits for
	// its answer; protocol is the revision that answer negotiated.
	initKey  string
	protocol string
	modern   bool             // the session-less revision: nothing unsolicited
	headers  *mcpheader.Tools // what tools lists teach, when set
	// reading counts the streams a client reads now (a POST's, the GET
	// stream, a resumed one); idleSince is when the last one let go.
	reading   int
	idleSince time.Time
	// resumeWithin is how long a dropped stream whose requests are still
	// unanswered waits to be resumed before their client counts as gone,
	// reported on gone.
	resumeWithin time.Duration
	gone         chan proxy.Departure
}

// defaultResumeWithin is how long a dropped response stream of a request
// still unanswered may take to be resumed (Last-Event-ID) before the
// request's client counts as gone: a held call then never runs.
const defaultResumeWithin = 10 * time.Second

func newRouter() *router {
	return &router{byID: map[string]*stream{}, byToken: map[string]*stream{}, all: map[string]*stream{},
		renamed:      proxy.NewIDMap[*stream](func(n uint64) []byte { return []byte(`"guard-http-` + strconv.FormatUint(n, 10) + `"`) }, true),
		resumeWithin: defaultResumeWithin, gone: make(chan proxy.Departure, 16), idleSince: time.Now()}
}

// attach counts a reader of a stream. The caller holds rt.mu.
func (rt *router) attach(st *stream) {
	st.readers++
	rt.reading++
}

// release is attach's end: a stream whose requests are still unanswered
// and that no one reads waits resumeWithin to be resumed; after that their
// client counts as gone. The caller holds rt.mu.
func (rt *router) release(st *stream) {
	st.readers--
	rt.reading--
	if rt.reading == 0 {
		rt.idleSince = time.Now()
	}
	if st.readers > 0 || rt.modern || st.standby {
		return
	}
	st.mu.Lock()
	waiting := len(st.pending) > 0 && !st.ended
	st.mu.Unlock()
	if !waiting {
		return
	}
	st.dropped++
	n := st.dropped
	time.AfterFunc(rt.resumeWithin, func() { rt.lapsed(st, n) })
}

// lapsed reports the requests of a stream dropped (for the n-th time) and
// not resumed since: their client is gone.
func (rt *router) lapsed(st *stream, n int) {
	rt.mu.Lock()
	if st.readers > 0 || st.dropped != n || rt.ended {
		rt.mu.Unlock()
		return
	}
	st.mu.Lock()
	keys := make([]string, 0, len(st.pending))
	for k := range st.pending {
		keys = append(keys, k)
	}
	st.mu.Unlock()
	rt.mu.Unlock()
	if len(keys) == 0 {
		return
	}
	d := proxy.Departure{Keys: keys, Reason: fmt.Sprintf("%s: its response stream dropped and was not resumed within %v", guard.ClientGoneReason, rt.resumeWithin)}
	go func() { rt.gone <- d }()
}

// resumed lets go of a stream a GET with Last-Event-ID read.
func (rt *router) resumed(st *stream) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.release(st)
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
		if m.Method == "initialize" {
			rt.initKey = k
		}
		if tok := wire.MetaMember(m.Params, "progressToken"); len(tok) > 0 {
			rt.byToken[wire.IDKey(tok)] = st
		}
	}
	rt.reqs = append(rt.reqs, st)
	rt.all[st.id] = st
	if rt.ended {
		st.ended = true
	}
	rt.attach(st)
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
	rt.release(st)
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
	rt.attach(rt.alone)
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
	rt.release(st)
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
	rt.attach(st)
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
	m = proxy.Parsed(m)
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
		if rt.initKey != "" && k == rt.initKey {
			rt.initKey = ""
			rt.protocol, _ = wire.String(wire.ParamsMember(m.Result, "protocolVersion"))
		}
		if rt.headers != nil {
			rt.headers.Learn(line, m)
		}
		if st := rt.byID[k]; st != nil {
			if _, o, ok := rt.renamed.Take(k); ok {
				m = wire.WithID(m, o)
			}
			st.push(m)
			rt.answered(st, k)
		}
		return
	}
	if sub := wire.MetaMember(m.Params, proxy.MetaSubscription); sub != nil {
		// A subscriptions/listen stream's notification: to that stream,
		// naming the subscription by the client's id.
		k := wire.IDKey(sub)
		if st := rt.byID[k]; st != nil {
			if o, ok := rt.renamed.Sender(k); ok {
				m = proxy.Unparsed(withMeta(m, proxy.MetaSubscription, o))
			}
			st.push(m)
		}
		return
	}
	if m.Method == "notifications/cancelled" {
		if rid := wire.ParamsMember(m.Params, "requestId"); rid != nil {
			k := wire.IDKey(rid)
			if st := rt.byID[k]; st != nil {
				if _, o, ok := rt.renamed.Take(k); ok {
					m = proxy.Unparsed(proxy.RewriteParamsMember(m, "requestId", o))
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

// batches reports whether the session's revision allows JSON-RPC batches:
// only 2025-03-26 does (2024-11-05 had no Streamable HTTP, 2025-06-18
// removed them).
func (rt *router) batches() bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.protocol == guard.Rev20250326
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
		u, found := "", 0
		rt.renamed.Each(func(uk string, _ *stream, o []byte) {
			if wire.IDKey(o) == k && rt.byID[uk] != nil {
				u, found = uk, found+1
			}
		})
		if found != 1 {
			u = ""
		}
		if u == "" {
			drop[i] = true
			continue
		}
		parts[i] = proxy.Unparsed(proxy.RewriteParamsMember(m, "requestId", uniqueID(u)))
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
			rt.renamed.Drop(k)
			rt.answered(st, k)
		}
	}
}

// idle reports since when no stream of the session has been read, pending
// requests or not; false while one is.
func (rt *router) idle() (time.Time, bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.idleSince, rt.reading == 0
}
