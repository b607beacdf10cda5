package stdio

import (
	"bufio"
	"io"

	"github.com/guard-mcp/guard/internal/relaytest"
)

// testOptions are the relay options of package proxy's tests (see
// package relaytest).
var testOptions = relaytest.Options

// lines reads r's lines, one by one.
func lines(r io.Reader) <-chan string {
	ch := make(chan string, 1024)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 4<<20)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}
