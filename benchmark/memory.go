package benchmark

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
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

// Guard's memory targets.
const (
	// A `guard run --no-ui` session, idle for idleFor after the client
	// initialized and listed the tools, holds at most this much resident
	// memory.
	targetIdleRSS = 30 << 20
	// Relaying one large result makes guard's peak resident memory grow
	// by at most this multiple of the result's size.
	targetBigRise = 3.0
)

// idleFor is how long a session stays idle before its memory is read (the
// target's), unless Config.Idle says otherwise.
const idleFor = 10 * time.Second

// Memory is what one reading of a guard process's memory found.
type Memory struct {
	// RSS is its resident memory (VmRSS); Anon and File are the parts of
	// it in anonymous and in file-backed pages (smaps_rollup), and Binary
	// the part of File that is guard's executable.
	RSS, Anon, File, Binary int64
	// Files is the resident memory of the other files it maps, by name.
	Files map[string]int64
	// Go is the Go runtime's account of its memory, by class, as guard
	// logs it for a heap profile (see HeapProfileEnv); nil when it did
	// not.
	Go map[string]int64
	// FirstCall is the latency of the first call after the reading.
	FirstCall time.Duration
}

// HeapProfileEnv is the environment variable that makes `guard run` and
// `guard serve` write a heap profile to the file it names when sent
// SIGUSR1, and log the Go runtime's memory figures as they do.
const HeapProfileEnv = "GUARD_HEAPPROFILE"

// RunMemory measures guard's memory alone, as Run does after the calls
// (with a BigResult of 0, the idle figures alone).
func RunMemory(ctx context.Context, cfg Config, w io.Writer) (*Report, error) {
	rep := &Report{}
	if err := memory(ctx, cfg, rep, w); err != nil {
		return nil, err
	}
	return rep, nil
}

// memory measures guard's memory as its targets are stated: the resident
// memory of `guard run --no-ui` (and then of guard run with the UI) idle
// for a while after the client initialized and listed the tools, and the
// growth of its peak around one BigResult result.
func memory(ctx context.Context, cfg Config, rep *Report, w io.Writer) error {
	idle := cfg.Idle
	if idle <= 0 {
		idle = idleFor
	}
	conf := filepath.Join(cfg.Dir, "bench-memory.yaml")
	if err := os.WriteFile(conf, []byte("durability: normal\npolicy:\n  default: allow\n"), 0o600); err != nil {
		return fmt.Errorf("benchmark config: %w", err)
	}
	for _, ui := range []bool{false, true} {
		// Each in a directory of its own: the UI's login token is made
		// in the database's directory.
		dir, err := os.MkdirTemp(cfg.Dir, "memory-")
		if err != nil {
			return fmt.Errorf("memory: %w", err)
		}
		flag, name := "--no-ui", "--no-ui"
		if ui {
			flag, name = "--ui=127.0.0.1:0", "with the UI"
		}
		argv := []string{cfg.Guard, "run", "--config", conf, "--db", filepath.Join(dir, "guard.db"), "--name", "bench", flag,
			"--", cfg.Guard, "example-server"}
		s, err := startMemory(ctx, argv, dir, profileEnv(cfg.Profile, "guard memory "+name, 0, 0))
		if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			s.close()
			return ctx.Err()
		case <-time.After(idle):
		}
		m, err := s.read(ctx)
		if err != nil {
			s.close()
			return err
		}
		if !ui {
			rep.IdleRSS = m.RSS
			rep.target(w, "idle RSS, --no-ui: %s (target ≤ %s): %s", fmtMiB(m.RSS), fmtMiB(targetIdleRSS), met(m.RSS <= targetIdleRSS))
		} else {
			rep.IdleUIRSS = m.RSS
			rep.target(w, "idle RSS with the UI: %s", fmtMiB(m.RSS))
		}
		fmt.Fprintf(w, "  %s, idle %s after initialize and tools/list: %s\n", name, idle, m.breakdown())
		if !ui && cfg.BigResult > 0 {
			err = s.big(ctx, cfg.BigResult, rep)
		}
		if cerr := s.close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	if cfg.BigResult > 0 {
		rise := rep.BigRSS - rep.BigBase
		x := float64(rise) / float64(cfg.BigResult)
		rep.target(w, "%s result: RSS rise %s = %.2f× (target ≤ %.0f×): %s", fmtMiB(int64(cfg.BigResult)), fmtMiB(rise), x, targetBigRise, met(x <= targetBigRise))
		fmt.Fprintf(w, "  resident before %s, peak after %s\n", fmtMiB(rep.BigBase), fmtMiB(rep.BigRSS))
	}
	return nil
}

// memSession is a guard run session whose memory is read.
type memSession struct {
	cs      *mcp.ClientSession
	cmd     *exec.Cmd
	binary  string
	profile string
	logs    *syncBuffer
}

// startMemory starts argv (guard run) with env (nil: the benchmark's own),
// its heap profile switch set to a file in dir and its logs kept, in JSON,
// at least those of level info, and initializes a session and lists the
// tools.
func startMemory(ctx context.Context, argv []string, dir string, env []string) (*memSession, error) {
	s := &memSession{profile: filepath.Join(dir, "heap.pprof"), logs: &syncBuffer{}}
	cmd := exec.Command(argv[0], argv[1:]...)
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = append(env, HeapProfileEnv+"="+s.profile, "GUARD_LOG_FORMAT=json")
	if os.Getenv("GUARD_LOG_LEVEL") != "debug" {
		cmd.Env = append(cmd.Env, "GUARD_LOG_LEVEL=info")
	}
	cmd.Stderr = io.MultiWriter(os.Stderr, s.logs)
	client := mcp.NewClient(&mcp.Implementation{Name: "guard-bench", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", strings.Join(argv, " "), err)
	}
	s.cs, s.cmd = cs, cmd
	if _, err := cs.ListTools(ctx, nil); err != nil {
		cs.Close()
		return nil, fmt.Errorf("tools/list: %w", err)
	}
	if s.binary, err = filepath.EvalSymlinks(argv[0]); err != nil {
		s.binary = argv[0]
	}
	return s, nil
}

func (s *memSession) close() error {
	if err := s.cs.Close(); err != nil {
		return fmt.Errorf("memory: ending the session: %w", err)
	}
	return nil
}

// read reads the process's memory: first what the kernel says, then the
// Go runtime's account (asking for it makes the process work, and
// allocate), then times a call.
func (s *memSession) read(ctx context.Context) (Memory, error) {
	pid := s.cmd.Process.Pid
	var m Memory
	var err error
	if m.RSS, err = procStatus(pid, "VmRSS"); err != nil {
		return m, err
	}
	if m.Anon, m.File, err = rollup(pid); err != nil {
		return m, err
	}
	if m.Binary, m.Files, err = mappedFiles(pid, s.binary); err != nil {
		return m, err
	}
	m.Go = s.goMemory(ctx)
	t0 := time.Now()
	if _, err := s.cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hello"}}); err != nil {
		return m, fmt.Errorf("the first call after idle: %w", err)
	}
	m.FirstCall = time.Since(t0)
	return m, nil
}

// goMemory asks the process for a heap profile (SIGUSR1) and returns the
// figures it logs as it writes it, nil when it logs none within a few
// seconds (a guard without the switch).
func (s *memSession) goMemory(ctx context.Context) map[string]int64 {
	if err := signalHeapProfile(s.cmd.Process); err != nil {
		return nil
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if m := heapProfileLog(s.logs.String()); m != nil {
			return m
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// big relays one result of size bytes and records the resident memory
// before it and the peak after it.
func (s *memSession) big(ctx context.Context, size int, rep *Report) error {
	pid := s.cmd.Process.Pid
	// The peak so far (start-up's, the heap profile's) is reset, where
	// the kernel allows it, so that the peak after is this result's.
	reset := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0) == nil
	base, err := procStatus(pid, "VmRSS")
	if err != nil {
		return err
	}
	if !reset {
		if base, err = procStatus(pid, "VmHWM"); err != nil {
			return err
		}
	}
	// A small request with a large result: what a file read or a query
	// returns.
	res, err := s.cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "0123456789abcdef", "times": size / 16}})
	if err != nil {
		return fmt.Errorf("big result: %w", err)
	}
	if res.IsError {
		return errors.New("big result: tool error")
	}
	peak, err := procStatus(pid, "VmHWM")
	if err != nil {
		return err
	}
	rep.BigBase, rep.BigRSS = base, peak
	return nil
}

// rollup reads the anonymous and the file-backed resident memory of a
// process from /proc/PID/smaps_rollup.
func rollup(pid int) (anon, file int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("memory: %w", err)
	}
	f := kbFields(b)
	return f["Anonymous"], f["Rss"] - f["Anonymous"], nil
}

// kbFields reads the "Name: N kB" lines of a /proc file, in bytes.
func kbFields(b []byte) map[string]int64 {
	out := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		name, v, ok := strings.Cut(line, ":")
		f := strings.Fields(v)
		if !ok || len(f) != 2 || f[1] != "kB" {
			continue
		}
		if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
			out[name] += kb << 10
		}
	}
	return out
}

// mappedFiles reads /proc/PID/smaps: the resident memory of the file
// binary maps, and that of every other file mapped, by base name, less
// their pages copied on write (anonymous).
func mappedFiles(pid int, binary string) (int64, map[string]int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return 0, nil, fmt.Errorf("memory: %w", err)
	}
	defer f.Close()
	var bin int64
	files := map[string]int64{}
	var cur string // the current mapping's file, "" when anonymous
	add := func(n int64) {
		switch {
		case cur == "":
		case cur == binary:
			bin += n
		default:
			files[filepath.Base(cur)] += n
		}
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		name, v, _ := strings.Cut(line, ":")
		if name == "Rss" || name == "Anonymous" {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if name == "Anonymous" {
				kb = -kb
			}
			add(kb << 10)
			continue
		}
		// A mapping's first line: address perms offset dev inode [path].
		if f := strings.Fields(line); len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			cur = ""
			if len(f) >= 6 && strings.HasPrefix(f[5], "/") {
				cur = strings.Join(f[5:], " ")
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, nil, fmt.Errorf("memory: %w", err)
	}
	return bin, files, nil
}

// breakdown explains m in one line.
func (m Memory) breakdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "RSS %s = anonymous %s + file-backed %s (guard's binary %s", fmtMiB(m.RSS), fmtMiB(m.Anon), fmtMiB(m.File), fmtMiB(m.Binary))
	names := make([]string, 0, len(m.Files))
	for n, v := range m.Files {
		if v > 0 {
			names = append(names, n)
		}
	}
	slices.SortFunc(names, func(a, b string) int { return int(m.Files[b] - m.Files[a]) })
	for _, n := range names {
		fmt.Fprintf(&b, ", %s %s", n, fmtKiB(m.Files[n]))
	}
	b.WriteString(")")
	if m.Go != nil {
		// What the runtime has mapped and not released is an upper
		// bound of its share of the anonymous memory: some of it was
		// never touched.
		g := m.Go
		fmt.Fprintf(&b, "; Go runtime: heap objects %s, heap unused %s, heap free %s, stacks %s, metadata %s, other %s (mapped and not released %s), %d goroutines",
			fmtMiB(g["heap/objects"]), fmtMiB(g["heap/unused"]), fmtMiB(g["heap/free"]), fmtMiB(g["heap/stacks"]+g["os-stacks"]),
			fmtMiB(g["metadata"]), fmtMiB(g["other"]), fmtMiB(g["total"]-g["heap/released"]), g["goroutines"])
	}
	if m.FirstCall > 0 {
		fmt.Fprintf(&b, "; the first call after: %s", fmtDur(m.FirstCall))
	}
	return b.String()
}

// heapProfileLog finds the Go runtime's memory figures in the JSON log
// line guard writes with a heap profile ("heap profile", its fields the
// classes of /memory/classes/ and goroutines).
func heapProfileLog(logs string) map[string]int64 {
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, `"msg":"heap profile"`) {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			continue
		}
		out := map[string]int64{}
		for k, v := range rec {
			if x, ok := v.(float64); ok {
				out[k] = int64(x)
			}
		}
		return out
	}
	return nil
}

// syncBuffer is a buffer that one goroutine writes while another reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func fmtMiB(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func fmtKiB(n int64) string { return fmt.Sprintf("%d KiB", n>>10) }
