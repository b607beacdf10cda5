// Package filelock locks open files against other processes in the same
// way on every system guard runs on (flock(2) on Unix, LockFileEx on
// Windows), and opens files that may be renamed or removed while open, as
// guard's audit journals are by whichever process moves them into the
// database.
//
// The locks are advisory and belong to the open file: another open of the
// same file, in this process or another, is another holder. A lock ends
// with Unlock or when the file is closed.
package filelock

import (
	"errors"
	"os"
)

// ErrLocked is what TryLock and TryRLock return when another holder has a
// lock that conflicts.
var ErrLocked = errors.New("the file is locked by another holder")

// Lock takes an exclusive lock on f, waiting for other holders to let go.
func Lock(f *os.File) error { return lock(f, true, true) }

// RLock takes a shared lock on f, waiting for an exclusive holder to let go.
func RLock(f *os.File) error { return lock(f, false, true) }

// TryLock takes an exclusive lock on f, or returns ErrLocked at once.
func TryLock(f *os.File) error { return lock(f, true, false) }

// TryRLock takes a shared lock on f, or returns ErrLocked at once.
func TryRLock(f *os.File) error { return lock(f, false, false) }

// Unlock gives back the lock held on f.
func Unlock(f *os.File) error { return unlock(f) }

// OpenFile is os.OpenFile for a file that another process may rename or
// remove while this one has it open (on Windows, os.OpenFile's files
// cannot be). flag is O_RDONLY, O_WRONLY or O_RDWR with O_CREATE, O_EXCL
// and O_TRUNC.
func OpenFile(name string, flag int, perm os.FileMode) (*os.File, error) {
	return openFile(name, flag, perm)
}
