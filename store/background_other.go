//go:build !linux

package store

// background is background_linux.go's: elsewhere a thread's priority is
// not the process's to lower alone (macOS's and Windows's thread
// priorities need other calls, not made), so the ingester runs as any
// goroutine does.
func background() {}
