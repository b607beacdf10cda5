package main

import (
	"context"
	"errors"
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
	"time"

	"github.com/guard-mcp/guard/config"
	"github.com/guard-mcp/guard/proxy"
	"github.com/guard-mcp/guard/store"
	"github.com/spf13/cobra"
	"golang.org/x/net/http/httpguts"
)

// reloadEvery is how often a running process looks for configuration changes.
const reloadEvery = time.Second

func init() { register(runCommand) }

// runCommand is guard run: a stdio server, or a remote one, behind guard
// for a stdio client. Everything after the server's command is the
// server's, flags too: guard's flags come before it (and before --).
func runCommand(a *app) *cobra.Command {
	c := leaf("run [flags] -- CMD [ARGS...]", "wrap a stdio MCP server (or, with --upstream, a remote one) for a stdio client", nil)
	c.Long = `Wrap a stdio MCP server: guard speaks MCP on its stdin and stdout, as the server would,
decides every call, and records it. Put it in a client's configuration in place of the
server's command:

  guard run [flags] -- CMD [ARGS...]     a server guard starts
  guard run [flags] --upstream URL       a remote server (Streamable HTTP, or --sse)

guard's flags come before the server's command; everything after it is the server's.
Exit status: the server's once it has run (128+N when signal N ended it); before that
1 for a failure, 2 for bad usage or configuration.`
	c.Annotations = map[string]string{annotationLogsInfo: "yes", annotationServerArgs: "yes"}
	fs := c.Flags()
	fs.SetInterspersed(false)
	cf := addCommonFlags(fs)
	name := fs.String("name", "", "the server's `name` in rules and records (default: derived from the command)")
	uiAddr := fs.String("ui", "", "serve the approval UI on `ADDR` (default: ui.listen, 127.0.0.1:8931)")
	noUI := fs.Bool("no-ui", false, "do not serve the approval UI")
	upstream := fs.String("upstream", "", "relay to a remote MCP server at `URL` instead of a command")
	var headerEnv headerEnvFlags
	fs.Var(&headerEnv, "header-env", "with --upstream: send the header `Header=ENVNAME`, its value read from the variable ENVNAME (repeated)")
	bearerEnv := fs.String("bearer-env", "", "with --upstream: send Authorization: Bearer and the value of the variable `ENVNAME`")
	sse := fs.Bool("sse", false, "with --upstream: the server speaks the legacy HTTP+SSE transport (2024-11-05)")
	c.Args = func(_ *cobra.Command, argv []string) error {
		switch {
		case *upstream == "" && (len(headerEnv) > 0 || *bearerEnv != "" || *sse):
			return errors.New("--header-env, --bearer-env and --sse go with --upstream URL")
		case *upstream != "" && len(argv) > 0:
			return errors.New("--upstream URL and a command are exclusive")
		case *upstream != "":
			if u, err := url.Parse(*upstream); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("--upstream %q: want the http:// or https:// URL of an MCP endpoint", *upstream)
			}
		case len(argv) == 0:
			return errors.New("missing the server's command (after --), or --upstream URL")
		}
		return nil
	}
	c.RunE = a.runs(a.profiled(func(ctx context.Context, argv []string) int {
		st, status, ok := a.settingsOrExit(cf)
		if !ok {
			return status
		}
		cfg := st.Config
		headers, err := a.upstreamHeaders(headerEnv, *bearerEnv)
		if err != nil {
			fmt.Fprintf(a.stderr, "guard run: %v\n", err)
			return exitUsage
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
			rm := proxy.Remote{URL: *upstream, SSE: *sse}
			if srv := cfg.Servers[server]; srv != nil {
				rm.Headers, rm.SSE = maps.Clone(srv.Headers), *sse || srv.Transport == "sse"
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
	}))
	return c
}

// headerEnvFlags are the repeated --header-env values, Header=ENVNAME.
type headerEnvFlags []string

func (h *headerEnvFlags) String() string { return strings.Join(*h, ", ") }

// Type is what -h calls the value where its usage does not name it.
func (h *headerEnvFlags) Type() string { return "Header=ENVNAME" }

func (h *headerEnvFlags) Set(v string) error {
	name, env, ok := strings.Cut(v, "=")
	switch {
	case !ok || name == "" || env == "":
		return fmt.Errorf("want Header=ENVNAME, not %q", v)
	case !httpguts.ValidHeaderFieldName(name):
		return fmt.Errorf("%q is not a header name", name)
	}
	*h = append(*h, v)
	return nil
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
func (a *app) upstreamHeaders(headerEnv headerEnvFlags, bearerEnv string) (upstreamHeaders, error) {
	h := upstreamHeaders{send: map[string]string{}, values: map[string]string{}}
	get := func(flag, env string) (string, error) {
		v := a.getenv(env)
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
	tools, err := db.Tools(ctx, old)
	if err != nil {
		return "", fmt.Errorf("server name: %w", err)
	}
	if len(tools) > 0 {
		return old, nil
	}
	return name, nil
}
