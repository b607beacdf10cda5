//go:build unix

package store

import "os"

// syncDir makes a directory's entries durable: a file created, renamed or
// removed in it.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
