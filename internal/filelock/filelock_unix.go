//go:build unix

package filelock

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

func lock(f *os.File, exclusive, wait bool) error {
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	if !wait {
		how |= unix.LOCK_NB
	}
	for {
		err := unix.Flock(int(f.Fd()), how)
		switch {
		case err == nil:
			return nil
		case err == unix.EINTR:
			continue
		case !wait && err == unix.EWOULDBLOCK:
			return ErrLocked
		}
		return fmt.Errorf("lock %s: %w", f.Name(), err)
	}
}

func unlock(f *os.File) error {
	if err := unix.Flock(int(f.Fd()), unix.LOCK_UN); err != nil {
		return fmt.Errorf("unlock %s: %w", f.Name(), err)
	}
	return nil
}

// openFile is os.OpenFile: on Unix an open file can always be renamed and
// removed.
func openFile(name string, flag int, perm os.FileMode) (*os.File, error) {
	return os.OpenFile(name, flag, perm)
}
