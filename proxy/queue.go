package proxy

import (
	"bufio"
	"io"
	"sync"
)

// item is one message on its way to a peer. When wait is set the message
// goes out only after its audit records are durable; if they could not be
// written, fail gives what to send instead (nil: nothing). Items leave in
// the order they were queued, so a notification never overtakes the request
// queued before it, and waiting for one commit costs the items behind it
// nothing extra: the audit writer commits whatever is queued at once.
type item struct {
	data  []byte
	wait  <-chan error
	fail  func(error) []byte
	batch *batch
}

// batch collects the answers to the requests of one JSON-RPC batch, which
// are sent back together as one array.
type batch struct {
	want  int
	parts [][]byte
}

// queue is the ordered outbox of one peer. Sending never holds a lock.
type queue struct {
	ch        chan item
	closeOnce sync.Once
	done      chan struct{}
}

func newQueue() *queue {
	return &queue{ch: make(chan item, 1024), done: make(chan struct{})}
}

// push queues an item. It blocks while the peer is slower than the other
// side, which bounds memory; it drops the item when the queue was closed.
func (q *queue) push(it item) {
	select {
	case <-q.done:
	case q.ch <- it:
	}
}

// close stops the writer once everything queued so far is written.
func (q *queue) close() {
	q.closeOnce.Do(func() { q.push(item{}) })
}

// run writes queued items to w until close. Writes are buffered and flushed
// whenever nothing more is queued. After a write error, items are drained
// and dropped (the peer is gone) so that pushers never block.
func (q *queue) run(w io.Writer) error {
	defer close(q.done)
	bw := bufio.NewWriterSize(w, 64<<10)
	var werr error
	for it := range q.ch {
		if it.data == nil && it.wait == nil && it.batch == nil {
			break // close marker
		}
		data := it.data
		if it.wait != nil {
			if err := <-it.wait; err != nil {
				data = nil
				if it.fail != nil {
					data = it.fail(err)
				}
			}
		}
		if it.batch != nil {
			if data != nil {
				it.batch.parts = append(it.batch.parts, data)
			} else {
				it.batch.want--
			}
			if len(it.batch.parts) < it.batch.want || it.batch.want == 0 {
				continue
			}
			data = joinBatch(it.batch.parts)
		}
		if data == nil || werr != nil {
			continue
		}
		if _, err := bw.Write(data); err != nil {
			werr = err
			continue
		}
		if err := bw.WriteByte('\n'); err != nil {
			werr = err
			continue
		}
		if len(q.ch) == 0 {
			if err := bw.Flush(); err != nil {
				werr = err
			}
		}
	}
	if werr == nil {
		werr = bw.Flush()
	}
	return werr
}

func joinBatch(parts [][]byte) []byte {
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
