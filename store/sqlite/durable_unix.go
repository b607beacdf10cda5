//go:build unix

package sqlite

import "os"

// SyncDir makes a directory's entries durable: a file created, renamed or
// removed in it.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
