package remote

import (
	"strings"
	"testing"
)

// An event stream's event over the limit is reported by its size and the
// next one is read; a line too long to be any event's ends the stream,
// reported too.
func TestReadEventsBoundsEvents(t *testing.T) {
	var got []string
	var over []int
	in := "data: " + strings.Repeat("a", 30) + "\ndata: " + strings.Repeat("b", 30) + "\n\n" +
		"event: message\ndata: small\n\n" +
		"data: " + strings.Repeat("c", 200) + "\n\ndata: never\n\n"
	readEvents(strings.NewReader(in), 50, func(_ string, data []byte) { got = append(got, string(data)) },
		func(size int) { over = append(over, size) })
	if len(got) != 1 || got[0] != "small" {
		t.Fatalf("events read: %q", got)
	}
	if len(over) != 2 || over[0] != 61 || over[1] != 51 {
		t.Fatalf("events over the limit: %v", over)
	}
}
