//go:build unix

package stdio

import (
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestBlockingPipe(t *testing.T) {
	r, w, err := os.Pipe() // Go makes both ends non-blocking
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	br, bw := Blocking(r), Blocking(w)
	if _, ok := br.(fdIO); !ok {
		t.Fatalf("a pipe was not switched to blocking system calls: %T", br)
	}
	flags, err := fcntlGetfl(int(r.Fd()))
	if err != nil || flags&syscall.O_NONBLOCK != 0 {
		t.Fatalf("read end still non-blocking: flags %#x, %v", flags, err)
	}
	go func() {
		_, _ = bw.Write([]byte("one line\n"))
		w.Close()
	}()
	got, err := io.ReadAll(br)
	if err != nil || string(got) != "one line\n" {
		t.Fatalf("read %q, %v", got, err)
	}
}

func TestBlockingLeavesFilesAlone(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if rw := Blocking(f); rw != io.ReadWriter(f) {
		t.Fatalf("a regular file was wrapped: %T", rw)
	}
}

func fcntlGetfl(fd int) (int, error) {
	v, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFL, 0)
	if e != 0 {
		return 0, e
	}
	return int(v), nil
}
