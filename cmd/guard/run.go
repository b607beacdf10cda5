package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/guard-mcp/guard/approvals"
	"github.com/guard-mcp/guard/policy"
	"github.com/guard-mcp/guard/proxy"
	"github.com/guard-mcp/guard/store"
)

// reloadEvery is how often a running process looks for configuration changes.
const reloadEvery = time.Second

func init() {
	commands["run"] = command{summary: "wrap a stdio MCP server: guard run [flags] -- CMD [ARGS...]", run: cmdRun}
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
		if u, err := url.Parse(*upstream); err == nil && u.Hostname() != "" {
			server = u.Hostname()
		}
	}
	if server == "" {
		server = proxy.ServerName(argv)
	}
	logger := a.logger.With("server", server)

	db, err := a.openStore(ctx, st)
	if err != nil {
		fmt.Fprintf(a.stderr, "guard: %v\n", err)
		return exitFailure
	}
	defer db.Close()

	engine, err := policy.NewEngine(st.ConfigPath, cfg, policy.EngineOptions{
		RulesDir: st.RulesDir, Protected: st.protected(), Getenv: a.getenv, Logger: logger, Limiter: db,
	})
	if err != nil {
		fmt.Fprintf(a.stderr, "guard: %v\n", err)
		return exitUsage
	}
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	go engine.Watch(watchCtx, reloadEvery)

	holds := approvals.New(db, approvals.Options{
		Timeout: cfg.Approval.Timeout,
		Wait:    cfg.Approval.Wait,
		Logger:  logger,
	})

	if !*noUI {
		listen := cfg.UI.Listen
		if *uiAddr != "" {
			listen = *uiAddr
			if !cfg.UI.AllowRemote && !policy.LoopbackAddr(listen) {
				fmt.Fprintf(a.stderr, "guard run: --ui %s is reachable from other machines; use a loopback address, or set ui.allow_remote: true\n", listen)
				return exitUsage
			}
		}
		uiCtx, stopUI := context.WithCancel(context.Background())
		defer stopUI()
		go serveUI(uiCtx, st, db, holds, engine, listen, logger)
	}

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	if *upstream != "" {
		// A remote server for a stdio client: headers (credentials) come
		// from the configuration of the server of that name.
		rm := proxy.Remote{URL: *upstream}
		if srv := cfg.Servers[server]; srv != nil {
			rm.Headers, rm.SSE = srv.Headers, srv.Transport == "sse"
		}
		err := proxy.RunRemote(context.WithoutCancel(ctx), relayOptions(ctx, cfg, server, db, engine, holds, logger),
			rm, a.clientIn(), a.clientOut())
		if err != nil {
			logger.Debug("writing to the client", "err", err)
		}
		return exitOK
	}
	code, err := proxy.RunStdio(context.WithoutCancel(ctx), relayOptions(ctx, cfg, server, db, engine, holds, logger),
		proxy.Stdio{Argv: argv, Stderr: a.stderr, Signals: sigs}, a.clientIn(), a.clientOut())
	if err != nil {
		// The server did not run (proxy.ErrStart): guard's own failure.
		fmt.Fprintf(a.stderr, "guard: %v\n", err)
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

// relayOptions are the relay's options for one session with a server.
func relayOptions(ctx context.Context, cfg *policy.Config, server string, db *store.DB, engine *policy.Engine,
	holds *approvals.Manager, logger *slog.Logger) proxy.Options {
	srv := cfg.Servers[server]
	if srv == nil {
		srv = policy.DefaultServer()
	}
	redactor := cfg.Redactor()
	var maskResults func([]byte) ([]byte, int)
	if cfg.RedactResults {
		maskResults = redactor.MaskSecrets
	}
	return proxy.Options{
		Server:           server,
		MaxMessage:       int(cfg.MaxMessage),
		Recorder:         db,
		Catalog:          db,
		Decider:          engine,
		Holds:            holds,
		Redactor:         redactor,
		MaskResults:      maskResults,
		Contracts:        policy.NewContracts(cfg.AssertFormats),
		IgnoreBadSchemas: srv.BadSchema == "ignore",
		ScanTool:         toolScanner(ctx, db, logger),
		AcceptNewTools:   srv.NewTools == "allow",
		OutputWarn:       srv.Output == "warn",
		MaxPending:       cfg.Approval.MaxPending,
		InBand:           cfg.Approval.InBand == "auto",
		Logger:           logger,
		ApprovalTimeout:  cfg.Approval.Timeout,
		ApprovalWait:     cfg.Approval.Wait,
	}
}
