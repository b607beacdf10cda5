//go:build unix

package stream

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// socketError is the socket's pending error: a reset, when the peer
// closed with bytes unread.
func socketError(fd uintptr) error {
	soErr, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
	if err != nil {
		return err
	}
	if soErr != 0 {
		return fmt.Errorf("the connection was reset: %w", syscall.Errno(soErr))
	}
	return nil
}
