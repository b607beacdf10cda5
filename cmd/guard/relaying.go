package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/guard-mcp/guard/approvals"
	"github.com/guard-mcp/guard/policy"
	"github.com/guard-mcp/guard/proxy"
	"github.com/guard-mcp/guard/store"
)

// relaying is what a process that relays sessions (guard run, guard serve)
// runs beside them: the policy, reloaded when its files change; the holds;
// and the approval UI, served or taken over.
type relaying struct {
	engine *policy.Engine
	holds  *approvals.Manager
	stop   func()
}

// startRelaying starts it, or says why not and returns the status to exit
// with (2 for a bad configuration or UI address).
func (a *app) startRelaying(st *settings, db *store.DB, logger *slog.Logger, uiAddr string, noUI bool, cmd string) (*relaying, int, bool) {
	cfg := st.Config
	listen := cfg.UI.Listen
	if uiAddr != "" {
		listen = uiAddr
		if !cfg.UI.AllowRemote && !policy.LoopbackAddr(listen) {
			fmt.Fprintf(a.stderr, "%s: --ui %s is reachable from other machines; use a loopback address, or set ui.allow_remote: true\n", cmd, listen)
			return nil, exitUsage, false
		}
	}
	engine, err := policy.NewEngine(st.ConfigPath, cfg, policy.EngineOptions{
		RulesDir: st.RulesDir, Protected: st.protected(), Getenv: a.getenv, Logger: logger, Limiter: db,
	})
	if err != nil {
		fmt.Fprintf(a.stderr, "guard: %v\n", err)
		return nil, exitUsage, false
	}
	ctx, cancel := context.WithCancel(context.Background())
	go engine.Watch(ctx, reloadEvery)
	holds := approvals.New(db, approvals.Options{Timeout: cfg.Approval.Timeout, Wait: cfg.Approval.Wait, Logger: logger})
	if !noUI {
		go serveUI(ctx, st, db, holds, engine, listen, logger)
	}
	return &relaying{engine: engine, holds: holds, stop: cancel}, 0, true
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
