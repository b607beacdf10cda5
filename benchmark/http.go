package benchmark

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// HTTPConfig says what to measure over Streamable HTTP: a go-sdk client per
// caller (each its own session) calling a trivial tool of go-sdk's
// conformance server, directly over HTTP, through guard serve with the
// server as a stdio child, and through the bridges given.
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
	targets = append(targets, target{"direct (HTTP)", []string{cfg.Fixture, "-http", addr, "-stateless=false"}, "http://" + addr + "/mcp", nil})
	conf := filepath.Join(cfg.Dir, "serve.yaml")
	if err := os.WriteFile(conf, []byte("durability: normal\npolicy: {default: allow}\nservers:\n  fixture:\n    command: ["+cfg.Fixture+"]\n    new_tools: allow\n"), 0o600); err != nil {
		return nil, err
	}
	if addr, err = port(); err != nil {
		return nil, err
	}
	targets = append(targets, target{"guard serve", []string{cfg.Guard, "serve", "--config", conf, "--db", filepath.Join(cfg.Dir, "serve.db"),
		"--listen", addr, "--no-ui"}, "http://" + addr + "/mcp/fixture", nil})
	if cfg.MCPProxy != "" {
		if addr, err = port(); err != nil {
			return nil, err
		}
		_, p, _ := net.SplitHostPort(addr)
		targets = append(targets, target{"mcp-proxy", []string{cfg.Node, cfg.MCPProxy, "--host", "127.0.0.1", "--port", p, "--server", "stream", "--", cfg.Fixture},
			"http://" + addr + "/mcp", nil})
	}
	if cfg.Supergateway != "" {
		if addr, err = port(); err != nil {
			return nil, err
		}
		_, p, _ := net.SplitHostPort(addr)
		targets = append(targets, target{"supergateway", []string{cfg.Node, cfg.Supergateway, "--stdio", cfg.Fixture, "--outputTransport", "streamableHttp",
			"--stateful", "--port", p, "--logLevel", "none"}, "http://" + addr + "/mcp", nil})
	}
	rep := &Report{}
	var procs []*exec.Cmd
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
		cmd := exec.Command(t.argv[0], t.argv[1:]...)
		cmd.Stderr = io.Discard
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("%s: %w", t.name, err)
		}
		procs = append(procs, cmd)
		if err := waitReady(ctx, t.url); err != nil {
			return nil, fmt.Errorf("%s: %w", t.name, err)
		}
	}
	rounds := max(cfg.Rounds, 1)
	for _, n := range cfg.Concurrency {
		samples := make([][]sample, len(targets))
		for range rounds {
			for i, t := range targets {
				sm, err := measureHTTP(ctx, t, n, cfg.Calls/rounds, procs[i].Process.Pid)
				if err != nil {
					return nil, err
				}
				samples[i] = append(samples[i], sm)
			}
		}
		base := summarize(targets[0].name, n, samples[0])
		rep.add(w, base, nil)
		for i := 1; i < len(targets); i++ {
			rep.add(w, summarize(targets[i].name, n, samples[i]), &base)
		}
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

// measureHTTP makes calls with n clients, each its own session.
func measureHTTP(ctx context.Context, t target, n, calls, pid int) (sample, error) {
	sessions := make([]*mcp.ClientSession, n)
	for i := range sessions {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "guard-bench", Version: "1"}, nil).
			Connect(ctx, &mcp.StreamableClientTransport{Endpoint: t.url}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
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
	cpu0 := cpuTime(pid)
	lat, elapsed, err := drive(n, calls, func(w int) (time.Duration, error) { return call(sessions[w]) })
	if err != nil {
		return sample{}, fmt.Errorf("%s: %w", t.name, err)
	}
	return sample{lat: lat, elapsed: elapsed, cpu: cpuTime(pid) - cpu0}, nil
}
