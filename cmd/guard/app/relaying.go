package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/approvals"
	"github.com/guard-mcp/guard/audit"
	"github.com/guard-mcp/guard/config"
	"github.com/guard-mcp/guard/config/read"
	"github.com/guard-mcp/guard/health"
	"github.com/guard-mcp/guard/httplimit"
	"github.com/guard-mcp/guard/internal/footprint"
	"github.com/guard-mcp/guard/notify"
	"github.com/guard-mcp/guard/policy"
	"github.com/guard-mcp/guard/proxy"
	"github.com/guard-mcp/guard/store"
	"github.com/guard-mcp/guard/stream"
	"github.com/guard-mcp/guard/telemetry"
	"github.com/guard-mcp/guard/web"
	"go.opentelemetry.io/otel/trace"
)

// relaying is what a process that relays sessions (guard run, guard serve)
// runs beside them: the policy, reloaded when its files change; the holds;
// and the approval UI, served or taken over.
type relaying struct {
	cfg       *config.Config
	db        *store.DB
	engine    *config.Engine
	holds     *approvals.Manager
	contracts *policy.Contracts                            // compiled schemas, shared by the sessions
	scan      func(server string, def []byte) []guard.Flag // shared by the sessions
	iso       *isolation                                   // how stdio servers are started
	// configDir is the configuration's directory, and configDirID its
	// identity when the process started (see configDirReplaced).
	configDir   string
	configDirID dirIdentity
	// own are guard's own secrets, by value: masked in every record and
	// in every result a client reads.
	own []string
	// streamer streams the audit log when audit.stream is configured.
	streamer *stream.Streamer
	// notifier announces new holds when notify: is configured.
	notifier *notify.Notifier
	stop     func()
	// process is the command ("guard run"); running, once started has
	// recorded its start, is recorded as stopped by stop.
	process string
	version string // guard's (Main.Version)
	running *store.Lifecycle
	logger  *slog.Logger
	// stateKey signs guard's own requestState in every session: derived
	// from the log's checkpoint key, the same in every replica.
	stateKey []byte
	// replicas beats in the database for this process, withdraws the
	// holds of processes that are gone and, in PostgreSQL mode, compares
	// this process's configuration with the other replicas'.
	replicas *replicaWatch
	// listings tells the sessions when a tool's review or the policy
	// changed (see watchListings).
	listings *proxy.Beacon
	// health answers /healthz and /readyz on guard serve's listener and
	// the UI's, and probes the audit log while it cannot be written.
	health *health.Checker
	// tracing exports the sessions' traces where telemetry: says (nil:
	// off); postgres says the records carry their chain hash at commit.
	tracing  *telemetry.Tracing
	postgres bool
}

// tracer is the sessions' tracer: nil (an interface holding nothing)
// when tracing is off.
func (rt *relaying) tracer() trace.Tracer {
	if rt.tracing == nil {
		return nil
	}
	return rt.tracing.Tracer()
}

// started records, in the audit log, that the process started and what it
// serves; stop records that it stopped.
func (rt *relaying) started(server string, serves []string) {
	l := store.Lifecycle{Event: store.LifecycleStarted, Process: rt.process, Version: rt.version, Server: server, Serves: serves,
		Reason: rt.process + " started"}
	recordLifecycle(rt.db, rt.logger, l)
	rt.running = &l
}

// recordLifecycle records a process, or its UI, starting or stopping. A
// record that cannot be written is logged: the calls that follow are
// refused on their own when the log cannot take them.
func recordLifecycle(db *store.DB, logger *slog.Logger, l store.Lifecycle) {
	if err := db.Operations().RecordLifecycle(l); err != nil {
		logger.Error("audit: the record of guard "+l.Event+" could not be written", "process", l.Process, "err", err)
	}
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

// UIFlags say whether and where a relaying process serves the approval
// UI, and what a browser's request may take.
type UIFlags struct {
	Addr   string // --ui (or GUARD_UI): the address, instead of ui.listen
	Off    bool   // --no-ui
	Limits httplimit.Limits
	// AddrFrom names where Addr came from, for errors: "--ui" (when
	// ""), or the variable.
	AddrFrom string
}

// startRelaying starts it, or says why not and returns the status to exit
// with (2 for a bad configuration or UI address).
func (m *Main) startRelaying(st *Settings, db *store.DB, logger *slog.Logger, ui UIFlags, cmd string) (*relaying, int, bool) {
	cfg := st.Config
	listen := cfg.UI.Listen
	if ui.Addr != "" {
		listen = ui.Addr
		if !cfg.UI.AllowRemote && !read.LoopbackAddr(listen) {
			from := ui.AddrFrom
			if from == "" {
				from = "--ui"
			}
			fmt.Fprintf(m.Stderr, "%s: %s %s is reachable from other machines; use a loopback address, or set ui.allow_remote: true\n", cmd, from, listen)
			return nil, ExitUsage, false
		}
	}
	rt := &relaying{cfg: cfg, db: db, iso: m.newIsolation(st, m.Logger, true), process: cmd, version: m.Version, logger: logger, postgres: st.Postgres}
	rt.iso.probeAtStart()
	if need := cfg.NeedVerified(); len(need) > 0 && cfg.UI.OIDC.Issuer == "" && cfg.UI.Passkey != web.PasskeyRequired {
		for _, e := range need {
			logger.Warn("approvals need verified identities, and neither ui.oidc nor ui.passkey is configured: the calls held there can only expire", "where", e.Error())
		}
	}
	rt.configDir, _ = config.Dirs(m.Getenv)
	if st.ConfigPath != "" {
		rt.configDir = filepath.Dir(st.ConfigPath)
	}
	var err error
	if rt.configDirID, err = identify(rt.configDir); err != nil {
		logger.Warn("cannot tell later whether the configuration's directory was replaced", "err", err)
	}
	eo := policy.EngineOptions{
		RulesDir: st.RulesDir, Protected: st.protected(), Getenv: m.Getenv, Logger: logger, Limiter: db,
		Gate: db.Configs(), Isolated: rt.isolated, Record: recordConfig(db, cmd),
	}
	if st.Postgres {
		eo.Learned = learnedRules{db: db, getenv: m.Getenv}
	}
	engine, err := config.NewEngine(st.ConfigPath, cfg, eo)
	if err != nil {
		fmt.Fprintf(m.Stderr, "guard: %v\n", err)
		if errors.Is(err, guard.ErrAuditWrite) {
			return nil, ExitFailure, false
		}
		return nil, ExitUsage, false
	}
	if k, err := audit.DerivedSecret(st.KeyPath(), "guard: the requestState of guard's own input requests"); err == nil {
		rt.stateKey = []byte(k)
	} else {
		logger.Warn("each session signs guard's own requestState with a key of its own: a later round that reaches another replica is refused", "err", err)
	}
	own, err := ownSecrets(st, cfg, db)
	if err != nil {
		fmt.Fprintf(m.Stderr, "guard: %v\n", err)
		return nil, ExitFailure, false
	}
	if len(cfg.Audit.Stream) > 0 {
		rt.streamer, err = stream.New(stream.Options{Log: db.Streams(), Receivers: cfg.Audit.Stream, Logger: logger.With("component", "stream")})
		if err != nil {
			fmt.Fprintf(m.Stderr, "guard: %v\n", err)
			return nil, ExitUsage, false
		}
	}
	if cfg.Telemetry.On() {
		rt.tracing, err = telemetry.New(cfg.Telemetry, telemetry.Options{Logger: logger.With("component", "telemetry"), Getenv: m.Getenv, Version: m.Version})
		if err != nil {
			fmt.Fprintf(m.Stderr, "guard: %v\n", err)
			return nil, ExitUsage, false
		}
	}
	if len(cfg.Notify) > 0 {
		rt.notifier, err = notify.New(context.Background(), notify.Options{Store: db, Receivers: cfg.Notify,
			BaseURL: uiBase(cfg.PublicURL, listen), Logger: logger.With("component", "notify")})
		if err != nil {
			fmt.Fprintf(m.Stderr, "guard: %v\n", err)
			return nil, ExitUsage, false
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	bg.Go(func() { engine.Watch(ctx, reloadEvery) })
	rt.replicas = newReplicaWatch(db, cmd, m.Version, beatEvery(m.Getenv, logger), st.Postgres, func() (string, string) {
		return policy.ContentDigest(st.ConfigPath, engine.Config()), engine.Policy().Version()
	}, logger)
	// The first beat comes before the first hold, which names this
	// process: no one takes the process for gone meanwhile. A process
	// that cannot say it runs names none on its holds, which no one then
	// withdraws for it.
	rt.replicas.beat(ctx)
	process := rt.replicas.me.ID
	if !rt.replicas.healthy {
		process = ""
	}
	// The one process on the database that holds the stream's lease
	// streams. It stops last, after the record that this process stopped:
	// it delivers what it can for a moment and lets another take over.
	streamCtx, stopStream := context.WithCancel(context.Background())
	var streaming sync.WaitGroup
	if rt.streamer != nil {
		streaming.Go(func() { rt.streamer.Run(streamCtx) })
	}
	// The one process on the database that holds the lease "notify"
	// announces new holds.
	if rt.notifier != nil {
		bg.Go(func() { rt.notifier.Run(ctx) })
	}
	rt.health = NewHealth(db, cmd, m.Version, logger)
	bg.Go(func() { rt.health.Run(ctx) })
	// A hold keeps how whoever decides must have been verified, as the
	// configuration in force when the call is held says.
	holds := approvals.New(db.Holds(), approvals.Options{Timeout: cfg.Approval.Timeout, Wait: cfg.Approval.Wait, Scope: cfg.Approval.Scope,
		Process: process, Logger: logger, RequiredVia: func() string { return engine.Config().RequiredVia() }})
	// Every relaying process withdraws the holds of processes that are
	// gone, at start and after each beat.
	rt.replicas.holds = holds
	bg.Go(func() { rt.replicas.run(ctx) })
	if !ui.Off {
		// The process goes on once its UI serves, or another's does:
		// guard ui url then finds it as soon as the process answers.
		tried := make(chan struct{})
		bg.Go(func() { m.serveUI(ctx, st, db, holds, engine, rt.health, listen, ui.Limits, tried, logger) })
		<-tried
	}
	rt.listings = &proxy.Beacon{}
	bg.Go(func() { watchListings(ctx, db, engine, rt.listings, logger) })
	// Every relaying process takes part in verifying the log on schedule;
	// the database has one of them verify per period (store.VerifyIfDue).
	bg.Go(func() { db.Verifier().RunVerifier(ctx, cfg.Audit.VerifyEvery, nil) })
	// And in removing the bodies of records past audit.retention, at start
	// and then hourly, one process at a time (store.PruneIfDue).
	bg.Go(func() { db.Pruning().RunRetention(ctx, st.RetentionOptions(), store.RetentionEvery, nil) })
	// Once started, and at the first moment nothing is appended to the
	// log (no session is busy), what start-up alone made resident goes
	// back to the system: the process idles with its working set.
	bg.Go(func() { footprint.WhenQuiet(ctx, quietEvery, db.Writing().Writes, logger) })
	rt.engine, rt.holds, rt.own = engine, holds, own
	rt.stop = func() {
		cancel()
		bg.Wait() // the UI records that it stopped
		if rt.running != nil {
			l := *rt.running
			l.Event, l.Reason = store.LifecycleStopped, rt.process+" stopped"
			recordLifecycle(db, logger, l)
		}
		stopStream()
		streaming.Wait()
		if rt.tracing != nil {
			// The spans still queued get a moment to leave.
			ctx, cancel := context.WithTimeout(context.Background(), tracingGrace)
			if err := rt.tracing.Shutdown(ctx); err != nil {
				logger.Warn("spans not sent at stop", "err", err)
			}
			cancel()
		}
	}
	rt.contracts = policy.NewContracts(cfg.AssertFormats)
	rt.scan = toolScanner(ctx, db, logger)
	return rt, 0, true
}

// NewHealth is the readiness of a process on db (guard of version): ready while the audit
// log can be written, each recovery recorded as a lifecycle record of
// process's.
func NewHealth(db *store.DB, process, version string, logger *slog.Logger) *health.Checker {
	o := health.Options{Log: db.Writing(), Logger: logger.With("component", "health"),
		Recovered: func(_ context.Context, since time.Time, cause string) error {
			return db.Operations().RecordLifecycle(store.Lifecycle{Event: store.LifecycleRecovered, Process: process, Version: version,
				Reason: fmt.Sprintf("the audit log can be written again; it could not since %s: %s", since.UTC().Format(time.RFC3339), cause)})
		}}
	// The integrity alerts the store keeps show in /readyz's body and
	// never make it 503.
	o.Alerts = alertTexts{db.Integrity()}
	return health.New(o)
}

// alertTexts are the store's integrity alerts as /readyz counts them.
type alertTexts struct{ integrity store.Integrity }

// Alerts lists, in words, the alerts no one has acknowledged and the
// records this process found without a valid MAC.
func (a alertTexts) Alerts(ctx context.Context) ([]string, error) {
	alerts, err := a.integrity.Alerts(ctx)
	texts := make([]string, len(alerts), len(alerts)+1)
	for i, al := range alerts {
		texts[i] = al.Text
	}
	return append(texts, a.integrity.UnauthenticatedRecords()...), err
}

// recordConfig records each configuration a process's engine loads, in the
// audit log (a config record with the files' digest).
func recordConfig(db *store.DB, process string) func(policy.ConfigLoad) error {
	return func(l policy.ConfigLoad) error {
		return db.Operations().RecordConfig(store.ConfigLoad{Digest: l.Digest, Policy: l.Policy, How: l.How, Reason: l.Reason,
			Changes: l.Changes, Process: process})
	}
}

// isolated reports whether no server can have written guard's
// configuration: isolation is in force for every server this process
// started or is configured to start, no other guard process on this
// machine runs one without it, and the configuration's directory is
// still the one this process started with. Then a changed configuration
// applies by itself; otherwise one that alters decisions waits for a
// person.
func (rt *relaying) isolated() bool {
	return rt.iso.settled.Load() && rt.everyServerIsolated() && !rt.iso.othersExposed() && !rt.configDirReplaced()
}

// ownSecrets lists the values of guard's own secrets: the UI's login token
// (made now when it does not exist yet, so that it is known before the
// first session), the checkpoint key in every form it may be written in,
// and the values of the variables the configuration expanded.
func ownSecrets(st *Settings, cfg *config.Config, db *store.DB) ([]string, error) {
	tok, err := st.uiToken()
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
		MaxRequest:       int(cfg.MaxRequest),
		Recorder:         rt.db,
		Catalog:          rt.db.Catalog(),
		Decider:          rt.engine,
		Holds:            rt.holds,
		Redactor:         redactor,
		MaskResults:      maskResults,
		MaskOwnSecrets:   redactor.MaskOwnSecrets,
		Contracts:        rt.contracts,
		IgnoreBadSchemas: srv.BadSchema == "ignore",
		ScanTool:         rt.scan,
		AcceptNewTools:   srv.NewTools == "allow",
		Listing:          func() string { return rt.engine.Config().Listing(server) },
		HideDenied:       func() bool { return rt.engine.Config().Policy.HideDenied },
		Watch:            rt.listings,
		OutputWarn:       srv.Output == "warn",
		MaxPending:       cfg.Approval.MaxPending,
		InBand:           cfg.Approval.InBand == "auto",
		StateKey:         rt.stateKey,
		Logger:           logger,
		ApprovalTimeout:  cfg.Approval.Timeout,
		ApprovalWait:     cfg.Approval.Wait,
		Tracer:           rt.tracer(),
		HashAtCommit:     rt.postgres,
	}
}

// listingsEvery is how often a relaying process looks for a review made by
// any process on the database, or a policy reloaded: what its sessions'
// listings show changes within about that time.
const listingsEvery = time.Second

// watchListings fires beacon whenever a tool's review changed anywhere on
// the database (a person in the UI, the command line, another replica) or
// the policy in force changed, until ctx ends: each session then tells its
// client when its listing would show something else. On PostgreSQL a
// review's notification wakes it at once.
func watchListings(ctx context.Context, db *store.DB, engine *config.Engine, beacon *proxy.Beacon, logger *slog.Logger) {
	changes := db.Changes(ctx)
	t := time.NewTicker(listingsEvery)
	defer t.Stop()
	last, failing := "", false
	for {
		stamp, err := db.Catalog().ReviewsStamp(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			logger.Warn("tool reviews not read: sessions are not told of changes to their listings until they are", "err", err)
			failing = true
		case err == nil:
			failing = false
			// A reload makes a new configuration (review.listing
			// and policy.hide_denied are not in the policy's
			// version).
			if stamp += fmt.Sprintf(" %s %p", engine.Policy().Version(), engine.Config()); stamp != last {
				if last != "" {
					beacon.Fire()
				}
				last = stamp
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-changes:
		}
	}
}

// tracingGrace bounds how long a stopping process sends the spans still
// queued.
const tracingGrace = 5 * time.Second

// quietEvery is how long nothing is appended to the log before a relaying
// process gives back what its start-up made resident (footprint.WhenQuiet).
const quietEvery = time.Second

// reloadEvery is how often a running process looks for configuration changes.
const reloadEvery = time.Second
