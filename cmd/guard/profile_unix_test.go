//go:build unix

package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// With a heap profile file, guard run writes a heap profile there each
// time it is sent SIGUSR1, and logs the Go runtime's memory as it does.
func TestRunWritesAHeapProfileWhenAsked(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "heap.pprof")
	env := map[string]string{"HOME": dir, "XDG_CONFIG_HOME": filepath.Join(dir, "config"), "XDG_DATA_HOME": filepath.Join(dir, "data")}
	stdin, feed := io.Pipe()
	var out, errb lockedBuffer
	a := newApp(stdin, &out, &errb, func(k string) string { return env[k] })
	a.heapProfile = prof
	done := make(chan int, 1)
	go func() { done <- a.main(context.Background(), []string{"run", "--no-ui", "--", "cat"}) }()
	// Until guard listens for the signal, it ignores it (no one asked
	// for SIGUSR1).
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(errb.String(), `msg="heap profile"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no heap profile logged: %s", errb.String())
		}
		if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	feed.Close()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	b, err := os.ReadFile(prof)
	if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b { // a gzipped profile
		t.Fatalf("profile: %d bytes, %v", len(b), err)
	}
	for _, want := range []string{"heap/objects=", "heap/released=", "heap/stacks=", "metadata=", "total=", "goroutines="} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("no %s in the log line: %s", want, errb.String())
		}
	}
}
