package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/approvals"
	"github.com/guard-mcp/guard/policy"
	"github.com/guard-mcp/guard/proxy"
	"github.com/guard-mcp/guard/store"
)

// relaying is what a process that relays sessions (guard run, guard serve)
// runs beside them: the policy, reloaded when its files change; the holds;
// and the approval UI, served or taken over.
type relaying struct {
	cfg       *policy.Config
	db        *store.DB
	engine    *policy.Engine
	holds     *approvals.Manager
	contracts *policy.Contracts                            // compiled schemas, shared by the sessions
	scan      func(server string, def []byte) []guard.Flag // shared by the sessions
	iso       *isolation                                   // how stdio servers are started
	// configDir is the configuration's directory, and configDirID its
	// identity when the process started (see configDirReplaced).
	configDir   string
	configDirID dirIdentity
	stop        func()
}

// everyServerIsolated reports whether isolation (package sandbox) has
// been in force for every stdio server this process started and is
// configured to start: when it is, no server could have written guard's
// configuration, so a change found there came from someone else.
func (rt *relaying) everyServerIsolated() bool { return rt.iso.everyServerIsolated() }

// configDirReplaced reports whether the configuration's directory is no
// longer the one this process started with (moved away, another put in
// its place): then a changed configuration there must not be applied
// without a person, and guard should say so loudly.
func (rt *relaying) configDirReplaced() bool { return configDirReplaced(rt.configDir, rt.configDirID) }

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
	rt := &relaying{cfg: cfg, db: db, engine: engine, holds: holds, contracts: policy.NewContracts(cfg.AssertFormats),
		scan: toolScanner(ctx, db, logger), iso: a.newIsolation(st, a.logger, true), stop: cancel}
	rt.configDir, _ = policy.Dirs(a.getenv)
	if st.ConfigPath != "" {
		rt.configDir = filepath.Dir(st.ConfigPath)
	}
	if rt.configDirID, err = identify(rt.configDir); err != nil {
		logger.Warn("cannot tell later whether the configuration's directory was replaced", "err", err)
	}
	return rt, 0, true
}

// options are the relay's options for one session with a server.
func (rt *relaying) options(server string, logger *slog.Logger) proxy.Options {
	cfg := rt.cfg
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
		Recorder:         rt.db,
		Catalog:          rt.db,
		Decider:          rt.engine,
		Holds:            rt.holds,
		Redactor:         redactor,
		MaskResults:      maskResults,
		Contracts:        rt.contracts,
		IgnoreBadSchemas: srv.BadSchema == "ignore",
		ScanTool:         rt.scan,
		AcceptNewTools:   srv.NewTools == "allow",
		OutputWarn:       srv.Output == "warn",
		MaxPending:       cfg.Approval.MaxPending,
		InBand:           cfg.Approval.InBand == "auto",
		Logger:           logger,
		ApprovalTimeout:  cfg.Approval.Timeout,
		ApprovalWait:     cfg.Approval.Wait,
	}
}
