// Package footprint gives back to the operating system, once a process has
// started and gone quiet, the memory its start-up made resident and its
// running does not use: the Go heap's free pages, and the pages of its
// executable that only start-up touched.
//
// A guard process spends most of its life idle, one per server a client
// configures, and its resident memory is what people and monitors read.
// Start-up touches pages all over the executable: the initialization of
// some 280 packages, whose code and data are spread over the whole file,
// then the configuration, the database's migrations and the rest, and the
// kernel maps the pages around each page touched (Linux's fault-around,
// 64 KiB), so that most of a 40 MB executable is resident once guard has
// started, three times what it touches again while it runs. Those pages
// are clean copies of the file, shared in the page cache with every other
// guard process: dropping a process's mappings of them frees nothing at
// once, but its resident set is then its working set, and the kernel,
// which protects the mapped pages of executables, can reclaim the others
// first. The heap's free pages, on the other hand, are the process's own:
// start-up's garbage (schemas compiled, migrations read) leaves the heap
// with pages that the runtime's background scavenger keeps, below the
// heap's goal.
package footprint

import (
	"context"
	"log/slog"
	"runtime/debug"
	"time"
)

// Trim gives back what start-up left resident: it collects the heap's
// garbage and returns its free pages to the operating system
// (debug.FreeOSMemory), then, on Linux, drops the process's mappings of
// the pages of its executable's read-only segments (code, read-only data,
// the runtime's tables), which the kernel maps again from its page cache,
// one minor fault at a time, as they are used. It returns the bytes of the
// executable that were resident and no longer are mapped.
func Trim() (int64, error) {
	debug.FreeOSMemory()
	return dropExecutable()
}

// WhenQuiet trims (Trim) once, the first time that the count activity
// returns has not moved for every (a quiet moment: no one waits on the
// process, and start-up is over), and logs what it gave back. It returns
// then, or when ctx ends.
func WhenQuiet(ctx context.Context, every time.Duration, activity func() int64, logger *slog.Logger) {
	whenQuiet(ctx, every, activity, func() {
		t0 := time.Now()
		n, err := Trim()
		if err != nil {
			logger.Debug("memory after start-up not given back", "err", err)
			return
		}
		logger.Debug("memory after start-up given back", "executable_bytes", n, "took", time.Since(t0))
	})
}

// whenQuiet calls do once, the first time that activity has not moved for
// every, unless ctx ends first.
func whenQuiet(ctx context.Context, every time.Duration, activity func() int64, do func()) {
	t := time.NewTicker(every)
	defer t.Stop()
	last := activity()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n := activity()
		if n == last {
			do()
			return
		}
		last = n
	}
}
