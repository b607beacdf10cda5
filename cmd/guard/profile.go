package main

import (
	"os"
	"runtime/pprof"
)

// cpuProfileEnv names the file a `guard run` or `guard serve` process
// writes its CPU profile to (guard-bench --profile sets it).
const cpuProfileEnv = "GUARD_CPUPROFILE"

// profileCPU starts a CPU profile written to path and returns the function
// that stops it and flushes it to the file. A profile that cannot be made
// is logged and guard goes on without it.
func (a *app) profileCPU(path string) (stop func()) {
	f, err := os.Create(path)
	if err != nil {
		a.logger.Warn("no CPU profile", "err", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		a.logger.Warn("no CPU profile", "path", path, "err", err)
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			a.logger.Warn("CPU profile not written", "path", path, "err", err)
		}
	}
}
