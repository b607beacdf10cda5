package stream

import "golang.org/x/sys/unix"

// unacknowledged returns how many bytes sent on the TCP socket fd its
// peer has not acknowledged yet (SIOCOUTQ), or the error that reset it.
func unacknowledged(fd uintptr) (int, error) {
	n, err := unix.IoctlGetInt(int(fd), unix.TIOCOUTQ)
	if err != nil {
		return 0, err
	}
	return n, socketError(fd)
}
