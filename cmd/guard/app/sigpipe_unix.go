//go:build unix

package app

import (
	"os"
	"os/signal"
	"syscall"
)

// catchSIGPIPE has a write to a client that went away fail (EPIPE) rather
// than end guard: its held calls are then withdrawn and recorded, and its
// server ended, before guard exits. (Caught, not ignored: the server
// starts with SIGPIPE's default action, as it would without guard.) It
// returns the function that stops catching it.
func catchSIGPIPE() (stop func()) {
	pipes := make(chan os.Signal, 1)
	signal.Notify(pipes, syscall.SIGPIPE)
	return func() { signal.Stop(pipes) }
}
