package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/guard-mcp/guard/policy"
	"github.com/guard-mcp/guard/proxy"
	"github.com/guard-mcp/guard/store"
)

// reloadEvery is how often a running process looks for configuration changes.
const reloadEvery = time.Second

func init() {
	commands["run"] = command{summary: "wrap a stdio MCP server: guard run [flags] -- CMD [ARGS...]", run: cmdRun, profiled: true}
}

func cmdRun(ctx context.Context, a *app, args []string) int {
	fs := a.flagSet("run")
	cf := addCommonFlags(fs)
	name := fs.String("name", "", "the server's `name` in rules and records (default: derived from the command)")
	uiAddr := fs.String("ui", "", "serve the approval UI on `ADDR` (default: ui.listen, 127.0.0.1:8931)")
	noUI := fs.Bool("no-ui", false, "do not serve the approval UI")
	upstream := fs.String("upstream", "", "relay to a remote MCP server at `URL` instead of a command")
	if status, ok := a.parseFlags(fs, args); !ok {
		return status
	}
	argv := fs.Args()
	if *upstream != "" && len(argv) > 0 {
		fmt.Fprintln(a.stderr, "guard run: --upstream URL and a command are exclusive")
		return exitUsage
	}
	if *upstream != "" {
		if u, err := url.Parse(*upstream); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			fmt.Fprintf(a.stderr, "guard run: --upstream %q: want the http:// or https:// URL of an MCP endpoint\n", *upstream)
			return exitUsage
		}
	}
	if len(argv) == 0 && *upstream == "" {
		fmt.Fprintln(a.stderr, "usage: guard run [--config F] [--db PATH] [--name NAME] -- CMD [ARGS...]")
		return exitUsage
	}
	st, status, ok := a.settingsOrExit(cf)
	if !ok {
		return status
	}
	cfg := st.Config
	server := *name
	if server == "" && *upstream != "" {
		u, _ := url.Parse(*upstream) // checked above
		server = u.Hostname()
	}
	db, err := a.openStore(ctx, st)
	if err != nil {
		fmt.Fprintf(a.stderr, "guard: %v\n", err)
		return exitFailure
	}
	defer db.Close()
	if server == "" {
		if server, err = derivedName(ctx, db, cfg, argv); err != nil {
			fmt.Fprintf(a.stderr, "guard: %v\n", err)
			return exitFailure
		}
	}
	logger := a.logger.With("server", server)

	rt, status, ok := a.startRelaying(st, db, logger, uiFlags{addr: *uiAddr, off: *noUI}, "guard run")
	if !ok {
		return status
	}
	defer rt.stop()
	rt.started(server, []string{server})

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	defer catchSIGPIPE()()

	if *upstream != "" {
		// A remote server for a stdio client: headers (credentials) come
		// from the configuration of the server of that name.
		rm := proxy.Remote{URL: *upstream}
		if srv := cfg.Servers[server]; srv != nil {
			rm.Headers, rm.SSE = srv.Headers, srv.Transport == "sse"
		}
		rt.iso.settled.Store(true) // no server of its own
		opts := rt.options(server, logger)
		err := proxy.RunRemote(context.WithoutCancel(ctx), opts,
			rm, proxy.NewStreamConn(a.clientIn(), a.clientOut(), opts.MaxMessage))
		if err != nil {
			logger.Debug("writing to the client", "err", err)
		}
		return exitOK
	}
	rt.iso.settle([]string{server}, cfg.Servers)
	opts := rt.options(server, logger)
	a.roomForBlockingReads()
	client := proxy.NewStreamConn(a.clientIn(), a.clientOut(), opts.MaxMessage)
	code, err := proxy.RunStdio(context.WithoutCancel(ctx), opts,
		proxy.Stdio{Argv: argv, Start: rt.iso.start(server, cfg.Servers[server]), Env: cfg.ServerEnv(a.environ(), cfg.Servers[server]),
			Stderr: a.stderr, Signals: sigs}, client)
	if err != nil {
		// The server did not run (proxy.ErrStart): guard's own failure,
		// which the client reads as the answer to each of its requests
		// (it would otherwise see guard's output end, and guess).
		fmt.Fprintf(a.stderr, "guard: %v\n", err)
		if err := proxy.RefuseStart(client, err); err != nil {
			logger.Debug("writing to the client", "err", err)
		}
		return exitFailure
	}
	return code
}

// clientIn and clientOut are guard's own stdin and stdout, read and written
// with blocking system calls when they are pipes or sockets.
func (a *app) clientIn() io.Reader {
	if f, ok := a.stdin.(*os.File); ok {
		return proxy.Blocking(f)
	}
	return a.stdin
}

func (a *app) clientOut() io.Writer {
	if f, ok := a.stdout.(*os.File); ok {
		return proxy.Blocking(f)
	}
	return a.stdout
}

// roomForBlockingReads gives the runtime two processors more than it
// would take (unless GOMAXPROCS is set). The relay waits for the client
// and for the server in blocking reads (proxy.Blocking), two goroutines
// that hold a processor each while they wait: with no processor left
// idle, the runtime's monitor takes theirs back after 20 µs, every time,
// and so keeps waking every 20 µs itself, which cost more CPU than the
// relay's own work per message on a 2-core machine. With processors to
// spare it leaves them alone and sleeps. (Setting the count also ends the
// runtime's following of a container's CPU limit for this process: the
// count is that limit's, plus two, from the start.)
func (a *app) roomForBlockingReads() {
	if a.getenv("GOMAXPROCS") != "" {
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
func derivedName(ctx context.Context, db *store.DB, cfg *policy.Config, argv []string) (string, error) {
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
	tools, err := db.Tools(ctx, old)
	if err != nil {
		return "", fmt.Errorf("server name: %w", err)
	}
	if len(tools) > 0 {
		return old, nil
	}
	return name, nil
}
