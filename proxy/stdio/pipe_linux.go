package stdio

import (
	"os"
	"syscall"
)

// blockingPipe returns the two ends of a pipe in blocking mode: a read
// waits in the kernel rather than going through Go's poller (read,
// EAGAIN, epoll, read again), which costs two extra system calls per
// message.
func blockingPipe() (r, w *os.File, err error) {
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC); err != nil {
		return nil, nil, err
	}
	return os.NewFile(uintptr(fds[0]), "|0"), os.NewFile(uintptr(fds[1]), "|1"), nil
}
