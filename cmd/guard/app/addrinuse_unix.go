//go:build unix

package app

import (
	"errors"
	"syscall"
)

// addrInUse reports whether err is a listen that failed because another
// process (another guard, serving the UI) holds the address.
func addrInUse(err error) bool { return errors.Is(err, syscall.EADDRINUSE) }
