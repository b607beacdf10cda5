package sandbox

import (
	"errors"
	"os"
	"syscall"
	"testing"
)

// Supported tells a system without a sandbox from one that cannot make
// one now for want of descriptors: only the first is unsupported.
func TestSupported(t *testing.T) {
	available(t)
	self := testSpec(t).Self
	if err := Supported(self); err != nil {
		t.Fatalf("a system that makes sandboxes: %v", err)
	}
	if err := Supported(""); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("no init: %v, want ErrUnsupported", err)
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip(err)
	}
	short := lim
	short.Cur = uint64(len(fds)) // every descriptor taken: the next one fails
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &short); err != nil {
		t.Skip(err)
	}
	err = Supported(self)
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	if err == nil || errors.Is(err, ErrUnsupported) || !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("short of descriptors: %v, want EMFILE, not ErrUnsupported", err)
	}
}
