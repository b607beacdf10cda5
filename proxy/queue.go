package proxy

import (
	"context"
	"sync"

	"github.com/guard-mcp/guard/wire"
)

// item is one message on its way to a peer. When wait is set (wait.ch)
// the message goes out only after its audit records are durable; if they
// could not be written, fail gives what to send instead (a message
// without Raw: nothing). Items leave in the order they were queued, so a notification
// never overtakes the request queued before it.
type item struct {
	msg   wire.Message
	wait  appending
	fail  func(error) wire.Message
	batch *batch
	// waited: the audit result was taken from wait already; it is err.
	waited bool
	err    error
	// later, when set, is the message to send in msg's place, written by
	// whoever sends on wait before it sends: an answer that takes its
	// place in line before it is ready (a tools/list being recorded).
	later *wire.Message
}

// batch collects the answers to the requests of one JSON-RPC batch, which
// are sent back together as one array.
type batch struct {
	want  int
	parts [][]byte
}

// queue is the ordered outbox of one peer. A message that is ready when
// nothing is queued before it is written by the goroutine that pushes it;
// the rest wait for the queue's own goroutine. No lock is held while
// writing: the writing flag keeps writes in order.
type queue struct {
	mu      sync.Mutex
	items   []item
	writing bool
	closed  bool
	w       Conn
	werr    error
	signal  chan struct{}
	done    chan struct{}
	// failed, when set before run, is called once, with the error, when
	// a write to the peer fails: nothing more reaches it.
	failed func(error)
}

func newQueue() *queue {
	return &queue{signal: make(chan struct{}, 1), done: make(chan struct{})}
}

// push queues an item, or writes it at once when it is ready and first in
// line. Items pushed after close are dropped (their audit result is still
// taken, to end its spans).
func (q *queue) push(it item) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		if it.wait.tr != nil {
			go it.wait.wait() // its spans end all the same
		}
		return
	}
	if q.w != nil && !q.writing && len(q.items) == 0 && ready(&it) {
		q.writing = true
		q.mu.Unlock()
		q.deliver(it)
		q.flush()
		q.mu.Lock()
		q.writing = false
		more := len(q.items) > 0 || q.closed
		q.mu.Unlock()
		if more {
			q.wake()
		}
		return
	}
	q.items = append(q.items, it)
	q.mu.Unlock()
	q.wake()
}

func (q *queue) wake() {
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// ready reports whether an item can be written now. Its audit result,
// when there is one, is taken and kept in the item.
func ready(it *item) bool {
	if it.batch != nil {
		return false // batches are assembled by the queue's goroutine
	}
	if it.wait.ch == nil {
		return true
	}
	select {
	case err := <-it.wait.ch:
		it.err, it.waited = it.wait.done(err), true
		return true
	default:
		return false
	}
}

// close stops the queue once everything queued so far is written.
func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.wake()
}

// run writes queued items to w until close, then flushes.
func (q *queue) run(w Conn) error {
	defer close(q.done)
	q.mu.Lock()
	q.w = w
	q.mu.Unlock()
	for {
		q.mu.Lock()
		if q.writing || len(q.items) == 0 {
			closed := q.closed && !q.writing && len(q.items) == 0
			q.mu.Unlock()
			if closed {
				q.flush()
				return q.werr
			}
			<-q.signal
			continue
		}
		items := q.items
		q.items = nil
		q.writing = true
		q.mu.Unlock()
		for _, it := range items {
			q.deliver(it)
		}
		q.flush()
		q.mu.Lock()
		q.writing = false
		q.mu.Unlock()
	}
}

// deliver writes one item (the writer of the moment has q.writing).
func (q *queue) deliver(it item) {
	msg := it.msg
	if it.wait.ch != nil {
		err := it.err
		if !it.waited {
			err = it.wait.wait()
		}
		switch {
		case err != nil:
			msg = wire.Message{}
			if it.fail != nil {
				msg = it.fail(err)
			}
		case it.later != nil:
			msg = *it.later
		}
	}
	if it.batch != nil {
		if msg.Raw != nil {
			it.batch.parts = append(it.batch.parts, msg.Raw)
		} else {
			it.batch.want--
		}
		if len(it.batch.parts) < it.batch.want || it.batch.want == 0 {
			return
		}
		msg = Unparsed(JoinBatch(it.batch.parts))
	}
	if msg.Raw == nil || q.werr != nil {
		return
	}
	q.fail(q.w.Write(context.Background(), msg))
}

func (q *queue) flush() {
	if f, ok := q.w.(Flusher); ok && q.werr == nil {
		q.fail(f.Flush())
	}
}

// fail keeps a write's error, the first one only, and reports it.
func (q *queue) fail(err error) {
	if err == nil || q.werr != nil {
		return
	}
	q.werr = err
	if q.failed != nil {
		go q.failed(err)
	}
}

// JoinBatch is a JSON-RPC batch of the messages given.
func JoinBatch(parts [][]byte) []byte {
	n := 1
	for _, p := range parts {
		n += len(p) + 1
	}
	out := make([]byte, 0, n)
	out = append(out, '[')
	for i, p := range parts {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, p...)
	}
	return append(out, ']')
}
