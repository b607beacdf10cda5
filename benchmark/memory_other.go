//go:build !unix

package benchmark

import (
	"errors"
	"os"
)

// signalHeapProfile asks a guard process for a heap profile: only on Unix,
// where it is a signal.
func signalHeapProfile(*os.Process) error { return errors.ErrUnsupported }
