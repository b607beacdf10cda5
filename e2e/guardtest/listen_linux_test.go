package guardtest

import (
	"net"
	"os"
	"os/exec"
	"testing"
)

// A listening socket counts as the process's that holds it, or an
// ancestor's, and not as another process's.
func TestListensAt(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	if !listensAt(os.Getpid(), addr) {
		t.Errorf("this process's listener at %s is not seen as its own", addr)
	}
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer other.Process.Kill()
	if listensAt(other.Process.Pid, addr) {
		t.Errorf("this process's listener at %s is seen as its child's", addr)
	}
	free := FreePort(t)
	if listensAt(os.Getpid(), free) {
		t.Errorf("no one listens at %s, yet it is seen as this process's", free)
	}
}
