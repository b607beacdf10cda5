package proxy

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/guard-mcp/guard/wire"
)

// A Pipe passes messages whole and in order, parsed once, reports one that
// does not parse without ending, and ends the reader's input when the
// writer closes.
func TestPipeCarriesParsedMessagesInOrder(t *testing.T) {
	a, b := Pipe()
	ctx := context.Background()
	go func() {
		_ = a.Write(ctx, Unparsed([]byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)))
		_ = a.Write(ctx, Unparsed([]byte(`{not json`)))
		_ = a.Write(ctx, Unparsed([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)))
		a.Close()
	}()
	m, err := b.Read(ctx)
	if err != nil || m.Kind != wire.KindRequest || m.Method != "ping" || string(m.ID) != "1" {
		t.Fatalf("first: %+v %v", m, err)
	}
	_, err = b.Read(ctx)
	var bad *BadMessage
	if !errors.As(err, &bad) || string(bad.Raw) != "{not json" {
		t.Fatalf("second: %v", err)
	}
	if m, err = b.Read(ctx); err != nil || m.Kind != wire.KindNotification {
		t.Fatalf("third: %+v %v", m, err)
	}
	if _, err = b.Read(ctx); err != io.EOF {
		t.Fatalf("after close: %v", err)
	}
	if err := a.Write(ctx, Unparsed([]byte(`{}`))); err == nil {
		t.Fatal("a write after close succeeded")
	}
}

// A stream Conn cuts lines, refuses one over the limit and goes on, and
// writes each message as one line.
func TestStreamConnFramesLines(t *testing.T) {
	in := strings.NewReader("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n" + strings.Repeat("x", 100) + "\n\n{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}")
	var out strings.Builder
	c := NewStreamConn(in, &out, 64)
	ctx := context.Background()
	m, err := c.Read(ctx)
	if err != nil || string(m.ID) != "1" {
		t.Fatalf("first: %+v %v", m, err)
	}
	_, err = c.Read(ctx)
	var tl *wire.TooLongError
	if !errors.As(err, &tl) {
		t.Fatalf("long line: %v", err)
	}
	if m, err = c.Read(ctx); err != nil || string(m.ID) != "2" {
		t.Fatalf("third: %+v %v", m, err)
	}
	if _, err = c.Read(ctx); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
	_ = c.Write(ctx, m)
	_ = c.Write(ctx, m)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if want := string(m.Raw) + "\n" + string(m.Raw) + "\n"; out.String() != want {
		t.Fatalf("wrote %q, want %q", out.String(), want)
	}
}
