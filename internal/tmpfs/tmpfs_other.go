//go:build !linux

package tmpfs

import "testing"

// Mount skips the test: a small disk that fills is a Linux tmpfs.
func Mount(t testing.TB, _, _ string) {
	t.Helper()
	t.Skip("a disk that fills is a tmpfs, mounted on Linux only")
}
