package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"

	"github.com/guard-mcp/guard/wire"
)

// Conn is one peer of a relay session, whatever carries its messages: the
// client on guard's stdin and stdout, a server run as a child, a client of
// the Streamable HTTP endpoint, a server reached over HTTP, or a member of
// the aggregate endpoint. A session relays between two of them.
//
// Messages cross a Conn whole and parsed once: Read returns the exact bytes
// of one message with what wire.Parse found in them, and Write takes such a
// message. A message guard built itself may be written unparsed (Kind 0);
// a Conn that routes by id or method parses it then.
type Conn interface {
	// Read returns the peer's next message. A *BadMessage or a
	// *wire.TooLongError is about that one message and the next Read goes
	// on; any other error (io.EOF) ends the peer's input.
	Read(ctx context.Context) (wire.Message, error)
	// Write sends one message to the peer.
	Write(ctx context.Context, msg wire.Message) error
	// Close ends what guard sends to the peer.
	Close() error
}

// Flusher is a Conn that buffers writes: the relay flushes after each run
// of messages it writes together.
type Flusher interface {
	Flush() error
}

// BadMessage is a message that did not parse: Raw is its exact bytes, Err
// says why (a *wire.InvalidError, or wire.ErrParse).
type BadMessage struct {
	Raw []byte
	Err error
}

func (e *BadMessage) Error() string { return e.Err.Error() }
func (e *BadMessage) Unwrap() error { return e.Err }

// ReadMessage parses one message's bytes as Conn.Read returns them. A
// message refused keeps what Parse found in it: one nested too deep is
// classified, so that the relay can still answer the request its response
// was for.
func ReadMessage(raw []byte) (wire.Message, error) {
	m, err := wire.Parse(raw)
	if err != nil {
		return m, &BadMessage{Raw: raw, Err: err}
	}
	return m, nil
}

// Parsed returns a message with its parsed fields, parsing one guard
// wrote unparsed (Kind 0). A message that does not parse keeps Kind 0.
func Parsed(m wire.Message) wire.Message {
	if m.Kind != 0 {
		return m
	}
	p, err := wire.Parse(m.Raw)
	if err != nil {
		return m
	}
	return p
}

// Unparsed is a message guard built, as a Conn writes it.
func Unparsed(raw []byte) wire.Message { return wire.Message{Raw: raw} }

// built is a message guard built (an answer of its own, a result it
// masked), parsed: a Conn may route it by its id or rewrite it, and a
// message is either parsed in full or not at all.
func built(raw []byte) wire.Message {
	return Parsed(Unparsed(raw))
}

// NewStreamConn returns a Conn over a newline-delimited byte stream: the
// client on guard's own stdin and stdout, or a server's pipes. Lines over
// max bytes (default 64 MiB) are refused one by one (*wire.TooLongError).
// Close closes w when it is an io.Closer.
func NewStreamConn(r io.Reader, w io.Writer, max int) Conn {
	if max <= 0 {
		max = defaultMaxMessage
	}
	return &streamConn{r: wire.NewReader(r, max), w: bufio.NewWriterSize(w, 64<<10), c: w}
}

type streamConn struct {
	r   *wire.Reader
	wmu sync.Mutex
	w   *bufio.Writer
	c   io.Writer
}

func (c *streamConn) Read(context.Context) (wire.Message, error) {
	line, err := c.r.NextOwned()
	if err != nil {
		return wire.Message{}, err
	}
	return ReadMessage(line)
}

func (c *streamConn) Write(_ context.Context, m wire.Message) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, err := c.w.Write(m.Raw); err != nil {
		return err
	}
	return c.w.WriteByte('\n')
}

func (c *streamConn) Flush() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.w.Flush()
}

func (c *streamConn) Close() error {
	err := c.Flush()
	if cl, ok := c.c.(io.Closer); ok {
		err = errors.Join(err, cl.Close())
	}
	return err
}

// ErrClosed is a write to a Conn whose peer has ended.
var ErrClosed = errors.New("the connection is closed")

// Pipe returns two Conns joined in memory: what is written to one is read
// from the other, parsed once, in order. A write waits until the other side
// reads it (or closes), as over a pipe. Closing one side ends the other's
// input once it has read what was written before.
func Pipe() (Conn, Conn) {
	a, b := newPipe()
	return a, b
}

func newPipe() (*pipeConn, *pipeConn) {
	ab := NewInbox()
	ba := NewInbox()
	return &pipeConn{in: ba, out: ab}, &pipeConn{in: ab, out: ba}
}

type pipeConn struct {
	in, out *Inbox
}

// end closes both directions: its side reads no more either, so what the
// other side writes fails rather than waits.
func (p *pipeConn) end() {
	p.out.Close()
	p.in.Close()
}

func (p *pipeConn) Read(ctx context.Context) (wire.Message, error) {
	return p.in.Take(ctx)
}

func (p *pipeConn) Write(ctx context.Context, m wire.Message) error {
	return p.out.Put(ctx, m)
}

func (p *pipeConn) Close() error {
	p.out.Close()
	return nil
}

// Inbox hands messages from writers to one reader, each write waiting for
// the read that takes it. Once closed, writes fail and reads end.
type Inbox struct {
	ch     chan delivery
	closed chan struct{}
	once   sync.Once
}

// delivery is what one read takes: a message, or an error about one
// message (a *wire.TooLongError).
type delivery struct {
	m   wire.Message
	err error
}

// NewInbox returns an empty, open Inbox.
func NewInbox() *Inbox {
	return &Inbox{ch: make(chan delivery), closed: make(chan struct{})}
}

// Put hands m to the reader, waiting until it takes it, the inbox is
// closed (an error), or ctx ends.
func (b *Inbox) Put(ctx context.Context, m wire.Message) error {
	return b.send(ctx, delivery{m: m})
}

func (b *Inbox) send(ctx context.Context, d delivery) error {
	select {
	case <-b.closed:
		return ErrClosed
	default:
	}
	select {
	case b.ch <- d:
		return nil
	case <-b.closed:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Take returns the next message, parsed (one put unparsed is parsed here,
// as Conn.Read returns it), or the error delivered in its place.
func (b *Inbox) Take(ctx context.Context) (wire.Message, error) {
	select {
	case d := <-b.ch:
		if d.err == nil && d.m.Kind == 0 {
			return ReadMessage(d.m.Raw)
		}
		return d.m, d.err
	case <-b.closed:
		return wire.Message{}, io.EOF
	case <-ctx.Done():
		return wire.Message{}, ctx.Err()
	}
}

// Close ends the inbox: writes fail, and reads end (io.EOF).
func (b *Inbox) Close() { b.once.Do(func() { close(b.closed) }) }

// OneLine returns a message as one line, as the relay reads them: a
// pretty-printed body (or an SSE event whose data spans several lines)
// loses the whitespace between its tokens, nothing else, since a JSON
// string cannot hold a raw newline. Text that is not JSON is returned as
// is, for the relay to refuse.
func OneLine(b []byte) []byte {
	if bytes.IndexByte(b, '\n') < 0 && bytes.IndexByte(b, '\r') < 0 {
		return b
	}
	var out bytes.Buffer
	if json.Compact(&out, b) != nil {
		return b
	}
	return out.Bytes()
}

// PutError hands the reader an error about one message in place of that
// message (a *wire.TooLongError): its Take returns the error, and the next
// Take goes on.
func (b *Inbox) PutError(ctx context.Context, err error) error {
	return b.send(ctx, delivery{err: err})
}
