package tmpfs

import (
	"os"
	"syscall"
	"testing"
)

// Mount mounts a tmpfs of size bytes ("4m") on dir, unmounted when the
// test ends; it skips the test where none can be mounted.
func Mount(t testing.TB, dir, size string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs (a disk that fills); run as root to test a full disk")
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
}
