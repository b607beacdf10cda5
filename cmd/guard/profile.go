package main

import (
	"context"
	"os"
	"os/signal"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strings"
)

// cpuProfileEnv names the file a `guard run` or `guard serve` process
// writes its CPU profile to (guard-bench --profile sets it).
const cpuProfileEnv = "GUARD_CPUPROFILE"

// heapProfileEnv names the file a `guard run` or `guard serve` process
// writes a heap profile to (`go tool pprof`) each time it is sent SIGUSR1
// (Unix), logging the Go runtime's memory figures as it does: a look at a
// running process's memory at a moment chosen from outside (guard-bench
// reads the figures once a session has been idle). The runtime samples
// one allocation in 512 KiB; GODEBUG=memprofilerate=1 records them all,
// from the first package's initialization on.
const heapProfileEnv = "GUARD_HEAPPROFILE"

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

// profileHeapOnSignal writes a heap profile to path each time the process
// is sent heapProfileSignals, until the function it returns is called.
// Before each it logs the Go runtime's memory, by class as
// runtime/metrics names them (/memory/classes/...), and the goroutines:
// the state of the moment, before the collection that makes the profile
// current.
func (a *app) profileHeapOnSignal(path string) (stop func()) {
	if len(heapProfileSignals) == 0 {
		a.logger.Warn("no heap profile on this system: it is asked for by a signal", "env", heapProfileEnv)
		return func() {}
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, heapProfileSignals...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-sigs:
				a.writeHeapProfile(path)
			}
		}
	}()
	return func() {
		signal.Stop(sigs)
		cancel()
		<-done
	}
}

// writeHeapProfile logs the Go runtime's memory and writes a heap profile
// to path.
func (a *app) writeHeapProfile(path string) {
	attrs := []any{"path", path}
	for _, c := range goMemory() {
		attrs = append(attrs, c.name, c.bytes)
	}
	// The profile is as of the last collection: one now makes it this
	// moment's.
	runtime.GC()
	f, err := os.Create(path)
	if err == nil {
		err = pprof.Lookup("heap").WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		a.logger.Warn("heap profile not written", append(attrs, "err", err)...)
		return
	}
	a.logger.Info("heap profile", attrs...)
}

// memClass is one figure of the Go runtime's memory.
type memClass struct {
	name  string
	bytes int64
}

// goMemory reads the Go runtime's memory: the classes of
// /memory/classes/ (the metadata's and the profiling's folded into
// metadata and other) and the goroutines.
func goMemory() []memClass {
	descs := metrics.All()
	samples := make([]metrics.Sample, 0, len(descs))
	for _, d := range descs {
		if strings.HasPrefix(d.Name, "/memory/classes/") || d.Name == "/sched/goroutines:goroutines" {
			samples = append(samples, metrics.Sample{Name: d.Name})
		}
	}
	metrics.Read(samples)
	var out []memClass
	add := func(name string, v int64) {
		for i := range out {
			if out[i].name == name {
				out[i].bytes += v
				return
			}
		}
		out = append(out, memClass{name, v})
	}
	for _, s := range samples {
		if s.Value.Kind() != metrics.KindUint64 {
			continue
		}
		name := strings.TrimPrefix(s.Name, "/memory/classes/")
		name = name[:strings.IndexByte(name, ':')]
		switch {
		case s.Name == "/sched/goroutines:goroutines":
			name = "goroutines"
		case strings.HasPrefix(name, "metadata/"):
			name = "metadata"
		case strings.HasPrefix(name, "profiling/"):
			name = "other"
		}
		add(name, int64(s.Value.Uint64()))
	}
	return out
}
