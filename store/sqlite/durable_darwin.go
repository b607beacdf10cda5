package sqlite

import "golang.org/x/sys/unix"

// Datasync makes what was written to the file fd durable. On macOS, fsync
// only hands the data to the drive, whose cache may lose it in a power
// cut; F_FULLFSYNC asks the drive to write it through. A file system that
// does not support it (SMB, some FUSE ones) gets fsync, as Go's File.Sync
// does.
func Datasync(fd uintptr) error {
	for {
		_, err := unix.FcntlInt(fd, unix.F_FULLFSYNC, 0)
		switch err {
		case unix.EINTR:
			continue
		case unix.ENOTSUP:
			return unix.Fsync(int(fd))
		}
		return err
	}
}
