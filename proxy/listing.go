package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"sync"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/wire"
)

// The model reads only definitions a person accepted. Through guard,
// tools/list shows each tool as its last accepted definition: a changed or
// flagged definition is listed as its accepted version until a person
// accepts the change, a new tool that waits for review is left out, and so
// is a tool the rules deny to this caller for every argument (the
// Decider's DeniesEveryCall). A review made by any process on the database
// reaches the session through Options.Watch, and when it changes what the
// client should see, guard tells the client that its list changed.

// Listing modes (review.listing).
const (
	// ListAccepted shows each tool's last accepted definition (default).
	ListAccepted = "accepted"
	// ListAsServed passes the server's listing as it is.
	ListAsServed = "as_served"
)

// ListingWatch tells a session when what its listing shows may have
// changed: a tool's review decided anywhere on the database, the policy
// reloaded. Changed returns a channel closed at the next such change.
type ListingWatch interface {
	Changed() <-chan struct{}
}

// Beacon is a ListingWatch its owner fires. The zero value is ready.
type Beacon struct {
	mu sync.Mutex
	ch chan struct{}
}

// Changed returns a channel closed at the next Fire.
func (b *Beacon) Changed() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

// Fire wakes every session waiting on Changed.
func (b *Beacon) Fire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}

// listTimeout bounds recording a listing and reading its reviews.
const listTimeout = 30 * time.Second

// errReviews refuses a listing whose reviews could not be read: guard
// does not show definitions it cannot tell a person accepted.
var errReviews = errors.New("the tools' reviews could not be read")

// rewritesListing reports whether guard may change what tools/list
// shows: with a catalog it answers a listing once it is recorded, and
// declares that it tells of list changes.
func (ls *lister) rewritesListing() bool { return ls.s.opts.Catalog != nil }

// listingMode is review.listing, and whether policy.hide_denied is on, as
// the configuration in force has them.
func (ls *lister) listingMode() (string, bool) {
	s := ls.s
	mode, hide := ListAccepted, false
	if s.opts.Listing != nil {
		mode = s.opts.Listing()
	}
	if s.opts.HideDenied != nil {
		hide = s.opts.HideDenied()
	}
	return mode, hide
}

// shown is what one tool looks like in the client's listing: the pin of
// the definition shown, or why it is left out.
type shown struct {
	pin string
	out string // "" shown; "review": waits for review; "denied": denied for every argument
}

// view is what a listing shows of served tools: the definitions, in the
// server's order, what each tool looks like, and what guard changed.
type view struct {
	defs    []json.RawMessage
	tools   map[string]shown
	changed bool
	// replaced, awaiting and hidden name the tools shown as their
	// accepted definition, left out while they wait for review, and left
	// out as denied for every argument.
	replaced, awaiting, hidden []string
}

// viewOf decides what a listing of served shows to this session's client,
// given how the server's definitions stand (states, by name and pin) and
// each tool's last accepted definition.
func (ls *lister) viewOf(served []guard.Tool, states map[string]string, accepted map[string]*guard.Tool) view {
	s := ls.s
	v := view{tools: make(map[string]shown, len(served))}
	ci, proto := s.clientInfo()
	ci.Protocol = proto
	mode, hide := s.lists.listingMode()
	for i := range served {
		t := &served[i]
		def := t
		if mode != ListAsServed && states[t.Name+"\x00"+t.Pin] != guard.ReviewAccepted {
			def = accepted[t.Name]
			if def == nil {
				v.tools[t.Name] = shown{out: "review"}
				v.awaiting = append(v.awaiting, t.Name)
				v.changed = true
				continue
			}
			if def.Pin != t.Pin {
				v.replaced = append(v.replaced, t.Name)
				v.changed = true
			}
		}
		if hide && s.lists.hides(&guard.Call{Server: s.opts.Server, Method: "tools/call",
			ToolName: t.Name, Tool: def, Client: ci, User: s.opts.Caller}) {
			v.tools[t.Name] = shown{out: "denied"}
			v.hidden = append(v.hidden, t.Name)
			v.changed = true
			continue
		}
		v.tools[t.Name] = shown{pin: def.Pin}
		v.defs = append(v.defs, def.Def)
	}
	return v
}

func (ls *lister) hides(c *guard.Call) bool {
	s := ls.s
	hide, _ := s.opts.Decider.Hides(c)
	return hide
}

// reviewed reads how the server's definitions stand.
func (ls *lister) reviewed(ctx context.Context) (map[string]string, map[string]*guard.Tool, error) {
	s := ls.s
	if mode, _ := s.lists.listingMode(); mode == ListAsServed {
		return nil, nil, nil
	}
	return s.opts.Catalog.ReviewedTools(ctx, s.opts.Server)
}

// listed answers a tools/list the server answered: its tools are recorded
// in the catalog (and their reviews planned) before the client reads the
// page, which shows what viewOf decides. It is pushed in the answer's place
// in line at once and written once ready, so that nothing the server sent
// after it overtakes it.
func (ls *lister) listed(msg wire.Message, c *call) {
	s := ls.s
	done := make(chan error, 1)
	it := item{wait: appending{ch: done}, fail: refusal(c.origID), batch: c.batch, later: new(wire.Message)}
	s.toClient.push(it)
	go func() {
		ans, out := s.lists.listing(msg, c)
		*it.later = ans
		done <- s.appendRecords(c, true, ans.Raw, out).wait()
	}()
}

// listing records a page of the server's tools and returns the answer the
// client reads and the call's outcome record.
func (ls *lister) listing(msg wire.Message, c *call) (wire.Message, *guard.Record) {
	s := ls.s
	ans, out := s.answered(msg, c)
	if err := wire.StrictListing(msg.Result); err != nil {
		// guard would pin and decide by one reading, a client show
		// another.
		s.opts.Logger.Warn("tools/list refused: the listing is ambiguous", "server", s.opts.Server, "err", err)
		out.Outcome = guard.OutcomeInvalid
		out.Detail = detailJSON(map[string]string{"invalid_result": err.Error()})
		return built(wire.Internal("Refused: the server's tool listing is ambiguous (clients would read it differently): " + err.Error()).Answer(c.origID)), out
	}
	tools, _, err := parseTools(s.opts.Server, msg.Result)
	if err != nil {
		s.opts.Logger.Warn("tools/list", "server", s.opts.Server, "err", err)
	}
	s.catalog.add(tools, false)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), listTimeout)
	defer cancel()
	if s.opts.Catalog != nil {
		// Recorded before the answer: its reviews are what it shows.
		s.lists.persistStart()
		s.lists.scanTools(tools)
		if err := s.opts.Catalog.RecordTools(ctx, s.opts.Server, tools, s.now(), s.opts.AcceptNewTools); err != nil {
			s.opts.Logger.Error("tool catalog not recorded: its new definitions are shown as their accepted ones", "server", s.opts.Server, "err", err)
		}
		s.lists.persistEnd()
	}
	states, accepted, err := s.lists.reviewed(ctx)
	if err != nil {
		s.opts.Logger.Error("tools/list refused: "+errReviews.Error(), "server", s.opts.Server, "err", err)
		out.Outcome, out.Result = guard.OutcomeProtocolError, ""
		out.Detail = detailJSON(map[string]any{"listing": errReviews.Error()})
		return built(wire.Internal("Refused: " + errReviews.Error()).Answer(c.origID)), out
	}
	v := s.lists.viewOf(tools, states, accepted)
	s.mu.Lock()
	if s.view.seen == nil || !c.nextPage {
		s.view.seen, s.view.served = map[string]shown{}, nil
	}
	maps.Copy(s.view.seen, v.tools)
	s.view.served = append(s.view.served, tools...)
	modern := s.protocol >= guard.Rev20260728
	s.mu.Unlock()
	mode, hide := s.lists.listingMode()
	private := modern && (mode != ListAsServed || hide)
	if !v.changed && !private {
		return ans, out
	}
	result := msg.Result
	if v.changed {
		list, _ := json.Marshal(v.defs)
		result = wire.SetMember(result, "tools", list)
		d := map[string]any{}
		for k, names := range map[string][]string{"shown_as_accepted": v.replaced, "awaiting_review": v.awaiting, "denied_for_every_call": v.hidden} {
			if len(names) > 0 {
				d[k] = names
			}
		}
		out.Detail = detailJSON(map[string]any{"listing": d})
	}
	if private {
		// The listing depends on reviews or on the caller: no cache
		// shared across callers may keep it.
		result = wire.SetMember(result, "cacheScope", []byte(`"private"`))
	}
	return built(wire.SetMember(ans.Raw, "result", result)), out
}

func detailJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// listChanged is the notification that the client's list of tools changed.
var listChanged = []byte(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)

// watchListing tells the client when what its listing would show changed
// (a review decided anywhere, the policy reloaded), until the session ends.
func (ls *lister) watchListing() {
	s := ls.s
	for {
		select {
		case <-s.opts.Watch.Changed():
		case <-s.ctx.Done():
			return
		}
		s.lists.relist()
	}
}

// relist compares what the client's listing would show now with what it
// showed, and tells the client when they differ.
func (ls *lister) relist() {
	s := ls.s
	s.mu.Lock()
	listed := s.view.seen != nil
	served := s.view.served
	s.mu.Unlock()
	if !listed {
		return // the client never listed: nothing it read is stale
	}
	ctx, cancel := context.WithTimeout(s.ctx, listTimeout)
	defer cancel()
	states, accepted, err := s.lists.reviewed(ctx)
	if err != nil {
		s.opts.Logger.Warn("tool reviews not read: the client is not told whether its listing changed", "err", err)
		return
	}
	v := s.lists.viewOf(served, states, accepted)
	s.mu.Lock()
	same := maps.Equal(v.tools, s.view.seen)
	s.view.seen = v.tools
	modern := s.protocol >= guard.Rev20260728
	listens := make([][]byte, 0, len(s.view.listens))
	for _, c := range s.view.listens {
		listens = append(listens, c.origID)
	}
	s.mu.Unlock()
	if same {
		return
	}
	if !modern {
		s.toClient.push(item{msg: built(listChanged)})
		return
	}
	// 2026-07-28: on the subscriptions/listen streams that asked for it.
	for _, id := range listens {
		n := wire.SetMember(listChanged, "params", []byte(`{"_meta":{"`+MetaSubscription+`":`+string(id)+`}}`))
		s.toClient.push(item{msg: built(n)})
	}
}

// declareListChanged rewrites an initialize (or server/discover) result so
// that its tools capability declares listChanged: guard tells the client
// when a review changes what it should see, whatever the server does.
func declareListChanged(msg wire.Message) wire.Message {
	caps := wire.ParamsMember(msg.Result, "capabilities")
	tools := wire.ParamsMember(caps, "tools")
	if len(tools) == 0 || tools[0] != '{' || bytes.Equal(wire.ParamsMember(tools, "listChanged"), []byte("true")) {
		return msg
	}
	caps = wire.SetMember(caps, "tools", wire.SetMember(tools, "listChanged", []byte("true")))
	return built(wire.SetMember(msg.Raw, "result", wire.SetMember(msg.Result, "capabilities", caps)))
}

// noteListen keeps a client's subscriptions/listen that asks for tool list
// changes (2026-07-28), by its id as the client sent it: guard's own
// list_changed goes to its stream.
func (ls *lister) noteListen(msg wire.Message, c *call) {
	s := ls.s
	filter := wire.ParamsMember(wire.ParamsMember(msg.Params, "notifications"), "toolsListChanged")
	if !bytes.Equal(filter, []byte("true")) {
		return
	}
	s.mu.Lock()
	if s.view.listens == nil {
		s.view.listens = map[string]*call{}
	}
	s.view.listens[c.origKey] = c
	s.mu.Unlock()
}

// acknowledged rewrites the server's acknowledgement of a subscription that
// asked for tool list changes, so that it says they are honoured: guard
// sends them itself.
func (ls *lister) acknowledged(msg wire.Message) wire.Message {
	s := ls.s
	sub := wire.MetaMember(msg.Params, MetaSubscription)
	if sub == nil {
		return msg
	}
	key, ours := wire.IDKey(sub), false
	s.mu.Lock()
	for _, c := range s.view.listens {
		// The server names the subscription by the id it was sent.
		ours = ours || c.sentKey == key || c.sentKey == "" && c.origKey == key
	}
	s.mu.Unlock()
	n := wire.ParamsMember(msg.Params, "notifications")
	if !ours || len(n) == 0 || n[0] != '{' || bytes.Equal(wire.ParamsMember(n, "toolsListChanged"), []byte("true")) {
		return msg
	}
	return built(wire.SetMember(msg.Raw, "params", wire.SetMember(msg.Params, "notifications", wire.SetMember(n, "toolsListChanged", []byte("true")))))
}

// lister is a session's tool listings: what the client is shown, the
// catalog's persistence, and the list changes guard announces.
type lister struct{ s *Session }
