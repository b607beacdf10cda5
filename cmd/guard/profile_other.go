//go:build !unix

package main

import "os"

// heapProfileSignals ask a process with heapProfileEnv for a heap profile:
// none where there is no SIGUSR1.
var heapProfileSignals []os.Signal
