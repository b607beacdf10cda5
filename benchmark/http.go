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
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// HTTPConfig says what to measure over Streamable HTTP: a go-sdk client per
// caller (each its own session) calling a trivial tool of go-sdk's
// conformance server, directly over HTTP, through guard serve with the
// server as a stdio child (one per session), through guard serve with the
// direct server as its HTTP upstream, and through the bridges given.
type HTTPConfig struct {
	Guard string
	Dir   string
	// Fixture is go-sdk's conformance/everything-server.
	Fixture string
	// Node runs the bridges; MCPProxy and Supergateway are their scripts
	// (node_modules/.bin/...). Empty skips a bridge.
	Node, MCPProxy, Supergateway string
	Calls                        int
	Concurrency                  []int
	Rounds                       int
}

// target is one way of reaching the server over HTTP.
type target struct {
	name string
	argv []string
	url  string
	env  []string
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
	targets = append(targets, target{name: "direct (HTTP)", argv: []string{cfg.Fixture, "-http", addr, "-stateless=false"}, url: direct})
	conf := filepath.Join(cfg.Dir, "serve.yaml")
	if err := os.WriteFile(conf, []byte("durability: normal\npolicy: {default: allow}\nservers:\n  fixture:\n    command: ["+cfg.Fixture+"]\n    new_tools: allow\n"+
		"  upstream:\n    url: "+direct+"\n    new_tools: allow\n"), 0o600); err != nil {
		return nil, err
	}
	if addr, err = port(); err != nil {
		return nil, err
	}
	targets = append(targets, target{name: "guard serve", argv: []string{cfg.Guard, "serve", "--config", conf, "--db", filepath.Join(cfg.Dir, "serve.db"),
		"--listen", addr, "--no-ui"}, url: "http://" + addr + "/mcp/fixture"})
	// The same guard serve, with the direct server as its HTTP upstream:
	// what guard costs without a process per session.
	targets = append(targets, target{name: "guard serve (HTTP up)", url: "http://" + addr + "/mcp/upstream", same: "guard serve", also: "direct (HTTP)"})
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
	err = rep.rounds(w, names, cfg.Concurrency, cfg.Rounds, cfg.Calls, func(i, n, calls int) (sample, error) {
		t := targets[i]
		return measureHTTP(ctx, t, n, calls, pids[t.name], pids[t.also])
	})
	if err != nil {
		return nil, err
	}
	return rep, nil
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
	call := func(cs *mcp.ClientSession) (time.Duration, error) {
		t0 := time.Now()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "test_simple_text", Arguments: map[string]any{}})
		if err != nil {
			return 0, err
		}
		if res.IsError {
			return 0, fmt.Errorf("test_simple_text failed")
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
	tree := func() time.Duration {
		d := treeCPU(pid)
		if also != 0 {
			d += treeCPU(also)
		}
		return d
	}
	cpu0, tree0 := cpuTime(pid), tree()
	lat, elapsed, err := drive(n, calls, func(w int) (time.Duration, error) { return call(sessions[w]) })
	if err != nil {
		return sample{}, fmt.Errorf("%s: %w", t.name, err)
	}
	return sample{lat: lat, elapsed: elapsed, cpu: cpuTime(pid) - cpu0, tree: tree() - tree0}, nil
}
