package stdio

import (
	"fmt"
	"strings"
	"testing"

	"github.com/guard-mcp/guard/proxy"
)

// A server that could not be started leaves guard run nothing to relay:
// each request the client sends is answered with an error that says why
// (an initialize in particular, which the client waits on), a
// notification or a response with nothing, until the client's input
// ends. The client used to see guard's output end, and had to guess.
func TestRefuseStartAnswersEachRequest(t *testing.T) {
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`not json`,
		`[{"jsonrpc":"2.0","id":"a","method":"ping"},{"jsonrpc":"2.0","method":"notifications/x"},{"jsonrpc":"2.0","id":"b","method":"tools/list"}]`,
		`{"jsonrpc":"2.0","id":2,"result":{}}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"x"}}`,
	}, "\n") + "\n"
	var out strings.Builder
	cause := fmt.Errorf("%w: node: the server could not be isolated from guard's files, so guard did not start it: too many open files", ErrStart)
	if err := RefuseStart(proxy.NewStreamConn(strings.NewReader(in), &out, 0), cause); err != nil {
		t.Fatal(err)
	}
	const text = `"The server could not be started: node: the server could not be isolated from guard's files, so guard did not start it: too many open files"`
	want := []string{
		`{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":` + text + `}}`,
		`[{"jsonrpc":"2.0","id":"a","error":{"code":-32603,"message":` + text + `}},{"jsonrpc":"2.0","id":"b","error":{"code":-32603,"message":` + text + `}}]`,
		`{"jsonrpc":"2.0","id":3,"error":{"code":-32603,"message":` + text + `}}`,
	}
	got := strings.Split(strings.TrimSpace(out.String()), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("answers:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
