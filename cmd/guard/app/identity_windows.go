package app

import (
	"fmt"
	"os"

	"golang.org/x/sys/windows"
)

// identifyFile returns the identity of the file or directory at path: its
// volume, its file index (which on NTFS carries a sequence number, so that
// a reused index is another) and its creation time.
func identifyFile(path string) (fileIdentity, error) {
	f, err := os.Open(path)
	if err != nil {
		return fileIdentity{}, fmt.Errorf("the identity of %s: %w", path, err)
	}
	defer f.Close()
	return identifyOpen(f)
}

// identifyOpen returns the identity of the open file f.
func identifyOpen(f *os.File) (fileIdentity, error) {
	var info windows.ByHandleFileInformation
	if err := windows.GetFileInformationByHandle(windows.Handle(f.Fd()), &info); err != nil {
		return fileIdentity{}, fmt.Errorf("the identity of %s: %w", f.Name(), err)
	}
	return fileIdentity{dirIdentity{dev: uint64(info.VolumeSerialNumber), ino: uint64(info.FileIndexHigh)<<32 | uint64(info.FileIndexLow)},
		info.CreationTime.Nanoseconds()}, nil
}

// writableDir reports whether this process may create and remove entries
// in the directory dir. Windows has no access(2): every directory counts
// as writable, which makes guard warn about a link it could not replace
// rather than keep quiet about one it could.
func writableDir(string) bool { return true }
