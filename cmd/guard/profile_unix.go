//go:build unix

package main

import (
	"os"
	"syscall"
)

// heapProfileSignals ask a process with heapProfileEnv for a heap profile.
var heapProfileSignals = []os.Signal{syscall.SIGUSR1}
