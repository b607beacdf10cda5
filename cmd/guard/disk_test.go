package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/guard-mcp/guard/internal/tmpfs"
)

// smallDisk mounts a 4 MiB tmpfs (a disk that fills) on DIR/data, DIR
// being a new directory, and returns both; it skips the test where no
// tmpfs can be mounted.
func smallDisk(t *testing.T) (dir, data string) {
	t.Helper()
	dir = t.TempDir()
	data = filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	tmpfs.Mount(t, data, "4m")
	return dir, data
}

// fillDisk writes a file in dir until the disk is full, to its last byte,
// and returns its path.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := bytes.Repeat([]byte{1}, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			break
		}
	}
	for {
		if _, err := f.Write(chunk[:1]); err != nil {
			break
		}
	}
	return path
}
