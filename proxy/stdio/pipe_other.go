//go:build !linux

package stdio

import "os"

// blockingPipe returns the two ends of a pipe: os.Pipe's, which Go reads
// through its poller on macOS (a few more system calls per message than
// Linux's blocking pipe) and with blocking calls on Windows.
func blockingPipe() (r, w *os.File, err error) { return os.Pipe() }
