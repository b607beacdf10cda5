package sqlite

import "golang.org/x/sys/windows"

// Datasync makes what was written to the file fd durable: on Windows,
// FlushFileBuffers (what File.Sync does).
func Datasync(fd uintptr) error { return windows.FlushFileBuffers(windows.Handle(fd)) }

// SyncDir does nothing on Windows: a directory cannot be opened for
// flushing there, and NTFS journals its entries itself.
func SyncDir(string) error { return nil }
