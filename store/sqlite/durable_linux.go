package sqlite

import "golang.org/x/sys/unix"

// Datasync makes what was written to the file fd durable. On Linux,
// fdatasync: the journal's segments are made full size up front, so a
// sync after an append has only data to write, not the file's size.
func Datasync(fd uintptr) error { return unix.Fdatasync(int(fd)) }
