package stdio

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/guard-mcp/guard/proxy"
)

// serverWithChild runs argv (with env) as a server under Run, with a
// grace of 200ms, and waits until the server has written the pid of a
// child it started into the file it is given as GUARD_TEST_TREE_PID. It
// returns that pid, and end, which ends the client's input and returns
// the server's exit status.
func serverWithChild(t *testing.T, argv, env []string) (child int, end func() int) {
	t.Helper()
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	in, closeIn, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	out, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close() })
	ctx := context.Background()
	opts, _, _ := testOptions(t, ctx, "", time.Second)
	done := make(chan int, 1)
	go func() {
		code, err := Run(ctx, opts, Stdio{Argv: argv, Env: append(env, "GUARD_TEST_TREE_PID="+pidFile), Grace: 200 * time.Millisecond},
			proxy.NewStreamConn(in, out, 1<<20))
		if err != nil {
			t.Error(err)
		}
		done <- code
	}()
	for deadline := time.Now().Add(10 * time.Second); child == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the server's child did not start")
		}
		b, _ := os.ReadFile(pidFile)
		child, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	return child, func() int {
		t.Helper()
		closeIn.Close() // the client goes: the server's input ends, then its grace
		select {
		case code := <-done:
			return code
		case <-time.After(20 * time.Second):
			t.Fatal("the server was not ended")
			return 0
		}
	}
}
