package streamable

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/guard-mcp/guard/wire"
)

// The server-sent event streams of guard's Streamable HTTP front (the
// answers of a POST, the session's GET stream, resumption by event id).

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
func (h *Server) streamSSE(w http.ResponseWriter, r *http.Request, st *stream, first *event) {
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
			if buf == nil {
				buf = make([]byte, 0, eventSize(msg))
			}
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

// eventSize is the size of a message's event, as appendEvent writes it.
func eventSize(e event) int {
	return len("id: \nevent: message\ndata: \n\n") + len(e.id) + len(e.msg.Raw)
}

// appendEvent appends one server-sent event.
func appendEvent(b []byte, e event) []byte {
	b = append(b, "id: "...)
	b = append(b, e.id...)
	b = append(b, "\nevent: message\ndata: "...)
	b = append(b, e.msg.Raw...)
	return append(b, "\n\n"...)
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
	// readers counts who reads it now; dropped, how often it was let go
	// with requests unanswered (both under the router's mu).
	readers int
	dropped int
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
	var timer *time.Timer // made when the wait has to block
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
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
		if d > 0 && timer == nil {
			timer = time.NewTimer(d)
			timeout = timer.C
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
