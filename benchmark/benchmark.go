// Package benchmark measures what guard costs a session: a go-sdk client
// calls a trivial tool on a go-sdk server, directly and through `guard run`,
// with one and with several concurrent callers, and reports latency
// percentiles, calls per second, guard's added latency, its memory, and the
// fsync time of the disk that holds the audit log.
package benchmark

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Config says what to measure.
type Config struct {
	// Guard is the guard binary; the example server is `Guard example-server`.
	Guard string
	// Dir holds the databases of the runs through guard.
	Dir string
	// Calls is the number of calls per measurement (after a warm-up).
	Calls int
	// Concurrency lists the numbers of concurrent callers to measure.
	Concurrency []int
	// Durability lists the audit durability modes to measure through guard.
	Durability []string
	// BigResult is the size of the result used for the memory measurement
	// (0 skips it).
	BigResult int
	// Rounds splits each measurement into interleaved rounds (default 1).
	Rounds int
}

// Result is one measurement.
type Result struct {
	Name    string
	Callers int
	Calls   int
	P50     time.Duration
	P99     time.Duration
	Max     time.Duration
	PerSec  float64
	// CPU is the CPU time the first process of the command line (guard,
	// or the server when direct) used per call.
	CPU time.Duration
	// TreeCPU is CPU with that of the process's children (the servers
	// guard runs) added.
	TreeCPU time.Duration
}

// Report is everything one run measured.
type Report struct {
	Results []Result
	// Fsync is the median time of a small write and fsync in Dir.
	Fsync time.Duration
	// IdleRSS is guard's resident memory after start-up and a few calls.
	IdleRSS int64
	// BigRSS is guard's peak resident memory after relaying a BigResult
	// result; BigBase is its peak before.
	BigBase, BigRSS int64
}

// Run measures as configured and writes a report to w as it goes.
func Run(ctx context.Context, cfg Config, w io.Writer) (*Report, error) {
	if cfg.Calls <= 0 {
		cfg.Calls = 2000
	}
	rep := &Report{}
	f, err := fsyncTime(cfg.Dir, 200)
	if err != nil {
		return nil, err
	}
	rep.Fsync = f
	fmt.Fprintf(w, "fsync (4 KiB write + fsync, median of 200) in %s: %s\n", cfg.Dir, fmtDur(f))

	// Each configuration is measured in several rounds, interleaved with
	// the others, so that the machine's drift (other load, CPU frequency,
	// the disk's cache) falls on all of them alike.
	type config struct {
		name string
		argv []string
	}
	configs := []config{{"direct", []string{cfg.Guard, "example-server"}}}
	for _, d := range cfg.Durability {
		cfgPath := filepath.Join(cfg.Dir, "bench-"+d+".yaml")
		conf := "durability: " + d + "\npolicy:\n  default: allow\n"
		if err := os.WriteFile(cfgPath, []byte(conf), 0o600); err != nil {
			return nil, fmt.Errorf("benchmark config: %w", err)
		}
		db := filepath.Join(cfg.Dir, "bench-"+d+".db")
		configs = append(configs, config{"guard durability=" + d,
			[]string{cfg.Guard, "run", "--config", cfgPath, "--db", db, "--name", "bench", "--no-ui", "--", cfg.Guard, "example-server"}})
	}
	names := make([]string, len(configs))
	for i, c := range configs {
		names[i] = c.name
	}
	err = rep.rounds(w, names, cfg.Concurrency, cfg.Rounds, cfg.Calls, func(i, n, calls int) (sample, error) {
		return measure(ctx, configs[i].name, configs[i].argv, n, calls)
	})
	if err != nil {
		return nil, err
	}
	if cfg.BigResult > 0 {
		if err := bigResult(ctx, cfg, rep, w); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

func (rep *Report) add(w io.Writer, r Result, base *Result) {
	rep.Results = append(rep.Results, r)
	fmt.Fprintf(w, "%-24s callers=%-2d calls=%-5d p50=%-8s p99=%-8s max=%-8s calls/s=%-5.0f cpu/call=%-6s with children=%-6s",
		r.Name, r.Callers, r.Calls, fmtDur(r.P50), fmtDur(r.P99), fmtDur(r.Max), r.PerSec, fmtDur(r.CPU), fmtDur(r.TreeCPU))
	if base != nil {
		fmt.Fprintf(w, " added p50=%-9s calls/s %.0f%% of direct", fmtDur(r.P50-base.P50), 100*r.PerSec/base.PerSec)
	}
	fmt.Fprintln(w)
}

func connect(ctx context.Context, argv []string) (*mcp.ClientSession, *exec.Cmd, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "guard-bench", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to %s: %w", strings.Join(argv, " "), err)
	}
	if _, err := cs.ListTools(ctx, nil); err != nil {
		cs.Close()
		return nil, nil, fmt.Errorf("tools/list: %w", err)
	}
	return cs, cmd, nil
}

// sample is one round of one configuration.
type sample struct {
	lat     []time.Duration
	elapsed time.Duration
	cpu     time.Duration
	tree    time.Duration // cpu and that of the process's children
}

// rounds measures every target (the first is the base the others are
// compared with) for each count of concurrent callers, in interleaved
// rounds of calls/rounds calls, and reports them.
func (rep *Report) rounds(w io.Writer, names []string, concurrency []int, rounds, calls int,
	measure func(target, callers, calls int) (sample, error)) error {
	rounds = max(rounds, 1)
	for _, n := range concurrency {
		samples := make([][]sample, len(names))
		for range rounds {
			for i := range names {
				sm, err := measure(i, n, calls/rounds)
				if err != nil {
					return err
				}
				samples[i] = append(samples[i], sm)
			}
		}
		base := summarize(names[0], n, samples[0])
		rep.add(w, base, nil)
		for i := 1; i < len(names); i++ {
			rep.add(w, summarize(names[i], n, samples[i]), &base)
		}
	}
	return nil
}

// summarize turns the rounds of one configuration into its result.
func summarize(name string, n int, ss []sample) Result {
	var lat []time.Duration
	var elapsed, cpu, tree time.Duration
	for _, s := range ss {
		lat = append(lat, s.lat...)
		elapsed += s.elapsed
		cpu += s.cpu
		tree += s.tree
	}
	slices.Sort(lat)
	calls := len(lat)
	return Result{
		Name: name, Callers: n, Calls: calls,
		P50:     lat[calls/2],
		P99:     lat[calls*99/100],
		Max:     lat[calls-1],
		PerSec:  float64(calls) / elapsed.Seconds(),
		CPU:     cpu / time.Duration(calls),
		TreeCPU: tree / time.Duration(calls),
	}
}

// measure makes calls echo calls with n concurrent callers on one session.
func measure(ctx context.Context, name string, argv []string, n, calls int) (sample, error) {
	cs, cmd, err := connect(ctx, argv)
	if err != nil {
		return sample{}, err
	}
	defer cs.Close()
	call := func() (time.Duration, error) {
		t0 := time.Now()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hello"}})
		if err != nil {
			return 0, err
		}
		if res.IsError {
			return 0, fmt.Errorf("echo failed: %v", res.Content)
		}
		return time.Since(t0), nil
	}
	for range 200 { // warm-up
		if _, err := call(); err != nil {
			return sample{}, fmt.Errorf("%s: %w", name, err)
		}
	}
	cpu0, tree0 := cpuTime(cmd.Process.Pid), treeCPU(cmd.Process.Pid)
	lat, elapsed, err := drive(n, calls, func(int) (time.Duration, error) { return call() })
	if err != nil {
		return sample{}, fmt.Errorf("%s: %w", name, err)
	}
	return sample{lat: lat, elapsed: elapsed, cpu: cpuTime(cmd.Process.Pid) - cpu0, tree: treeCPU(cmd.Process.Pid) - tree0}, nil
}

// drive makes calls calls with n concurrent workers and returns each
// call's latency and the time they all took. call gets its worker's number.
func drive(n, calls int, call func(worker int) (time.Duration, error)) ([]time.Duration, time.Duration, error) {
	lat := make([]time.Duration, calls)
	var next int
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				stop := i >= calls || firstErr != nil
				mu.Unlock()
				if stop {
					return
				}
				d, err := call(w)
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				lat[i] = d
			}
		}()
	}
	wg.Wait()
	return lat, time.Since(start), firstErr
}

// cpuTime is the user and system time a process has used so far.
func cpuTime(pid int) time.Duration {
	cpu, _, _ := procStat(pid)
	return cpu
}

// procStat reads a process's user and system time, its parent and whether
// it could be read.
func procStat(pid int) (cpu time.Duration, ppid int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, false
	}
	// The command name may hold spaces: count fields after its ")".
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100, ppid, true // clock ticks (USER_HZ is 100 on Linux)
}

// treeCPU is the user and system time a process and its live descendants
// (the servers guard runs) have used so far. A child that exits during a
// measurement takes its time with it: the sessions measured live
// throughout.
func treeCPU(pid int) time.Duration {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	type proc struct {
		cpu  time.Duration
		ppid int
	}
	procs := map[int]proc{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cpu, ppid, ok := procStat(p); ok {
			procs[p] = proc{cpu, ppid}
		}
	}
	var total time.Duration
	for p, pr := range procs {
		for q := p; q > 1; q = procs[q].ppid {
			if q == pid {
				total += pr.cpu
				break
			}
			if _, ok := procs[q]; !ok {
				break
			}
		}
	}
	return total
}

// bigResult measures guard's resident memory while idle and its peak
// around relaying one large result.
func bigResult(ctx context.Context, cfg Config, rep *Report, w io.Writer) error {
	cfgPath := filepath.Join(cfg.Dir, "bench-normal.yaml")
	if err := os.WriteFile(cfgPath, []byte("durability: normal\npolicy:\n  default: allow\n"), 0o600); err != nil {
		return err
	}
	db := filepath.Join(cfg.Dir, "bench-memory.db")
	argv := []string{cfg.Guard, "run", "--config", cfgPath, "--db", db, "--name", "bench", "--no-ui", "--", cfg.Guard, "example-server"}
	cs, cmd, err := connect(ctx, argv)
	if err != nil {
		return err
	}
	defer cs.Close()
	for range 50 {
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}}); err != nil {
			return err
		}
	}
	time.Sleep(500 * time.Millisecond)
	pid := cmd.Process.Pid
	rep.IdleRSS, _ = procStatus(pid, "VmRSS")
	rep.BigBase, _ = procStatus(pid, "VmHWM")
	// A small request with a large result: what a file read or a query
	// returns.
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "0123456789abcdef", "times": cfg.BigResult / 16}})
	if err != nil {
		return fmt.Errorf("big result: %w", err)
	}
	if res.IsError {
		return fmt.Errorf("big result: tool error")
	}
	rep.BigRSS, _ = procStatus(pid, "VmHWM")
	fmt.Fprintf(w, "guard resident memory idle: %.1f MiB\n", float64(rep.IdleRSS)/(1<<20))
	fmt.Fprintf(w, "guard peak memory around a %d MiB result: before %.1f MiB, after %.1f MiB, rise %.1f MiB = %.2f× the message\n",
		cfg.BigResult>>20, float64(rep.BigBase)/(1<<20), float64(rep.BigRSS)/(1<<20),
		float64(rep.BigRSS-rep.BigBase)/(1<<20), float64(rep.BigRSS-rep.BigBase)/float64(cfg.BigResult))
	return nil
}

// procStatus reads a "kB" field of /proc/PID/status, in bytes.
func procStatus(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				break
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("%s not in /proc/%d/status", field, pid)
}

// fsyncTime is the median time of a 4 KiB write and fsync in dir.
func fsyncTime(dir string, n int) (time.Duration, error) {
	f, err := os.CreateTemp(dir, "fsync-*")
	if err != nil {
		return 0, fmt.Errorf("fsync probe: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4096)
	ts := make([]time.Duration, n)
	for i := range ts {
		t0 := time.Now()
		if _, err := f.WriteAt(buf, 0); err != nil {
			return 0, fmt.Errorf("fsync probe: %w", err)
		}
		if err := f.Sync(); err != nil {
			return 0, fmt.Errorf("fsync probe: %w", err)
		}
		ts[i] = time.Since(t0)
	}
	slices.Sort(ts)
	return ts[n/2], nil
}

func fmtDur(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + fmtDur(-d)
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
}
