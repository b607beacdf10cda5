//go:build unix

package app

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// identifyFile returns the identity of the file at path: its device,
// inode and inode change time.
func identifyFile(path string) (fileIdentity, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileIdentity{}, fmt.Errorf("the identity of %s: %w", path, err)
	}
	return identityOf(&st), nil
}

// identifyOpen returns the identity of the open file f.
func identifyOpen(f *os.File) (fileIdentity, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fileIdentity{}, fmt.Errorf("the identity of %s: %w", f.Name(), err)
	}
	return identityOf(&st), nil
}

func identityOf(st *unix.Stat_t) fileIdentity {
	return fileIdentity{dirIdentity{dev: uint64(st.Dev), ino: st.Ino}, st.Ctim.Nano()}
}

// writableDir reports whether this process may create and remove entries
// in the directory dir.
func writableDir(dir string) bool { return unix.Access(dir, unix.W_OK) == nil }
