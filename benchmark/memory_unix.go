//go:build unix

package benchmark

import (
	"os"
	"syscall"
)

// signalHeapProfile asks a guard process for a heap profile.
func signalHeapProfile(p *os.Process) error { return p.Signal(syscall.SIGUSR1) }
