package stream

import "golang.org/x/sys/unix"

// unacknowledged returns how many bytes sent on the TCP socket fd its
// peer has not acknowledged yet, or the error that reset it: on macOS,
// SO_NWRITE, the bytes in the send buffer, which keeps them until they
// are acknowledged.
func unacknowledged(fd uintptr) (int, error) {
	n, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_NWRITE)
	if err != nil {
		return 0, err
	}
	return n, socketError(fd)
}
