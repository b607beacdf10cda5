package filelock

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Two opens of one file are two holders: shared locks go together, an
// exclusive one waits for both; a locked file can still be read and
// written through other opens, and removed while open.
func TestLocks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.lock")
	open := func() *os.File {
		t.Helper()
		f, err := OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	a, b := open(), open()
	if err := TryLock(a); err != nil {
		t.Fatal(err)
	}
	if err := TryRLock(b); !errors.Is(err, ErrLocked) {
		t.Fatalf("a shared lock beside an exclusive one: %v, want ErrLocked", err)
	}
	// The lock covers no byte of the file's content.
	if _, err := b.WriteAt([]byte("hello"), 0); err != nil {
		t.Fatalf("writing a locked file through another open: %v", err)
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != "hello" {
		t.Fatalf("reading a locked file: %q, %v", got, err)
	}
	if err := Unlock(a); err != nil {
		t.Fatal(err)
	}
	if err := TryRLock(a); err != nil {
		t.Fatal(err)
	}
	if err := TryRLock(b); err != nil {
		t.Fatalf("two shared locks: %v", err)
	}
	c := open()
	if err := TryLock(c); !errors.Is(err, ErrLocked) {
		t.Fatalf("an exclusive lock beside shared ones: %v, want ErrLocked", err)
	}
	if err := Unlock(b); err != nil {
		t.Fatal(err)
	}
	// Closing lets go of the lock.
	a.Close()
	if err := Lock(c); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatalf("removing a file open and locked: %v", err)
	}
}

// O_EXCL refuses a file that exists; a file that does not exist is
// os.ErrNotExist.
func TestOpenFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	f, err := OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); !errors.Is(err, os.ErrExist) {
		t.Fatalf("O_EXCL on a file that exists: %v", err)
	}
	if _, err := OpenFile(filepath.Join(dir, "none"), os.O_RDONLY, 0); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a file that does not exist: %v", err)
	}
}
