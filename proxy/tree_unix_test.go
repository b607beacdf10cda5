//go:build unix

package proxy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A server that outstays its grace is ended with the processes it
// started: they are in its process group.
func TestEndingAServerEndsItsChildren(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	// The shell ignores its input's end and waits for a child that would
	// sleep a minute.
	script := `sleep 60 & echo $! > ` + pidFile + `; wait`
	in, closeIn, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	ctx := context.Background()
	opts, _, _ := testOptions(t, ctx, "", time.Second)
	done := make(chan int, 1)
	go func() {
		code, err := RunStdio(ctx, opts, Stdio{Argv: []string{"sh", "-c", script}, Grace: 200 * time.Millisecond},
			NewStreamConn(in, out, 1<<20))
		if err != nil {
			t.Error(err)
		}
		done <- code
	}()
	var child int
	for deadline := time.Now().Add(5 * time.Second); child == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the server's child did not start")
		}
		b, _ := os.ReadFile(pidFile)
		child, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	closeIn.Close() // the client goes: the server's input ends, then its grace
	select {
	case code := <-done:
		if code != 128+int(syscall.SIGTERM) {
			t.Errorf("exit %d, want %d", code, 128+int(syscall.SIGTERM))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server was not ended")
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if err := syscall.Kill(child, 0); errors.Is(err, syscall.ESRCH) {
			break
		}
		if time.Now().After(deadline) {
			syscall.Kill(child, syscall.SIGKILL)
			t.Fatal("the server's child outlived it")
		}
	}
}
