package stdio

import (
	"context"
	"io"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/guard-mcp/guard/proxy"
)

// What guard writes to a child server reaches it at once (the relay
// flushes the child's Conn), and the child's exit status is Run's.
func TestRunRelaysToAChildAndReturnsItsStatus(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil || runtime.GOOS == "windows" {
		t.Skip("no POSIX shell")
	}
	ctx := context.Background()
	opts, _, _ := testOptions(t, ctx, "policy:\n  default: allow\n", time.Second)
	// The server answers one ping, then exits 3 once its input ends.
	argv := []string{sh, "-c", `read line; printf '%s\n' '{"jsonrpc":"2.0","id":1,"result":{}}'; cat >/dev/null; exit 3`}
	c2gR, c2gW := io.Pipe()
	g2cR, g2cW := io.Pipe()
	done := make(chan int, 1)
	go func() {
		code, err := Run(ctx, opts, Stdio{Argv: argv}, proxy.NewStreamConn(c2gR, g2cW, 1<<20))
		if err != nil {
			t.Error(err)
		}
		g2cW.Close()
		done <- code
	}()
	if _, err := io.WriteString(c2gW, `{"jsonrpc":"2.0","id":1,"method":"ping"}`+"\n"); err != nil {
		t.Fatal(err)
	}
	answers := lines(g2cR)
	select {
	case a := <-answers:
		if a != `{"jsonrpc":"2.0","id":1,"result":{}}` {
			t.Fatalf("answer: %q", a)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no answer from the server through guard")
	}
	c2gW.Close()
	select {
	case code := <-done:
		if code != 3 {
			t.Fatalf("exit status %d, want 3", code)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return once the server exited")
	}
}
