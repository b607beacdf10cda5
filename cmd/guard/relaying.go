package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

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
	// own are guard's own secrets, by value: masked in every record and
	// in every result a client reads.
	own  []string
	stop func()
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
		Gate: db, Isolated: a.isolated(cfg),
	})
	if err != nil {
		fmt.Fprintf(a.stderr, "guard: %v\n", err)
		return nil, exitUsage, false
	}
	own, err := ownSecrets(st, cfg, db)
	if err != nil {
		fmt.Fprintf(a.stderr, "guard: %v\n", err)
		return nil, exitFailure, false
	}
	ctx, cancel := context.WithCancel(context.Background())
	go engine.Watch(ctx, reloadEvery)
	holds := approvals.New(db, approvals.Options{Timeout: cfg.Approval.Timeout, Wait: cfg.Approval.Wait, Logger: logger})
	if !noUI {
		go serveUI(ctx, st, db, holds, engine, listen, logger)
	}
	return &relaying{cfg: cfg, db: db, engine: engine, holds: holds, contracts: policy.NewContracts(cfg.AssertFormats),
		scan: toolScanner(ctx, db, logger), own: own, stop: cancel}, 0, true
}

// isolated reports whether isolation is in force for every server this
// process runs, so that none of them can write guard's configuration.
// Until the sandbox says so, no process claims it: a configuration change
// that alters decisions then waits for a person.
func (a *app) isolated(*policy.Config) bool { return false }

// ownSecrets lists the values of guard's own secrets: the UI's login token
// (made now when it does not exist yet, so that it is known before the
// first session), the checkpoint key in every form it may be written in,
// and the values of the variables the configuration expanded.
func ownSecrets(st *settings, cfg *policy.Config, db *store.DB) ([]string, error) {
	tok, err := uiToken(st.DataDir)
	if err != nil {
		return nil, err
	}
	own := append([]string{tok, strings.ToUpper(tok)}, db.SecretForms()...)
	for _, v := range cfg.Expanded {
		own = append(own, v)
	}
	return own, nil
}

// options are the relay's options for one session with a server.
func (rt *relaying) options(server string, logger *slog.Logger) proxy.Options {
	cfg := rt.cfg
	srv := cfg.Servers[server]
	if srv == nil {
		srv = policy.DefaultServer()
	}
	redactor := cfg.Redactor().WithOwnSecrets(rt.own)
	// guard's own secrets are masked in what the client reads whatever
	// redact_results says; the user's only when it says so.
	maskResults := redactor.MaskOwnSecrets
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
		MaskOwnSecrets:   redactor.MaskOwnSecrets,
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
