package app

import (
	"errors"

	"golang.org/x/sys/windows"
)

// addrInUse reports whether err is a listen that failed because another
// process (another guard, serving the UI) holds the address: Winsock's
// WSAEADDRINUSE, which is not syscall.EADDRINUSE.
func addrInUse(err error) bool { return errors.Is(err, windows.WSAEADDRINUSE) }
