package store

import "golang.org/x/sys/windows"

// datasync makes what was written to the file fd durable: on Windows,
// FlushFileBuffers (what File.Sync does).
func datasync(fd uintptr) error { return windows.FlushFileBuffers(windows.Handle(fd)) }

// syncDir does nothing on Windows: a directory cannot be opened for
// flushing there, and NTFS journals its entries itself.
func syncDir(string) error { return nil }
