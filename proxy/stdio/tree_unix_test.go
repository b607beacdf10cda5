//go:build unix

package stdio

import (
	"errors"
	"os"
	"syscall"
	"testing"
	"time"
)

// A server that outstays its grace is ended with the processes it
// started: they are in its process group.
func TestEndingAServerEndsItsChildren(t *testing.T) {
	// The shell ignores its input's end and waits for a child that would
	// sleep a minute.
	child, end := serverWithChild(t, []string{"sh", "-c", `sleep 60 & echo $! > "$GUARD_TEST_TREE_PID"; wait`}, os.Environ())
	if code := end(); code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit %d, want %d", code, 128+int(syscall.SIGTERM))
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
