package benchmark

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// HTTPConfig says what to measure over Streamable HTTP: a go-sdk client per
// caller (each its own session) calling a trivial tool of go-sdk's
// conformance server, directly over HTTP, through guard serve with the
// server as a stdio child (one per session) at the server's own endpoint
// and at the aggregate endpoint, through guard serve with the direct
// server as its HTTP upstream, and through the bridges given.
type HTTPConfig struct {
	Guard string
	Dir   string
	// Fixture is go-sdk's conformance/everything-server.
	Fixture string
	// ReverseProxy is the command that runs ReverseProxy, before "LISTEN
	// UPSTREAM": guard-bench's own (Self ReverseProxyCommand). Empty skips
	// the row.
	ReverseProxy []string
	// Node runs the bridges; MCPProxy and Supergateway are their scripts
	// (node_modules/.bin/...). Empty skips a bridge.
	Node, MCPProxy, Supergateway string
	Calls                        int
	Concurrency                  []int
	Rounds                       int
	// Profile, when not "", is a directory where guard serve writes a CPU
	// profile of the whole run (see ProfileEnv).
	Profile string
}

// target is one way of reaching the server over HTTP.
type target struct {
	name string
	argv []string
	url  string
	env  []string
	// tool is the tool called (default test_simple_text).
	tool string
	// same, when not "", is the name of the target whose process this one
	// uses instead of starting its own.
	same string
	// also, when not "", names a target whose process serves this one
	// too (an upstream): its CPU counts with this one's children.
	also string
}

// RunHTTP measures as configured and writes a report to w as it goes.
func RunHTTP(ctx context.Context, cfg HTTPConfig, w io.Writer) (*Report, error) {
	if cfg.Calls <= 0 {
		cfg.Calls = 2000
	}
	port := func() (string, error) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		defer l.Close()
		return l.Addr().String(), nil
	}
	var targets []target
	addr, err := port()
	if err != nil {
		return nil, err
	}
	direct := "http://" + addr + "/mcp"
	targets = append(targets, target{name: rowHTTPDirect, argv: []string{cfg.Fixture, "-http", addr, "-stateless=false"}, url: direct})
	conf := filepath.Join(cfg.Dir, "serve.yaml")
	if err := os.WriteFile(conf, []byte("durability: normal\npolicy: {default: allow}\naggregate: {enabled: true}\nservers:\n  fixture:\n    command: ["+cfg.Fixture+"]\n    new_tools: allow\n"+
		"  upstream:\n    url: "+direct+"\n    new_tools: allow\n"), 0o600); err != nil {
		return nil, err
	}
	if addr, err = port(); err != nil {
		return nil, err
	}
	targets = append(targets, target{name: rowServe, argv: []string{cfg.Guard, "serve", "--config", conf, "--db", filepath.Join(cfg.Dir, "serve.db"),
		"--listen", addr, "--no-ui"}, url: "http://" + addr + "/mcp/fixture", env: profileEnv(cfg.Profile, rowServe, 0, 0)})
	// The same server through the same guard serve at the endpoint of
	// every server, where its tools are named fixture__NAME.
	targets = append(targets, target{name: rowAggregate, url: "http://" + addr + "/mcp", same: rowServe, tool: "fixture__test_simple_text"})
	// The same guard serve, with the direct server as its HTTP upstream:
	// what guard costs without a process per session.
	targets = append(targets, target{name: rowUpstream, url: "http://" + addr + "/mcp/upstream", same: rowServe, also: rowHTTPDirect})
	if len(cfg.ReverseProxy) > 0 {
		// The floor of any HTTP proxy before the same upstream.
		if addr, err = port(); err != nil {
			return nil, err
		}
		targets = append(targets, target{name: rowReverseProxy, argv: append(slices.Clone(cfg.ReverseProxy), addr, direct),
			url: "http://" + addr + "/mcp", also: rowHTTPDirect})
	}
	if cfg.MCPProxy != "" {
		if addr, err = port(); err != nil {
			return nil, err
		}
		_, p, _ := net.SplitHostPort(addr)
		targets = append(targets, target{name: "mcp-proxy", argv: []string{cfg.Node, cfg.MCPProxy, "--host", "127.0.0.1", "--port", p, "--server", "stream", "--", cfg.Fixture},
			url: "http://" + addr + "/mcp"})
	}
	if cfg.Supergateway != "" {
		if addr, err = port(); err != nil {
			return nil, err
		}
		_, p, _ := net.SplitHostPort(addr)
		targets = append(targets, target{name: "supergateway", argv: []string{cfg.Node, cfg.Supergateway, "--stdio", cfg.Fixture, "--outputTransport", "streamableHttp",
			"--stateful", "--port", p, "--logLevel", "none"}, url: "http://" + addr + "/mcp"})
	}
	rep := &Report{}
	var procs []*exec.Cmd
	pids := map[string]int{}
	defer func() {
		for _, c := range procs {
			_ = c.Process.Signal(os.Interrupt)
			done := make(chan struct{})
			go func() { c.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				_ = c.Process.Kill()
			}
		}
	}()
	for _, t := range targets {
		if t.same != "" {
			pids[t.name] = pids[t.same]
		} else {
			cmd := exec.Command(t.argv[0], t.argv[1:]...)
			cmd.Env = t.env
			cmd.Stderr = io.Discard
			if err := cmd.Start(); err != nil {
				return nil, fmt.Errorf("%s: %w", t.name, err)
			}
			procs = append(procs, cmd)
			pids[t.name] = cmd.Process.Pid
		}
		if err := waitReady(ctx, t.url); err != nil {
			return nil, fmt.Errorf("%s: %w", t.name, err)
		}
	}
	names := make([]string, len(targets))
	for i, t := range targets {
		names[i] = t.name
	}
	err = rep.rounds(w, names, cfg.Concurrency, cfg.Rounds, cfg.Calls, func(i, n, _, calls int) (sample, error) {
		t := targets[i]
		return measureHTTP(ctx, t, n, calls, pids[t.name], pids[t.also])
	})
	if err != nil {
		return nil, err
	}
	rep.httpTargets(w)
	return rep, nil
}

// The rows of an HTTP run that guard's targets name.
const (
	rowHTTPDirect = "direct (HTTP)"
	rowServe      = "guard serve"
	rowAggregate  = "guard serve aggregate"
	rowUpstream   = "guard serve (HTTP up)"
	// rowReverseProxy is Go's httputil.ReverseProxy before the same
	// upstream (ReverseProxy).
	rowReverseProxy = "reverse proxy (HTTP up)"
)

// Guard's targets for guard serve.
const (
	// The aggregate endpoint makes at least this share of the calls per
	// second of the server's own endpoint.
	targetAggregateOfOwn = 0.90
	// With 16 clients, guard itself (not the servers it runs) spends at
	// most this much CPU per call...
	targetServeCPU = 150 * time.Microsecond
	// ...and an HTTP upstream through guard makes at least this share of
	// its own calls per second.
	targetUpstreamOfDirect = 0.85
	// Beside Go's reverse proxy before the same upstream, with 16 clients,
	// guard serve makes at least this share of its calls per second...
	targetUpstreamOfProxy = 0.90
	// ...and spends at most this multiple of its CPU per call.
	targetUpstreamCPUOfProxy = 2.5
)

// httpTargets compares the figures measured with guard's targets.
func (rep *Report) httpTargets(w io.Writer) {
	for _, n := range rep.counts() {
		agg, own := rep.find(rowAggregate, n), rep.find(rowServe, n)
		if agg == nil || own == nil {
			continue
		}
		ratio := perRound(agg, own, func(a, b sample) (float64, bool) { return a.perSec() / b.perSec(), true })
		rep.target(w, "aggregate, %s: calls/s %.2f of the server's own endpoint (target ≥ %.2f): %s",
			clients(n), ratio, targetAggregateOfOwn, met(ratio >= targetAggregateOfOwn))
	}
	const n = 16
	serve, up := rep.find(rowServe, n), rep.find(rowUpstream, n)
	if serve == nil || up == nil {
		return
	}
	cpu := perRound(serve, serve, func(a, _ sample) (time.Duration, bool) { return a.cpuPerCall(), true })
	ofDirect := rep.result(rowUpstream, n).OfDirect
	rep.target(w, "guard serve, %s: guard's own cpu/call %s (target ≤ %s); HTTP upstream calls/s %.2f of direct (target ≥ %.2f): %s",
		clients(n), fmtDur(cpu), fmtDur(targetServeCPU), ofDirect, targetUpstreamOfDirect, met(cpu <= targetServeCPU && ofDirect >= targetUpstreamOfDirect))
	rp := rep.find(rowReverseProxy, n)
	if rp == nil {
		return
	}
	// Calls per second and the proxy's own CPU per call (guard serve's,
	// the reverse proxy's; the upstream's is the same server's in both),
	// each round against the other row's same round.
	ratio := perRound(up, rp, func(a, b sample) (float64, bool) { return a.perSec() / b.perSec(), true })
	times := perRound(up, rp, func(a, b sample) (float64, bool) {
		return float64(a.cpuPerCall()) / float64(b.cpuPerCall()), b.cpu > 0
	})
	rep.target(w, "HTTP upstream, %s: guard serve calls/s %.2f of Go's reverse proxy (target ≥ %.2f), cpu/call %.1fx its (target ≤ %.1fx): %s",
		clients(n), ratio, targetUpstreamOfProxy, times, targetUpstreamCPUOfProxy,
		met(ratio >= targetUpstreamOfProxy && times <= targetUpstreamCPUOfProxy))
}

// counts lists the counts of callers measured, in order.
func (rep *Report) counts() []int {
	var ns []int
	for _, s := range rep.series {
		if !slices.Contains(ns, s.callers) {
			ns = append(ns, s.callers)
		}
	}
	return ns
}

func clients(n int) string {
	if n == 1 {
		return "1 client"
	}
	return fmt.Sprintf("%d clients", n)
}

func waitReady(ctx context.Context, url string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "ready", Version: "1"}, nil).Connect(c, &mcp.StreamableClientTransport{Endpoint: url}, nil)
		cancel()
		if err == nil {
			cs.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("never answered at %s: %w", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// measureHTTP makes calls with n clients, each its own session. pid is the
// process that serves them; also, when not 0, an upstream whose CPU counts
// with pid's children.
func measureHTTP(ctx context.Context, t target, n, calls, pid, also int) (sample, error) {
	tree := func() time.Duration {
		d := treeCPU(pid)
		if also != 0 {
			d += treeCPU(also)
		}
		return d
	}
	return measureClients(ctx, t, n, calls, func() time.Duration { return procCPU(pid) }, tree)
}

// measureClients makes calls with n clients, each its own session; cpu
// and tree read the CPU time of what serves them and of what counts with
// it (a sample's cpu and tree).
func measureClients(ctx context.Context, t target, n, calls int, cpu, tree func() time.Duration) (sample, error) {
	sessions := make([]*mcp.ClientSession, n)
	for i := range sessions {
		// Each client its own connections, as separate client processes
		// would have: sessions sharing http.DefaultTransport (2 idle
		// connections per host) would open and close connections all the
		// time, a cost of the benchmark rather than of what it measures.
		hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
		defer hc.CloseIdleConnections()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "guard-bench", Version: "1"}, nil).
			Connect(ctx, &mcp.StreamableClientTransport{Endpoint: t.url, HTTPClient: hc}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			return sample{}, fmt.Errorf("%s: %w", t.name, err)
		}
		defer cs.Close()
		sessions[i] = cs
	}
	tool := t.tool
	if tool == "" {
		tool = "test_simple_text"
	}
	call := func(cs *mcp.ClientSession) (time.Duration, error) {
		t0 := time.Now()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{}})
		if err != nil {
			return 0, err
		}
		if res.IsError {
			return 0, fmt.Errorf("%s failed", tool)
		}
		return time.Since(t0), nil
	}
	for _, cs := range sessions { // warm-up
		for range 50 {
			if _, err := call(cs); err != nil {
				return sample{}, fmt.Errorf("%s: %w", t.name, err)
			}
		}
	}
	// The sessions stay open until the second reading: guard ends a
	// session's server when it ends, taking the server out of the tree.
	time.Sleep(quiet)
	cpu0, tree0 := cpu(), tree()
	lat, elapsed, err := drive(n, calls, func(w int) (time.Duration, error) { return call(sessions[w]) })
	if err != nil {
		return sample{}, fmt.Errorf("%s: %w", t.name, err)
	}
	time.Sleep(quiet)
	return sample{lat: lat, elapsed: elapsed, cpu: cpu() - cpu0, tree: tree() - tree0}, nil
}
