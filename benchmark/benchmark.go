// Package benchmark measures what guard costs a session: a go-sdk client
// calls a trivial tool on a go-sdk server, directly, through a relay that
// only copies bytes (the floor of any stdio proxy) and through `guard run`,
// with one and with several concurrent callers, and reports latency
// percentiles, calls per second, the latency and CPU guard adds, its
// memory, and the fsync time of the disk that holds the audit log, then
// compares the figures with guard's targets.
package benchmark

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/guard-mcp/guard/store/sqlite"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Config says what to measure.
type Config struct {
	// Guard is the guard binary; the example server is `Guard example-server`.
	Guard string
	// CopyRelay is the command that runs CopyRelay, before "-- CMD":
	// guard-bench's own (Self CopyRelayCommand).
	CopyRelay []string
	// Dir holds the databases of the runs through guard.
	Dir string
	// Calls is the number of calls per measurement (after a warm-up).
	Calls int
	// Concurrency lists the numbers of concurrent callers to measure.
	Concurrency []int
	// Durability lists the audit durability modes to measure through guard.
	Durability []string
	// BigResult is the size of the result used for the memory measurement
	// (0 skips it, and in Run the whole memory measurement).
	BigResult int
	// Idle is how long a session stays idle before its memory is read
	// (default 10 s, as in guard's target).
	Idle time.Duration
	// Rounds splits each measurement into interleaved rounds (default 1).
	Rounds int
	// Profile, when not "", is a directory where each guard process the
	// benchmark starts writes a CPU profile (see ProfileEnv).
	Profile string
	// Stream, when not "", is one receiver of the audit stream, in the
	// configuration's form ({syslog: "tcp://HOST:PORT"} or {otlp:
	// "http://HOST:PORT"}): each durability mode is measured again with
	// the audit log streamed to it.
	Stream string
	// Traces measures each durability mode again with tracing on
	// (telemetry: every call sampled), its spans sent to an OTLP/HTTP
	// receiver of the benchmark's own that takes and discards them.
	Traces bool
}

// ProfileEnv is the environment variable that makes `guard run` and
// `guard serve` write a CPU profile of their run to the file it names.
const ProfileEnv = "GUARD_CPUPROFILE"

// The rows every stdio run measures besides guard's.
const (
	rowDirect    = "direct"
	rowCopyRelay = "copy relay"
)

// profileEnv is the environment of a guard process that writes its CPU
// profile to dir as the row, callers and round given (nil without a dir:
// the benchmark's own environment).
func profileEnv(dir, row string, callers, round int) []string {
	if dir == "" {
		return nil
	}
	name := strings.Join(strings.FieldsFunc(row, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9')
	}), "-")
	if callers > 0 {
		name += fmt.Sprintf("-%d-%d", callers, round)
	}
	return append(os.Environ(), ProfileEnv+"="+filepath.Join(dir, name+".pprof"))
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
	// or the server when direct) used per call, read after the calls and
	// a pause (quiet).
	CPU time.Duration
	// TreeCPU is CPU with that of the process's descendants (the servers
	// guard runs, and their sandbox's init) added. In a stdio run it is
	// read once the session has ended: it holds what the calls left to do
	// (their records moved into the database, a last checkpoint) and the
	// processes' exit.
	TreeCPU time.Duration

	// The comparisons are medians over rounds of a figure against the
	// other row's in the same round, so that the machine's drift between
	// rounds cancels out; 0 where not measured.

	// AddedP50 is P50 less the direct row's.
	AddedP50 time.Duration
	// OfDirect and OfRelay are calls per second as a share of the direct
	// row's and of the copy relay's.
	OfDirect, OfRelay float64
	// AddedCPU is the CPU per call the proxy adds (stdio): TreeCPU less
	// the direct server's; AddedCPUOfRelay is it as a multiple of the
	// copy relay's.
	AddedCPU        time.Duration
	AddedCPUOfRelay float64
}

// Report is everything one run measured.
type Report struct {
	Results []Result
	// Fsync is the median time of a small append and sync in Dir, as the
	// audit journal makes them (fsyncProbe), before and between rounds.
	Fsync time.Duration
	// IdleRSS and IdleUIRSS are the resident memory of guard run without
	// and with the UI, idle after initialize and tools/list (memory.go).
	IdleRSS, IdleUIRSS int64
	// BigRSS is guard's peak resident memory after relaying a BigResult
	// result; BigBase is its resident memory before.
	BigBase, BigRSS int64
	// Targets are the lines that compare figures with guard's targets.
	Targets []string

	series []series
}

// series is the rounds of one row with one count of callers.
type series struct {
	name    string
	callers int
	rounds  []sample
}

// find returns the rounds of a row, nil when it was not measured.
func (rep *Report) find(name string, callers int) []sample {
	for _, s := range rep.series {
		if s.name == name && s.callers == callers {
			return s.rounds
		}
	}
	return nil
}

// target adds and writes one line of the comparison with the targets.
func (rep *Report) target(w io.Writer, format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	rep.Targets = append(rep.Targets, line)
	fmt.Fprintln(w, line)
}

// Run measures as configured and writes a report to w as it goes.
func Run(ctx context.Context, cfg Config, w io.Writer) (*Report, error) {
	if cfg.Calls <= 0 {
		cfg.Calls = 2000
	}
	rep := &Report{}
	// The disk is measured as guard's journal uses it with durability
	// full, before the runs and again before each run with durability
	// full, so that the figure the target allows is the disk's during
	// the rounds measured, not only at the start.
	syncs, err := fsyncTimes(cfg.Dir, 200)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "fsync (%s, median of 200) in %s: %s\n", fsyncProbe, cfg.Dir, fmtDur(median(syncs)))

	// Each configuration is measured in several rounds, interleaved with
	// the others, so that the machine's drift (other load, CPU frequency,
	// the disk's cache) falls on all of them alike.
	type config struct {
		name  string
		argv  []string
		guard bool
	}
	server := []string{cfg.Guard, "example-server"}
	configs := []config{
		{name: rowDirect, argv: server},
		{name: rowCopyRelay, argv: append(append(slices.Clone(cfg.CopyRelay), "--"), server...)},
	}
	var sink *traceSink
	if cfg.Traces {
		if sink, err = startTraceSink(); err != nil {
			return nil, err
		}
		defer sink.close()
	}
	for _, d := range cfg.Durability {
		// Each mode's row, and its variants: the same with the audit
		// log streamed, with tracing on.
		base := "durability: " + d + "\npolicy:\n  default: allow\n"
		rows := []struct{ name, file, conf string }{{"guard durability=" + d, "bench-" + d, base}}
		if cfg.Stream != "" {
			rows = append(rows, struct{ name, file, conf string }{"guard " + d + " +stream", "bench-" + d + "-stream",
				base + "audit:\n  stream:\n    - " + cfg.Stream + "\n"})
		}
		if sink != nil {
			rows = append(rows, struct{ name, file, conf string }{"guard " + d + " +traces", "bench-" + d + "-traces",
				base + "telemetry: {otlp: \"" + sink.url + "\", sample: 1.0}\n"})
		}
		for _, r := range rows {
			cfgPath := filepath.Join(cfg.Dir, r.file+".yaml")
			if err := os.WriteFile(cfgPath, []byte(r.conf), 0o600); err != nil {
				return nil, fmt.Errorf("benchmark config: %w", err)
			}
			db := filepath.Join(cfg.Dir, r.file+".db")
			if err := removeDB(db); err != nil {
				return nil, err
			}
			configs = append(configs, config{name: r.name, guard: true,
				argv: append([]string{cfg.Guard, "run", "--config", cfgPath, "--db", db, "--name", "bench", "--no-ui", "--"}, server...)})
		}
	}
	names := make([]string, len(configs))
	for i, c := range configs {
		names[i] = c.name
	}
	err = rep.rounds(w, names, cfg.Concurrency, cfg.Rounds, cfg.Calls, func(i, n, round, calls int) (sample, error) {
		c := configs[i]
		var env []string
		if c.guard {
			env = profileEnv(cfg.Profile, c.name, n, round)
		}
		if strings.HasSuffix(c.name, "=full") {
			more, err := fsyncTimes(cfg.Dir, 50)
			if err != nil {
				return sample{}, err
			}
			syncs = append(syncs, more...)
		}
		return measure(ctx, c.name, c.argv, env, n, calls)
	})
	if err != nil {
		return nil, err
	}
	rep.Fsync = median(syncs)
	if len(syncs) > 200 {
		fmt.Fprintf(w, "fsync (%s, median of %d, before and between the rounds): %s\n", fsyncProbe, len(syncs), fmtDur(rep.Fsync))
	}
	rep.stdioTargets(w)
	if sink != nil {
		rep.tracingCost(w, cfg.Durability, sink)
	}
	if cfg.BigResult > 0 {
		if err := memory(ctx, cfg, rep, w); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// Guard's targets for stdio sessions.
const (
	// A lone caller through guard (durability normal) makes at least
	// this share of the copy relay's calls per second...
	targetNormalOfRelay = 0.90
	// ...and guard adds at most this multiple of the CPU per call the
	// copy relay adds.
	targetNormalCPUOfRelay = 2.0
	// With durability full, a lone call pays two fsyncs of the audit
	// journal (its call and its result) and at most this much more.
	targetFullP50Extra = 150 * time.Microsecond
	// Eight callers through guard (durability full) make at least this
	// share of the direct session's calls per second.
	targetFull8OfDirect = 0.75
)

// stdioTargets compares the figures measured with guard's targets.
func (rep *Report) stdioTargets(w io.Writer) {
	const normal, full = "guard durability=normal", "guard durability=full"
	if rep.find(normal, 1) != nil && rep.find(rowCopyRelay, 1) != nil {
		r := rep.result(normal, 1)
		rep.target(w, "stdio normal, 1 caller: calls/s %.2f of copy relay (target ≥ %.2f): %s; added cpu %s copy relay's (target ≤ %.0fx): %s",
			r.OfRelay, targetNormalOfRelay, met(r.OfRelay >= targetNormalOfRelay),
			fmtTimes(r.AddedCPUOfRelay), targetNormalCPUOfRelay, met(r.AddedCPUOfRelay > 0 && r.AddedCPUOfRelay <= targetNormalCPUOfRelay))
	}
	if rep.find(full, 1) != nil {
		r := rep.result(full, 1)
		limit := 2*rep.Fsync + targetFullP50Extra
		rep.target(w, "stdio full, 1 caller: added p50 %s (target ≤ two fsyncs + %s = %s): %s",
			fmtDur(r.AddedP50), fmtDur(targetFullP50Extra), fmtDur(limit), met(r.AddedP50 <= limit))
	}
	if rep.find(full, 8) != nil {
		r := rep.result(full, 8)
		rep.target(w, "stdio full, 8 callers: calls/s %.2f of direct (target ≥ %.2f): %s", r.OfDirect, targetFull8OfDirect, met(r.OfDirect >= targetFull8OfDirect))
	}
}

// met says whether a figure meets its target, as the target lines end.
func met(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT MET"
}

// result returns the result of a row measured with n callers.
func (rep *Report) result(name string, n int) Result {
	for _, r := range rep.Results {
		if r.Name == name && r.Callers == n {
			return r
		}
	}
	return Result{}
}

func (rep *Report) add(w io.Writer, r Result, base bool) {
	rep.Results = append(rep.Results, r)
	fmt.Fprintf(w, "%-24s callers=%-2d calls=%-5d p50=%-8s p99=%-8s max=%-8s calls/s=%-5.0f cpu/call=%-6s with children=%-6s",
		r.Name, r.Callers, r.Calls, fmtDur(r.P50), fmtDur(r.P99), fmtDur(r.Max), r.PerSec, fmtDur(r.CPU), fmtDur(r.TreeCPU))
	if !base {
		fmt.Fprintf(w, " added p50=%-9s calls/s %.2f of direct", fmtDur(r.AddedP50), r.OfDirect)
		if r.OfRelay != 0 {
			fmt.Fprintf(w, ", %.2f of copy relay", r.OfRelay)
		}
		if r.AddedCPU != 0 {
			fmt.Fprintf(w, " added cpu/call=%s", fmtDur(r.AddedCPU))
		}
		if r.Name != rowCopyRelay && r.OfRelay != 0 {
			fmt.Fprintf(w, " added cpu %s copy relay", fmtTimes(r.AddedCPUOfRelay))
		}
	}
	fmt.Fprintln(w)
}

// fmtTimes writes a multiple ("n/a" for none: no round in which the copy
// relay added CPU).
func fmtTimes(x float64) string {
	if x == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1fx", x)
}

// connect starts argv with env (nil: the benchmark's own) and connects a
// client to it.
func connect(ctx context.Context, argv, env []string) (*mcp.ClientSession, *exec.Cmd, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
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

func (s sample) perSec() float64 { return float64(len(s.lat)) / s.elapsed.Seconds() }

func (s sample) p50() time.Duration {
	lat := slices.Clone(s.lat)
	slices.Sort(lat)
	return lat[len(lat)/2]
}

func (s sample) cpuPerCall() time.Duration  { return s.cpu / time.Duration(len(s.lat)) }
func (s sample) treePerCall() time.Duration { return s.tree / time.Duration(len(s.lat)) }

// rounds measures every target (the first is the direct session the
// others are compared with) for each count of concurrent callers, in
// interleaved rounds of calls/rounds calls, and reports them. measure
// gets the target's index, the count of callers, the round (from 1) and
// the calls to make.
func (rep *Report) rounds(w io.Writer, names []string, concurrency []int, rounds, calls int,
	measure func(target, callers, round, calls int) (sample, error)) error {
	rounds = max(rounds, 1)
	relay := slices.Index(names, rowCopyRelay)
	for _, n := range concurrency {
		samples := make([][]sample, len(names))
		for r := range rounds {
			for i := range names {
				sm, err := measure(i, n, r+1, calls/rounds)
				if err != nil {
					return err
				}
				samples[i] = append(samples[i], sm)
			}
		}
		for i, name := range names {
			rep.series = append(rep.series, series{name, n, samples[i]})
			res := summarize(name, n, samples[i])
			if i > 0 {
				var rel []sample
				if relay >= 0 && i != relay {
					rel = samples[relay]
				}
				compare(&res, samples[i], samples[0], rel, relay >= 0)
			}
			rep.add(w, res, i == 0)
		}
	}
	return nil
}

// compare sets the comparisons of r, whose rounds are own, with the
// direct row's rounds and, in a stdio run, the copy relay's (relay; nil
// for the copy relay itself). stdio says whether the rows are stdio
// sessions, whose trees hold the server and nothing else.
func compare(r *Result, own, direct, relay []sample, stdio bool) {
	r.AddedP50 = perRound(own, direct, func(a, b sample) (time.Duration, bool) { return a.p50() - b.p50(), true })
	r.OfDirect = perRound(own, direct, func(a, b sample) (float64, bool) { return a.perSec() / b.perSec(), true })
	if !stdio {
		return
	}
	r.AddedCPU = perRound(own, direct, func(a, b sample) (time.Duration, bool) { return a.treePerCall() - b.treePerCall(), true })
	if relay == nil {
		return
	}
	r.OfRelay = perRound(own, relay, func(a, b sample) (float64, bool) { return a.perSec() / b.perSec(), true })
	// Each round's added CPU against the copy relay's of the same round:
	// a round where the relay added none (noise) has no ratio.
	var ratios []float64
	for i := range min(len(own), len(relay), len(direct)) {
		base := direct[i].treePerCall()
		if floor := relay[i].treePerCall() - base; floor > 0 {
			ratios = append(ratios, float64(own[i].treePerCall()-base)/float64(floor))
		}
	}
	if len(ratios) > 0 {
		r.AddedCPUOfRelay = median(ratios)
	}
}

// perRound is the median over rounds of f of a row's round and another
// row's same round, leaving out the rounds f has no figure for.
func perRound[T time.Duration | float64](a, b []sample, f func(a, b sample) (T, bool)) T {
	var xs []T
	for i := range min(len(a), len(b)) {
		if x, ok := f(a[i], b[i]); ok {
			xs = append(xs, x)
		}
	}
	if len(xs) == 0 {
		return 0
	}
	return median(xs)
}

// median is the middle value of xs, or the mean of the two middle ones.
func median[T time.Duration | float64](xs []T) T {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
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

// quiet is how long a measurement lets the processes measured finish what
// earlier calls left them to do (moving audit records into the database,
// say) before it reads their CPU time, so that each reading is taken at a
// like point.
const quiet = 100 * time.Millisecond

// measure makes calls echo calls with n concurrent callers on one session
// with the server argv, started with env.
func measure(ctx context.Context, name string, argv, env []string, n, calls int) (sample, error) {
	cs, cmd, err := connect(ctx, argv, env)
	if err != nil {
		return sample{}, err
	}
	open := true
	defer func() {
		if open {
			cs.Close()
		}
	}()
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
	pid := cmd.Process.Pid
	time.Sleep(quiet)
	cpu0, tree0 := procCPU(pid), treeCPU(pid)
	lat, elapsed, err := drive(n, calls, func(int) (time.Duration, error) { return call() })
	if err != nil {
		return sample{}, fmt.Errorf("%s: %w", name, err)
	}
	time.Sleep(quiet)
	sm := sample{lat: lat, elapsed: elapsed, cpu: procCPU(pid) - cpu0}
	// The tree's time is read once the session has ended, from the
	// process's resource usage, which holds that of the children it
	// waited for (the server, or a sandbox's init, which holds the
	// server's): what is done after the last answers (their records
	// moved into the database, a last checkpoint) counts with the calls,
	// and so does a process of the tree that ended.
	open = false
	if err := cs.Close(); err != nil {
		return sample{}, fmt.Errorf("%s: ending the session: %w", name, err)
	}
	st := cmd.ProcessState
	sm.tree = st.UserTime() + st.SystemTime() - tree0
	return sm, nil
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

// procCPU is the CPU time a process has used so far: the sum of its
// threads' run times, to the nanosecond (/proc/PID/task/TID/schedstat),
// or, where those cannot be read, its user and system time in clock
// ticks (/proc/PID/stat).
func procCPU(pid int) time.Duration {
	if d, ok := schedCPU(pid); ok {
		return d
	}
	st, _ := procStat(pid)
	return st.cpu
}

// schedCPU is the sum of the run times of a process's live threads.
func schedCPU(pid int) (time.Duration, bool) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, false
	}
	var total time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue // a thread that ended meanwhile
		}
		if err != nil {
			return 0, false
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return 0, false
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, false
		}
		total += time.Duration(ns)
	}
	return total, true
}

// stat is what procStat reads of a process.
type stat struct {
	// cpu is the process's user and system time; children that of the
	// children it waited for (and theirs).
	cpu, children time.Duration
	ppid          int
}

// procStat reads a process's /proc/PID/stat; ok is false when it cannot.
func procStat(pid int) (st stat, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return stat{}, false
	}
	// The command name may hold spaces: count fields after its ")".
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 15 {
		return stat{}, false
	}
	ticks := func(i int) time.Duration {
		n, _ := strconv.ParseInt(f[i], 10, 64)
		return time.Duration(n) * time.Second / 100 // USER_HZ is 100 on Linux
	}
	st.ppid, _ = strconv.Atoi(f[1])
	st.cpu, st.children = ticks(11)+ticks(12), ticks(13)+ticks(14)
	return st, true
}

// treeCPU is the CPU time a process and its descendants (the servers guard
// runs, and their sandbox's init) have used so far: the live ones' own
// (procCPU) and that of the children they waited for, in clock ticks.
func treeCPU(pid int) time.Duration {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	procs := map[int]stat{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := procStat(p); ok {
			procs[p] = st
		}
	}
	var total time.Duration
	for p, st := range procs {
		// Up the parents to pid (in the tree) or to one that is not
		// (init, or a process gone meanwhile).
		for q := p; q > 1; q = procs[q].ppid {
			if q == pid {
				total += procCPU(p) + st.children
				break
			}
			if _, ok := procs[q]; !ok {
				break
			}
		}
	}
	return total
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

// removeDB removes what an earlier run left of the database at path (its
// files, journals and locks, all named after it): every run starts from an
// empty log, as SQLite's costs grow with the log (a --dir used for many
// runs held 700 MB, and made each run slower than the one before).
func removeDB(path string) error {
	old, err := filepath.Glob(path + "*")
	if err != nil {
		return fmt.Errorf("benchmark database: %w", err)
	}
	for _, p := range old {
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("benchmark database: %w", err)
		}
	}
	return nil
}

// fsyncProbe says what fsyncTimes measures.
const fsyncProbe = "1 KiB append + fdatasync in a file filled beforehand, as guard's journal syncs"

// fsyncTimes times n syncs of the disk that holds dir, as the audit
// journal makes them with durability full (sqlite.Datasync after a frame
// written in a segment filled beforehand).
func fsyncTimes(dir string, n int) ([]time.Duration, error) {
	f, err := os.CreateTemp(dir, "fsync-*")
	if err != nil {
		return nil, fmt.Errorf("fsync probe: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	// As a journal segment is made: filled with zeros and synced, so that
	// a sync after an append has only data to write.
	frame := make([]byte, 1024)
	if _, err := f.Write(make([]byte, (n+1)*len(frame))); err != nil {
		return nil, fmt.Errorf("fsync probe: %w", err)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("fsync probe: %w", err)
	}
	for i := range frame {
		frame[i] = byte(i)
	}
	ts := make([]time.Duration, n)
	for i := range ts {
		t0 := time.Now()
		if _, err := f.WriteAt(frame, int64(i*len(frame))); err != nil {
			return nil, fmt.Errorf("fsync probe: %w", err)
		}
		if err := sqlite.Datasync(f.Fd()); err != nil {
			return nil, fmt.Errorf("fsync probe: %w", err)
		}
		ts[i] = time.Since(t0)
	}
	return ts, nil
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
