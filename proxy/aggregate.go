package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/guard-mcp/guard/wire"
)

// Member is one server behind an aggregate endpoint.
type Member struct {
	// Name is the server's name; its tools and prompts are offered as
	// Name + Separator + their own name.
	Name string
	// Run relays between conn, the aggregate as the server's client, and
	// the server, through the server's own relay session (policy, holds
	// and the audit are the server's), until conn's input ends.
	Run func(ctx context.Context, conn Conn) error
}

// Aggregate configures RunAggregate.
type Aggregate struct {
	Members []Member
	// Separator joins a server's name and a tool's or prompt's name
	// (default "__": several hosts refuse "." or "/" in tool names).
	Separator string
	// Timeout bounds how long initialize and listings wait for each
	// server (default 30s); a server that does not answer in time is left
	// out of that answer, and said to be.
	Timeout time.Duration
	// Version is guard's version, for serverInfo.
	Version string
	Logger  *slog.Logger
}

// RunAggregate serves one client session for several servers at once:
// their tools and prompts are listed under namespaced names (SERVER__tool)
// and each call goes to its server's relay session, named back. Resources
// keep their URIs and go to the server that listed them. It returns when
// the client's input ends and every server's session has ended.
func RunAggregate(ctx context.Context, ag Aggregate, client Conn) error {
	if ag.Separator == "" {
		ag.Separator = "__"
	}
	if ag.Timeout <= 0 {
		ag.Timeout = 30 * time.Second
	}
	if ag.Logger == nil {
		ag.Logger = slog.New(slog.DiscardHandler)
	}
	a := &aggregator{
		opts:    ag,
		out:     client,
		pending: NewIDMap[*waiter](negativeID, false),
		byCall:  map[string]*waiter{},
		asked:   NewIDMap[*member](negativeID, true),
		askedBy: map[string][]byte{},
		uris:    map[string]*member{},
	}
	ports := make([]*port, len(ag.Members))
	var ended atomic.Pointer[inputEnd]
	for i, m := range ag.Members {
		mb := &member{name: m.Name, in: NewInbox(), done: make(chan struct{}), up: true}
		a.members = append(a.members, mb)
		ports[i] = &port{a: a, mb: mb, ended: &ended}
	}
	// split tries the longest names first: with servers "a" and "a__b",
	// "a__b__t" is b's.
	a.byLength = append([]*member(nil), a.members...)
	sort.SliceStable(a.byLength, func(i, j int) bool { return len(a.byLength[i].name) > len(a.byLength[j].name) })
	for i, mb := range a.members {
		go func() {
			defer close(mb.done)
			if err := ag.Members[i].Run(ctx, ports[i]); err != nil {
				ag.Logger.Info("aggregate member ended", "member", mb.name, "err", err)
			}
			ports[i].end()
			a.gone(mb)
		}()
	}
	for {
		m, err := client.Read(ctx)
		var bad *BadMessage
		var tl *wire.TooLongError
		if errors.As(err, &tl) {
			ag.Logger.Warn("aggregate: a client message over the size limit was dropped", "bytes", tl.Size)
			continue
		}
		if errors.As(err, &bad) {
			if TooDeep(bad.Err) == wire.KindResponse {
				// Its server's session answers the server's
				// request with guard's error.
				a.response(m)
				continue
			}
			a.refuse(bad)
			continue
		}
		if err != nil {
			break
		}
		a.fromClient(m)
	}
	// The members' input ends for the reason the aggregate's did.
	why, gone := inputEnded(client)
	ended.Store(&inputEnd{why, gone})
	for _, mb := range a.members {
		mb.in.Close()
	}
	for _, mb := range a.members {
		<-mb.done
	}
	return nil
}

// inputEnd is why a client's input ended, and whether its client is gone.
type inputEnd struct {
	why  string
	gone bool
}

// port is a member server's session's client Conn: the aggregate. Read
// returns what the aggregate sends the member, parsed and checked as the
// aggregate did; what the session writes is taken by the aggregate on the
// writer's goroutine, with no hand-off. Its input ends when the
// aggregate's client's does, for the same reason.
type port struct {
	a     *aggregator
	mb    *member
	ended *atomic.Pointer[inputEnd]

	mu     sync.RWMutex
	closed bool // the session's writes fail: it ended, or closed its side
}

func (p *port) Read(ctx context.Context) (wire.Message, error) { return p.mb.in.Take(ctx) }

func (p *port) Write(_ context.Context, m wire.Message) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return errClosed
	}
	if m.Kind == 0 {
		pm, err := wire.Parse(m.Raw)
		if err != nil {
			p.a.opts.Logger.Warn("aggregate: an unreadable message from a server was dropped", "member", p.mb.name, "err", err)
			return nil
		}
		m = pm
	}
	p.a.fromMember(p.mb, m)
	return nil
}

// Close ends what the member's session sends the aggregate.
func (p *port) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	return nil
}

// end closes both directions once the member's session ended: what the
// aggregate sends it fails rather than waits, and a write of the session
// under way is done.
func (p *port) end() {
	p.Close()
	p.mb.in.Close()
}

func (p *port) InputEnded() (string, bool) {
	if e := p.ended.Load(); e != nil {
		return e.why, e.gone
	}
	return goneInputEnded, true
}

// member is one server's relay session, as the aggregate sees it.
type member struct {
	name string
	in   *Inbox // what the aggregate sends the member's session
	done chan struct{}
	up   bool // initialized (or not yet asked), and not gone; under aggregator.mu
	caps json.RawMessage
	// templates are the literal prefixes of the URI templates in the
	// server's latest listing.
	templates []string
}

// send writes one message to the member's relay session: a parsed one
// goes on without a second parse.
func (mb *member) send(m wire.Message) error {
	return mb.in.Put(context.Background(), m)
}

// waiter is a request the aggregate sent to a member: a client's request
// passed on (clientID set), or part of a fan-out (ch set).
type waiter struct {
	m        *member
	clientID []byte
	ownID    []byte
	ch       chan wire.Message
}

type aggregator struct {
	opts     Aggregate
	out      Conn
	members  []*member // in the order given
	byLength []*member // longest name first

	mu      sync.Mutex
	pending *IDMap[*waiter]    // requests sent to members, under the aggregate's ids
	byCall  map[string]*waiter // client's id key → its passed-on request
	asked   *IDMap[*member]    // members' requests passed on to the client, under the aggregate's ids
	askedBy map[string][]byte  // pendingKey of the member's id → id toward the client
	uris    map[string]*member // resource URI → the member that listed it
}

func (a *aggregator) write(line []byte) { a.toClient(Unparsed(line)) }

// toClient writes one message to the client (a member's, parsed, goes on
// without a second parse).
func (a *aggregator) toClient(m wire.Message) {
	if a.out.Write(context.Background(), m) == nil {
		if f, ok := a.out.(flusher); ok {
			_ = f.Flush()
		}
	}
}

// negativeID is the aggregate's n-th id: negative, unlike what clients
// and servers pick.
func negativeID(n uint64) []byte { return strconv.AppendUint([]byte("-"), n, 10) }

func pendingKey(m *member, id []byte) string { return m.name + "\x00" + wire.IDKey(id) }

// refuse answers a client message that did not parse.
func (a *aggregator) refuse(bad *BadMessage) {
	var inv *wire.InvalidError
	switch {
	case errors.As(bad.Err, &inv) && inv.Kind == wire.KindResponse:
		a.opts.Logger.Warn("aggregate: a client response with an unusable id was dropped", "err", bad.Err)
	case TooDeep(bad.Err) == wire.KindNotification:
		a.opts.Logger.Warn("aggregate: a client notification nested too deep was dropped", "err", bad.Err)
	case errors.As(bad.Err, &inv):
		a.write(wire.InvalidRequest(inv.Reason).Answer(inv.ID))
	default:
		a.write(wire.ParseError(bad.Err.Error()).Answer(nil))
	}
}

// fromClient handles one message from the client.
func (a *aggregator) fromClient(m wire.Message) {
	if m.Kind == wire.KindBatch {
		parts, err := wire.SplitBatch(m.Raw)
		if err != nil {
			a.write(wire.ParseError(err.Error()).Answer(nil))
			return
		}
		for _, p := range parts {
			pm, err := readMessage(p)
			var bad *BadMessage
			if errors.As(err, &bad) {
				a.refuse(bad)
				continue
			}
			a.fromClient(pm)
		}
		return
	}
	switch m.Kind {
	case wire.KindRequest:
		a.request(m)
	case wire.KindNotification:
		a.notification(m)
	case wire.KindResponse:
		a.response(m)
	}
}

// request routes or fans out one client request.
func (a *aggregator) request(m wire.Message) {
	switch m.Method {
	case "initialize", "server/discover":
		go a.initialize(m)
	case "ping":
		a.answer(m.ID, map[string]any{})
	case "tools/list":
		go a.list(m, "tools", "tools", true)
	case "prompts/list":
		go a.list(m, "prompts", "prompts", true)
	case "resources/list":
		go a.list(m, "resources", "resources", false)
	case "resources/templates/list":
		go a.list(m, "resources", "resourceTemplates", false)
	case "logging/setLevel":
		go a.broadcast(m, "logging")
	case "tools/call", "prompts/get":
		a.byPrefix(m, "name", "")
	case "completion/complete":
		a.complete(m)
	case "resources/read", "resources/subscribe", "resources/unsubscribe":
		a.byURI(m, m.Params)
	default:
		a.write(wire.MethodNotFound(fmt.Sprintf("Method not found: %s is not offered by the aggregate endpoint; use a server's own endpoint", m.Method)).Answer(m.ID))
	}
}

func (a *aggregator) answer(id []byte, result any) {
	b, err := wire.Response(id, result)
	if err != nil {
		b = wire.Internal("Internal error: " + err.Error()).Answer(id)
	}
	a.write(b)
}

// split finds the member of a namespaced name.
func (a *aggregator) split(name string) (*member, string) {
	for _, mb := range a.byLength {
		if rest, ok := strings.CutPrefix(name, mb.name+a.opts.Separator); ok && rest != "" {
			return mb, rest
		}
	}
	return nil, ""
}

// byPrefix passes on a tools/call or prompts/get (or, with inner set, a
// completion whose params.ref names a prompt) to the member its
// namespaced name belongs to, under the server's own name.
func (a *aggregator) byPrefix(m wire.Message, key, inner string) {
	// Decide on exactly what the server will read; the member's session
	// does not check it again.
	if err := wire.Strict(m.Raw); err != nil {
		a.write(wire.InvalidRequest(err.Error()).Answer(m.ID))
		return
	}
	m.Checked = true
	obj := m.Params
	if inner != "" {
		obj = wire.ParamsMember(m.Params, inner)
	}
	name, ok := wire.String(wire.ParamsMember(obj, key))
	if !ok || name == "" {
		a.write(wire.InvalidParams(m.Method + " needs a name").Answer(m.ID))
		return
	}
	mb, own := a.split(name)
	if mb == nil {
		what := "tool"
		if m.Method != "tools/call" {
			what = "prompt"
		}
		a.write(wire.Refusal{Code: wire.CodeInvalidParams, Text: fmt.Sprintf(
			"Unknown %s: %s (the aggregate endpoint names them SERVER%sNAME; no server here is named by its prefix)", what, name, a.opts.Separator)}.Answer(m.ID))
		return
	}
	q, _ := json.Marshal(own)
	params := wire.SetMember(obj, key, q)
	if inner != "" {
		params = wire.SetMember(m.Params, inner, params)
	}
	a.pass(m, mb, params)
}

// complete routes completion/complete by its reference: a prompt by its
// namespaced name, a resource template by its URI.
func (a *aggregator) complete(m wire.Message) {
	ref := wire.ParamsMember(m.Params, "ref")
	if t, _ := wire.String(wire.ParamsMember(ref, "type")); t == "ref/resource" {
		a.byURI(m, ref)
		return
	}
	a.byPrefix(m, "name", "ref")
}

// byURI passes on a request about a resource (its URI in obj.uri) to the
// member that listed it, or whose template it fits, or the only member
// that has resources.
func (a *aggregator) byURI(m wire.Message, obj []byte) {
	if err := wire.Strict(m.Raw); err != nil {
		a.write(wire.InvalidRequest(err.Error()).Answer(m.ID))
		return
	}
	m.Checked = true
	uri, _ := wire.String(wire.ParamsMember(obj, "uri"))
	if uri == "" {
		uri, _ = wire.String(wire.ParamsMember(obj, "uriTemplate"))
	}
	mb := a.resourceMember(uri)
	if mb == nil {
		a.write(wire.Refusal{Code: codeResourceNotFound, Text: "Resource not found: no server behind the aggregate endpoint lists " + uri +
			"; list resources first, or use the server's own endpoint", Data: map[string]string{"uri": uri}}.Answer(m.ID))
		return
	}
	a.pass(m, mb, nil)
}

const codeResourceNotFound = -32002

func (a *aggregator) resourceMember(uri string) *member {
	a.mu.Lock()
	defer a.mu.Unlock()
	if mb := a.uris[uri]; mb != nil {
		return mb
	}
	var best *member
	bestLen := -1
	var withResources []*member
	for _, mb := range a.members {
		for _, p := range mb.templates {
			if strings.HasPrefix(uri, p) && len(p) > bestLen {
				best, bestLen = mb, len(p)
			}
		}
		if mb.up && wire.ParamsMember(mb.caps, "resources") != nil {
			withResources = append(withResources, mb)
		}
	}
	if best != nil {
		return best
	}
	if len(withResources) == 1 {
		return withResources[0]
	}
	return nil
}

// pass sends a client's request on to a member under an id of the
// aggregate's, with params replaced when given; the answer goes back to
// the client under its own id.
func (a *aggregator) pass(m wire.Message, mb *member, params []byte) {
	w := &waiter{m: mb, clientID: append([]byte(nil), m.ID...)}
	if err := a.send(m, w, params); err != nil {
		a.write(wire.Internal("The server " + mb.name + " is not available: " + err.Error()).Answer(m.ID))
	}
}

// ask sends a copy of the client's request (params replaced when given)
// to a member, for the aggregate itself: the answer arrives on the
// waiter's channel, which is nil when the request could not be sent.
func (a *aggregator) ask(m wire.Message, mb *member, params []byte) *waiter {
	w := &waiter{m: mb, ch: make(chan wire.Message, 1)}
	if a.send(m, w, params) != nil {
		w.ch = nil
	}
	return w
}

// send registers w under a new id of the aggregate's and sends m to w's
// member under it.
func (a *aggregator) send(m wire.Message, w *waiter, params []byte) error {
	mb := w.m
	a.mu.Lock()
	if !mb.up {
		a.mu.Unlock()
		return errors.New("its session ended or it did not initialize")
	}
	if w.clientID != nil {
		// The client's id goes on unless a request in flight has it.
		w.ownID, _, _ = a.pending.Add(w.clientID, w)
		a.byCall[wire.IDKey(w.clientID)] = w
	} else {
		w.ownID = a.pending.Own()
		a.pending.Put(wire.IDKey(w.ownID), w)
	}
	a.mu.Unlock()
	err := mb.send(rebuild(m, w.ownID, params))
	if err != nil {
		a.mu.Lock()
		a.pending.Drop(wire.IDKey(w.ownID))
		if w.clientID != nil {
			delete(a.byCall, wire.IDKey(w.clientID))
		}
		a.mu.Unlock()
	}
	return err
}

// wait waits for the answer to ask, or for done (the fan-out's time is
// up: the answer is no longer wanted).
func (a *aggregator) wait(w *waiter, done <-chan struct{}) (wire.Message, bool) {
	if w.ch == nil {
		return wire.Message{}, false
	}
	select {
	case r, ok := <-w.ch: // an answer already in wins over a time that is up
		return r, ok
	default:
	}
	select {
	case r, ok := <-w.ch:
		return r, ok
	case <-done:
		a.mu.Lock()
		a.pending.Drop(wire.IDKey(w.ownID))
		a.mu.Unlock()
		a.opts.Logger.Warn("aggregate: a server did not answer in time", "member", w.m.name)
		return wire.Message{}, false
	}
}

// live returns the members that are up.
func (a *aggregator) live() []*member {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*member
	for _, mb := range a.members {
		if mb.up {
			out = append(out, mb)
		}
	}
	return out
}

// withCapability returns the members that are up and have the
// capability, or have not said what they have (2026-07-28 without
// server/discover: they are asked, and "method not found" counts as none).
func (a *aggregator) withCapability(capability string) []*member {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*member
	for _, mb := range a.members {
		if mb.up && (mb.caps == nil || wire.ParamsMember(mb.caps, capability) != nil) {
			out = append(out, mb)
		}
	}
	return out
}

// initialize sends the client's initialize (or server/discover) to every
// server and answers with what they share: the lowest protocol version,
// the union of capabilities, and each server's instructions.
func (a *aggregator) initialize(m wire.Message) {
	ctx, cancel := context.WithTimeout(context.Background(), a.opts.Timeout)
	defer cancel()
	members := a.live()
	var failed []string
	a.mu.Lock()
	for _, mb := range a.members {
		if !mb.up {
			failed = append(failed, mb.name)
			a.opts.Logger.Warn("aggregate: a server is not running; it is left out of this session", "member", mb.name)
		}
	}
	a.mu.Unlock()
	asks := make([]*waiter, len(members))
	for i, mb := range members {
		asks[i] = a.ask(m, mb, nil)
	}
	type initResult struct {
		ProtocolVersion   string          `json:"protocolVersion"`
		SupportedVersions []string        `json:"supportedVersions"`
		Capabilities      json.RawMessage `json:"capabilities"`
		Instructions      string          `json:"instructions"`
		ResultType        string          `json:"resultType"`
	}
	var results []initResult
	var names []string
	for i, mb := range members {
		r, ok := a.wait(asks[i], ctx.Done())
		var res initResult
		if ok && r.Result != nil && json.Unmarshal(r.Result, &res) == nil {
			a.mu.Lock()
			mb.caps = res.Capabilities
			a.mu.Unlock()
			results = append(results, res)
			names = append(names, mb.name)
			continue
		}
		a.mu.Lock()
		mb.up = false
		a.mu.Unlock()
		failed = append(failed, mb.name)
		a.opts.Logger.Warn("aggregate: a server did not initialize; it is left out of this session", "member", mb.name, "error", string(r.Error))
	}
	if len(results) == 0 {
		a.write(wire.Internal("No server behind the aggregate endpoint initialized: " + strings.Join(failed, ", ")).Answer(m.ID))
		return
	}
	out := map[string]any{}
	caps := map[string]any{}
	var instructions []string
	for i, res := range results {
		mergeCaps(caps, res.Capabilities)
		if res.Instructions != "" {
			instructions = append(instructions, "## "+names[i]+" (tools and prompts named "+names[i]+a.opts.Separator+"…)\n"+res.Instructions)
		}
	}
	delete(caps, "tasks") // not aggregated: a server's own endpoint has them
	out["capabilities"] = caps
	if len(instructions) > 0 {
		out["instructions"] = strings.Join(instructions, "\n\n")
	}
	info := map[string]any{"name": "guard", "version": a.opts.Version, "title": "guard: " + strings.Join(names, ", ")}
	if m.Method == "initialize" {
		version := results[0].ProtocolVersion
		for _, res := range results[1:] {
			if res.ProtocolVersion < version {
				version = res.ProtocolVersion
			}
		}
		out["protocolVersion"] = version
		out["serverInfo"] = info
	} else {
		lists := make([][]string, len(results))
		for i, res := range results {
			lists[i] = res.SupportedVersions
		}
		out["supportedVersions"] = commonVersions(lists)
		out["serverInfo"] = info
		if results[0].ResultType != "" {
			out["resultType"] = results[0].ResultType
		}
	}
	if len(failed) > 0 {
		out["_meta"] = map[string]any{"guard/unavailable": failed}
	}
	a.answer(m.ID, out)
}

// commonVersions keeps the versions of the first list every other list
// has too, in the first list's order.
func commonVersions(lists [][]string) []string {
	if len(lists) == 0 {
		return nil
	}
	out := append([]string(nil), lists[0]...)
	for _, vs := range lists[1:] {
		out = slices.DeleteFunc(out, func(v string) bool { return !slices.Contains(vs, v) })
	}
	return out
}

// mergeCaps adds a server's capabilities to the union: a capability any
// server has is offered, with a flag set when any server sets it.
func mergeCaps(into map[string]any, raw json.RawMessage) {
	var caps map[string]any
	if json.Unmarshal(raw, &caps) != nil {
		return
	}
	for k, v := range caps {
		sub, ok := v.(map[string]any)
		have, had := into[k].(map[string]any)
		switch {
		case !ok:
			if _, exists := into[k]; !exists {
				into[k] = v
			}
		case !had:
			cp := map[string]any{}
			for sk, sv := range sub {
				cp[sk] = sv
			}
			into[k] = cp
		default:
			for sk, sv := range sub {
				if b, isBool := sv.(bool); isBool {
					prev, _ := have[sk].(bool)
					have[sk] = prev || b
				} else if _, exists := have[sk]; !exists {
					have[sk] = sv
				}
			}
		}
	}
}

// maxPages bounds how many pages of one server's listing are read.
const maxPages = 1000

// list answers a listing with every server's items, all pages read, tools
// and prompts renamed SERVER__NAME. capability is the server capability
// the listing needs; servers without it are not asked.
func (a *aggregator) list(m wire.Message, capability, key string, rename bool) {
	ctx, cancel := context.WithTimeout(context.Background(), a.opts.Timeout)
	defer cancel()
	members := a.withCapability(capability)
	type page struct {
		items      []json.RawMessage
		resultType string
		err        []byte
	}
	pages := make([]page, len(members))
	var wg sync.WaitGroup
	for i, mb := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var all []json.RawMessage
			cursor := ""
			for n := 0; n < maxPages; n++ {
				r, ok := a.wait(a.ask(m, mb, withCursor(m.Params, cursor)), ctx.Done())
				if ok && r.Error != nil && wire.ErrorCode(r.Error) == wire.CodeMethodNotFound {
					return // the server has none
				}
				if !ok || r.Result == nil {
					pages[i].err = r.Error
					if !ok {
						pages[i].err = []byte(`"no answer"`)
					}
					return
				}
				var res map[string]json.RawMessage
				if json.Unmarshal(r.Result, &res) != nil {
					pages[i].err = []byte(`"an unreadable listing"`)
					return
				}
				var items []json.RawMessage
				_ = json.Unmarshal(res[key], &items)
				all = append(all, items...)
				if rt, ok := wire.String(res["resultType"]); ok {
					pages[i].resultType = rt
				}
				next, _ := wire.String(res["nextCursor"])
				if next == "" {
					break
				}
				cursor = next
			}
			pages[i].items = all
		}()
	}
	wg.Wait()
	items := []json.RawMessage{}
	var unavailable []string
	uris := map[string]*member{}
	for i, mb := range members {
		if pages[i].err != nil {
			unavailable = append(unavailable, mb.name)
			a.opts.Logger.Warn("aggregate: a server's listing failed; its items are left out", "member", mb.name, "method", m.Method, "error", string(pages[i].err))
			continue
		}
		var prefixes []string
		for _, it := range pages[i].items {
			switch {
			case rename:
				name, _ := wire.String(wire.ParamsMember(it, "name"))
				full := mb.name + a.opts.Separator + name
				if owner, _ := a.split(full); owner != mb {
					// Server "a" offering "b__x" would be listed as
					// "a__b__x", which calls go to server "a__b": leave
					// it out rather than show one server's description
					// for another's tool.
					a.opts.Logger.Warn("aggregate: a name that would reach another server is left out", "member", mb.name, "name", name, "as", full)
					continue
				}
				q, _ := json.Marshal(full)
				it = wire.SetMember(it, "name", q)
			case key == "resources":
				if u, ok := wire.String(wire.ParamsMember(it, "uri")); ok {
					uris[u] = mb
				}
			case key == "resourceTemplates":
				if t, ok := wire.String(wire.ParamsMember(it, "uriTemplate")); ok {
					p, _, _ := strings.Cut(t, "{")
					prefixes = append(prefixes, p)
				}
			}
			items = append(items, it)
		}
		if key == "resourceTemplates" {
			a.mu.Lock()
			mb.templates = prefixes
			a.mu.Unlock()
		}
	}
	if key == "resources" {
		a.mu.Lock()
		for u, mb := range uris {
			a.uris[u] = mb
		}
		a.mu.Unlock()
	}
	out := map[string]any{key: items}
	for _, p := range pages {
		if p.resultType != "" {
			out["resultType"] = p.resultType
			break
		}
	}
	if len(unavailable) > 0 {
		out["_meta"] = map[string]any{"guard/unavailable": unavailable}
	}
	a.answer(m.ID, out)
}

// withCursor returns a listing's params for the page after cursor ("" for
// the first page: a cursor of the client's own is dropped, since the
// aggregate's answers have no pages).
func withCursor(params []byte, cursor string) []byte {
	if params == nil {
		params = []byte(`{}`)
	}
	if cursor != "" {
		q, _ := json.Marshal(cursor)
		return wire.SetMember(params, "cursor", q)
	}
	if wire.ParamsMember(params, "cursor") == nil {
		return params
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(params, &obj) != nil {
		return params
	}
	delete(obj, "cursor")
	b, err := json.Marshal(obj)
	if err != nil {
		return params
	}
	return b
}

// rawError is an error response carrying a server's error object as is.
func rawError(id, errObj []byte) []byte {
	out := append([]byte(`{"jsonrpc":"2.0","id":`), id...)
	out = append(out, `,"error":`...)
	out = append(out, errObj...)
	return append(out, '}')
}

// rebuild is the client's message m under the id sent, with params
// replaced when given (added when m had none), as Parse reads it.
func rebuild(m wire.Message, id, params []byte) wire.Message {
	if params != nil && m.Params == nil {
		if b, err := wire.Request(id, m.Method, json.RawMessage(params)); err == nil {
			return Unparsed(b)
		}
	}
	if params != nil && m.Params != nil {
		m = wire.WithParams(m, params)
	}
	if !bytes.Equal(id, m.ID) {
		m = wire.WithID(m, id)
	}
	return m
}

// broadcast sends a request to every server with the capability and
// answers with the first error, or an empty result.
func (a *aggregator) broadcast(m wire.Message, capability string) {
	ctx, cancel := context.WithTimeout(context.Background(), a.opts.Timeout)
	defer cancel()
	var firstErr []byte
	for _, mb := range a.withCapability(capability) {
		if r, ok := a.wait(a.ask(m, mb, nil), ctx.Done()); ok && r.Error != nil && firstErr == nil && wire.ErrorCode(r.Error) != wire.CodeMethodNotFound {
			firstErr = r.Error
		}
	}
	if firstErr != nil {
		a.write(rawError(m.ID, firstErr))
		return
	}
	a.answer(m.ID, map[string]any{})
}

// notification passes a client's notification on: a cancellation to the
// server of the request it names, anything else to every server.
func (a *aggregator) notification(m wire.Message) {
	if m.Method == "notifications/cancelled" {
		req := wire.ParamsMember(m.Params, "requestId")
		a.mu.Lock()
		w := a.byCall[wire.IDKey(req)]
		if w != nil && req != nil {
			// The server's session records it cancelled and drops a
			// late answer; nothing is left to wait for here.
			delete(a.byCall, wire.IDKey(req))
			a.pending.Drop(wire.IDKey(w.ownID))
		}
		a.mu.Unlock()
		if w == nil || req == nil {
			return // not ours, or already answered
		}
		_ = w.m.send(Unparsed(wire.Rebuild(m, nil, wire.SetMember(m.Params, "requestId", w.ownID))))
		return
	}
	for _, mb := range a.live() {
		_ = mb.send(m)
	}
}

// response takes the client's answer to a server's request back to it.
func (a *aggregator) response(m wire.Message) {
	k := wire.IDKey(m.ID)
	a.mu.Lock()
	mb, orig, ok := a.asked.Take(k)
	if ok {
		delete(a.askedBy, pendingKey(mb, orig))
	}
	a.mu.Unlock()
	if !ok {
		a.opts.Logger.Debug("aggregate: a response to no request", "id", string(m.ID))
		return
	}
	_ = mb.send(Unparsed(wire.ReplaceID(m, orig)))
}

// fromMember handles one message of a member's relay session.
func (a *aggregator) fromMember(mb *member, m wire.Message) {
	line := m.Raw
	switch m.Kind {
	case wire.KindBatch:
		parts, err := wire.SplitBatch(line)
		if err == nil {
			for _, p := range parts {
				if pm, err := readMessage(p); err == nil {
					a.fromMember(mb, pm)
				}
			}
		}
	case wire.KindResponse:
		// The aggregate's ids are its own across members: the answer
		// must come from the member asked.
		k := wire.IDKey(m.ID)
		a.mu.Lock()
		w, _ := a.pending.Get(k)
		if w != nil && w.m != mb {
			w = nil
		}
		if w != nil {
			a.pending.Drop(k)
			if w.clientID != nil {
				delete(a.byCall, wire.IDKey(w.clientID))
			}
		}
		a.mu.Unlock()
		switch {
		case w == nil:
			a.opts.Logger.Debug("aggregate: a server's response to no request", "member", mb.name)
		case w.ch != nil:
			w.ch <- m
		case bytes.Equal(m.ID, w.clientID):
			a.toClient(m)
		default:
			a.toClient(wire.WithID(m, w.clientID))
		}
	case wire.KindRequest:
		a.mu.Lock()
		id, _, _ := a.asked.Add(m.ID, mb)
		a.askedBy[pendingKey(mb, m.ID)] = id
		a.mu.Unlock()
		a.toClient(wire.WithID(m, id))
	case wire.KindNotification:
		if m.Method == "notifications/cancelled" {
			// The server withdrew a request of its own: name it as the
			// client knows it.
			req := wire.ParamsMember(m.Params, "requestId")
			a.mu.Lock()
			id := a.askedBy[pendingKey(mb, req)]
			a.mu.Unlock()
			if id == nil {
				return
			}
			a.write(wire.Rebuild(m, nil, wire.SetMember(m.Params, "requestId", id)))
			return
		}
		a.toClient(m)
	}
}

// gone ends what waits on a member whose session ended.
func (a *aggregator) gone(mb *member) {
	a.mu.Lock()
	mb.up = false
	var lost []*waiter
	a.pending.Each(func(k string, w *waiter, _ []byte) {
		if w.m == mb {
			lost = append(lost, w)
			a.pending.Drop(k)
			if w.clientID != nil {
				delete(a.byCall, wire.IDKey(w.clientID))
			}
		}
	})
	a.asked.Each(func(k string, q *member, orig []byte) {
		if q == mb { // its requests to the client: an answer has nowhere to go
			a.asked.Drop(k)
			delete(a.askedBy, pendingKey(mb, orig))
		}
	})
	a.mu.Unlock()
	for _, w := range lost {
		if w.ch != nil {
			close(w.ch)
			continue
		}
		a.write(wire.Internal("The server " + mb.name + "'s session ended before answering").Answer(w.clientID))
	}
}
