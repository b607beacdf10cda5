package app

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"github.com/guard-mcp/guard/config"
	"github.com/guard-mcp/guard/proxy"
	"github.com/guard-mcp/guard/proxy/remote"
	"github.com/guard-mcp/guard/proxy/stdio"
	"github.com/guard-mcp/guard/store"
	"golang.org/x/net/http/httpguts"
)

// RunOptions are guard run's flags.
type RunOptions struct {
	Name      string // --name: the server's name ("": derived from its command, or the upstream's host)
	UI        UIFlags
	Upstream  string   // --upstream: a remote server's URL instead of a command
	HeaderEnv []string // --header-env: Header=ENVNAME, sent upstream
	BearerEnv string   // --bearer-env: the variable whose value is sent as a bearer token
	SSE       bool     // --sse: the upstream speaks the legacy HTTP+SSE transport
}

// Run is guard run: it relays between guard's own stdin and stdout and a
// stdio server started with argv, or, with o.Upstream, a remote server,
// and returns the status to exit with: the server's once it has run.
func (m *Main) Run(ctx context.Context, st *Settings, o RunOptions, argv []string) int {
	cfg := st.Config
	headers, err := m.upstreamHeaders(o.HeaderEnv, o.BearerEnv)
	if err != nil {
		fmt.Fprintf(m.Stderr, "guard run: %v\n", err)
		return ExitUsage
	}
	for env, v := range headers.values {
		// The values are the server's credentials: guard's own secrets
		// from here on, masked wherever they would show (records, logs,
		// what the client reads), like a variable the configuration
		// expanded.
		if cfg.Expanded == nil {
			cfg.Expanded = map[string]string{}
		}
		cfg.Expanded[env] = v
	}
	server := o.Name
	if server == "" && o.Upstream != "" {
		u, _ := url.Parse(o.Upstream) // checked by the command line
		server = u.Hostname()
	}
	db, err := m.OpenStore(ctx, st)
	if err != nil {
		fmt.Fprintf(m.Stderr, "guard: %v\n", err)
		return ExitFailure
	}
	defer db.Close()
	if server == "" {
		if server, err = derivedName(ctx, db, cfg, argv); err != nil {
			fmt.Fprintf(m.Stderr, "guard: %v\n", err)
			return ExitFailure
		}
	}
	logger := m.Logger.With("server", server)

	rt, status, ok := m.startRelaying(st, db, logger, o.UI, "guard run")
	if !ok {
		return status
	}
	defer rt.stop()
	rt.started(server, []string{server})

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	defer catchSIGPIPE()()

	if o.Upstream != "" {
		// A remote server for a stdio client: headers (credentials) come
		// from the configuration of the server of that name.
		rm := remote.Remote{URL: o.Upstream, SSE: o.SSE, TraceHeaders: rt.tracing != nil}
		if srv := cfg.Servers[server]; srv != nil {
			rm.Headers, rm.SSE = maps.Clone(srv.Headers), o.SSE || srv.Transport == "sse"
		}
		// Those of the command line, which its client's entry gave,
		// win over the configuration's of the same name.
		for h, v := range headers.send {
			if rm.Headers == nil {
				rm.Headers = map[string]string{}
			}
			for k := range rm.Headers {
				if http.CanonicalHeaderKey(k) == h {
					delete(rm.Headers, k)
				}
			}
			rm.Headers[h] = v
		}
		rt.iso.settled.Store(true) // no server of its own
		opts := rt.options(server, logger)
		err := remote.Run(context.WithoutCancel(ctx), opts,
			rm, proxy.NewStreamConn(m.clientIn(), m.clientOut(), opts.MaxMessage))
		if err != nil {
			logger.Debug("writing to the client", "err", err)
		}
		return ExitOK
	}
	rt.iso.settle([]string{server}, cfg.Servers)
	opts := rt.options(server, logger)
	m.roomForBlockingReads()
	client := proxy.NewStreamConn(m.clientIn(), m.clientOut(), opts.MaxMessage)
	code, err := stdio.Run(context.WithoutCancel(ctx), opts,
		stdio.Stdio{Argv: argv, Start: rt.iso.start(server, cfg.Servers[server]), Env: cfg.ServerEnv(m.Environ(), cfg.Servers[server]),
			Stderr: m.Stderr, Signals: sigs}, client)
	if err != nil {
		// The server did not run (stdio.ErrStart): guard's own failure,
		// which the client reads as the answer to each of its requests
		// (it would otherwise see guard's output end, and guess).
		fmt.Fprintf(m.Stderr, "guard: %v\n", err)
		if err := stdio.RefuseStart(client, err); err != nil {
			logger.Debug("writing to the client", "err", err)
		}
		return ExitFailure
	}
	return code
}

// upstreamHeaders are the headers that --header-env and --bearer-env
// send upstream.
type upstreamHeaders struct {
	send   map[string]string // header (canonical) → value
	values map[string]string // variable → value
}

// upstreamHeaders reads the values of --header-env and --bearer-env from
// the environment. A variable that is not set (or empty) is an error that
// names it; no error shows a value. The variables hold credentials that
// a client's configuration gave the server (guard wrap moves a remote
// entry's headers into its env), kept out of the argument list, which
// every user of the machine can read.
func (m *Main) upstreamHeaders(headerEnv []string, bearerEnv string) (upstreamHeaders, error) {
	h := upstreamHeaders{send: map[string]string{}, values: map[string]string{}}
	get := func(flag, env string) (string, error) {
		v := m.Getenv(env)
		if v == "" {
			return "", fmt.Errorf("%s: the variable %s is not set", flag, env)
		}
		if !httpguts.ValidHeaderFieldValue(v) {
			return "", fmt.Errorf("%s: the value of %s cannot be sent in a header (a line break or control character)", flag, env)
		}
		h.values[env] = v
		return v, nil
	}
	for _, he := range headerEnv {
		name, env, _ := strings.Cut(he, "=") // checked by Set
		v, err := get("--header-env "+he, env)
		if err != nil {
			return h, err
		}
		h.send[http.CanonicalHeaderKey(name)] = v
	}
	if bearerEnv != "" {
		v, err := get("--bearer-env "+bearerEnv, bearerEnv)
		if err != nil {
			return h, err
		}
		h.send["Authorization"] = "Bearer " + v
	}
	return h, nil
}

// clientIn and clientOut are guard's own stdin and stdout, read and written
// with blocking system calls when they are pipes or sockets.
func (m *Main) clientIn() io.Reader {
	if f, ok := m.Stdin.(*os.File); ok {
		return stdio.Blocking(f)
	}
	return m.Stdin
}

func (m *Main) clientOut() io.Writer {
	if f, ok := m.Stdout.(*os.File); ok {
		return stdio.Blocking(f)
	}
	return m.Stdout
}

// roomForBlockingReads gives the runtime two processors more than it
// would take (unless GOMAXPROCS is set). The relay waits for the client
// and for the server in blocking reads (stdio.Blocking), two goroutines
// that hold a processor each while they wait: with no processor left
// idle, the runtime's monitor takes theirs back after 20 µs, every time,
// and so keeps waking every 20 µs itself, which cost more CPU than the
// relay's own work per message on a 2-core machine. With processors to
// spare it leaves them alone and sleeps. (Setting the count also ends the
// runtime's following of a container's CPU limit for this process: the
// count is that limit's, plus two, from the start.)
func (m *Main) roomForBlockingReads() {
	if m.Getenv("GOMAXPROCS") != "" {
		return
	}
	runtime.SetDefaultGOMAXPROCS() // the same count however often it is called
	runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + 2)
}

// derivedName names a server started without --name: by its package for a
// script in one (proxy.ServerName), unless the name its command line alone
// gives (proxy.CommandName) is one guard knows already, in the catalog or
// among the configured servers: a server keeps its name, and so its
// baseline, its reviews and its settings.
func derivedName(ctx context.Context, db *store.DB, cfg *config.Config, argv []string) (string, error) {
	name, old := proxy.ServerName(argv), proxy.CommandName(argv)
	if name == old {
		return name, nil
	}
	if _, ok := cfg.Servers[old]; ok {
		return old, nil
	}
	if _, ok := cfg.Servers[name]; ok {
		return name, nil
	}
	tools, err := db.Catalog().Tools(ctx, old)
	if err != nil {
		return "", fmt.Errorf("server name: %w", err)
	}
	if len(tools) > 0 {
		return old, nil
	}
	return name, nil
}
