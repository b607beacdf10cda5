package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/config"
	"github.com/guard-mcp/guard/httplimit"
	"github.com/guard-mcp/guard/proxy"
	aggregate "github.com/guard-mcp/guard/proxy/mux"
	"github.com/guard-mcp/guard/proxy/remote"
	"github.com/guard-mcp/guard/proxy/stdio"
	"github.com/guard-mcp/guard/proxy/streamable"
	"github.com/guard-mcp/guard/store"
)

// ServeOptions are guard serve's flags.
type ServeOptions struct {
	Listen      string // --listen: the address of the endpoints
	UI          UIFlags
	SessionIdle time.Duration // --session-idle: how long an unused client session lasts
	Aggregate   bool          // --aggregate: also serve every server at /mcp
}

// Serve is guard serve: the configured servers over Streamable HTTP, at
// /mcp/NAME (and /mcp with o.Aggregate), until ctx ends. It returns the
// status to exit with.
func (m *Main) Serve(ctx context.Context, st *Settings, o ServeOptions) int {
	cfg := st.Config
	logger := m.Logger
	db, err := m.OpenStore(ctx, st)
	if err != nil {
		fmt.Fprintf(m.Stderr, "guard: %v\n", err)
		return ExitFailure
	}
	defer db.Close()
	rt, status, ok := m.startRelaying(st, db, logger,
		o.UI, "guard serve")
	if !ok {
		return status
	}
	defer rt.stop()
	bg, stop := context.WithCancel(context.Background())
	defer stop()

	// Bound first: with port 0 asked, the port taken is what the Host
	// checks, the printed addresses and the lifecycle record need.
	l, err := net.Listen("tcp", o.Listen)
	if err != nil {
		fmt.Fprintf(m.Stderr, "guard serve: %v\n", err)
		return ExitFailure
	}
	defer l.Close()
	listen := l.Addr().String()
	logger.Info("listening", "addr", listen, "metrics", "http://"+listen+"/metrics")
	names := make([]string, 0, len(cfg.Servers))
	for name := range cfg.Servers {
		names = append(names, name)
	}
	sort.Strings(names)
	// /metrics and the endpoints answer only guard's own Host names
	// (DNS rebinding); /metrics needs a client's token where tokens are
	// configured (it names servers and tools). Behind a balancer, the
	// public host is one of them, and allowed_hosts adds more. /healthz
	// and /readyz answer any Host: a balancer's check sends what it
	// likes, and they tell nothing a page could use.
	hosts := append(append(allowedHosts(listen), config.PublicHosts(cfg.PublicURL)...), cfg.AllowedHosts...)
	base := "http://" + listen // what clients use, as printed
	if cfg.PublicURL != "" {
		base = cfg.PublicURL
	}
	front, err := newFrontAuth(cfg, base, logger)
	if err != nil {
		fmt.Fprintf(m.Stderr, "guard serve: %v\n", err)
		return ExitUsage
	}
	if v := front.verifier; v != nil {
		logger.Info("clients need an access token", "issuer", v.Issuer(), "audience", v.Audience(), "scopes", v.Scopes(),
			"static tokens too", front.static != nil)
		go func() {
			if _, err := v.Discover(bg); err == nil {
				logger.Info("identity provider's metadata read", "issuer", v.Issuer())
			}
		}()
	}
	mux := http.NewServeMux()
	rt.health.Routes(mux)
	reg := m.NewMetrics(db)
	healthMetrics(reg, rt.health)
	tracingMetrics(reg, rt.tracing)
	streamMetrics(reg, rt.streamer)
	notifyMetrics(reg, rt.notifier)
	if rt.replicas != nil {
		rt.replicas.metrics(reg)
	}
	mux.Handle("GET /metrics", streamable.CheckHosts(hosts, front.protect(reg.Handler())))
	var fronts []*streamable.Server
	// Every endpoint's sessions count against one bound: each runs a
	// server process.
	sessions := streamable.NewSessionLimit(cfg.MaxSessions.Total, cfg.MaxSessions.PerClient)
	bounds := httplimit.Limits{Header: o.UI.Limits.Header, Body: o.UI.Limits.Body, Conns: httplimit.Conns(4)}
	warnDescriptors(cfg, bounds.Conns, logger)
	sessionOptions := func(name string, log *slog.Logger) func(c streamable.Caller) proxy.Options {
		return func(c streamable.Caller) proxy.Options {
			o := rt.options(name, log)
			o.ClientName = c.Client
			o.Caller = c.User
			o.Recorder = countingRecorder{Recorder: db, reg: reg}
			// A 2026-07-28 client's next round may reach another replica.
			o.Rounds = db.Replicas()
			return o
		}
	}
	endpoint := func(name string, log *slog.Logger) streamable.Options {
		path := "/mcp"
		if name != "" {
			path += "/" + name
		}
		return streamable.Options{
			Name:         name,
			AllowedHosts: hosts,
			Authenticate: front.endpoint(path),
			MaxBody:      cfg.MaxMessage,
			BodyTimeout:  o.UI.Limits.Body,
			Sessions:     sessions,
			SessionIdle:  o.SessionIdle,
			Logger:       log,
			TraceContext: rt.tracing != nil,
		}
	}
	type served struct {
		name string
		run  func(ctx context.Context, c streamable.Caller, conn proxy.Conn) error
	}
	var members []served
	var children []string // servers with a command
	for _, name := range names {
		srv := cfg.Servers[name]
		if len(srv.Command) == 0 && srv.URL == "" {
			logger.Warn("server not served: it has neither a command nor a url", "server", name)
			continue
		}
		log := logger.With("server", name)
		o := endpoint(name, log)
		if len(srv.Command) > 0 {
			o.Child = stdio.Stdio{Argv: srv.Command, Start: rt.iso.start(name, srv), Env: cfg.ServerEnv(m.Environ(), srv), Stderr: m.Stderr}.Serve
			children = append(children, name)
		}
		if srv.URL != "" {
			o.Remote = remoteRun(remote.Remote{URL: srv.URL, Headers: srv.Headers, SSE: srv.Transport == "sse", Client: remote.NewClient(),
				TraceHeaders: rt.tracing != nil},
				front.upstreamAuth(srv.TokenExchange))
		}
		o.Session = sessionOptions(name, log)
		h := streamable.NewServer(o)
		fronts = append(fronts, h)
		mux.Handle("/mcp/"+name, h)
		front.metadata(mux, hosts, "/mcp/"+name, "guard: "+name)
		logger.Info("serving", "server", name, "url", base+"/mcp/"+name)
		members = append(members, served{name, memberRun(o)})
	}
	rt.iso.settle(children, cfg.Servers)
	if (o.Aggregate || cfg.Aggregate.Enabled) && len(members) > 0 {
		for _, mb := range members {
			if strings.Contains(mb.name, cfg.Aggregate.Separator) {
				logger.Warn("a server's name contains the aggregate separator: its tools' names may be read as another server's", "server", mb.name, "separator", cfg.Aggregate.Separator)
			}
		}
		log := logger.With("server", "(aggregate)")
		o := endpoint("", log)
		o.Run = func(ctx context.Context, c streamable.Caller, conn proxy.Conn) error {
			ms := make([]aggregate.Member, len(members))
			for i, mb := range members {
				run := mb.run
				ms[i] = aggregate.Member{Name: mb.name, Run: func(ctx context.Context, conn proxy.Conn) error { return run(ctx, c, conn) }}
			}
			return aggregate.Run(ctx, aggregate.Options{Members: ms, Separator: cfg.Aggregate.Separator,
				Version: m.Version, Logger: log}, conn)
		}
		h := streamable.NewServer(o)
		fronts = append(fronts, h)
		mux.Handle("/mcp", h)
		front.metadata(mux, hosts, "/mcp", "guard: every server")
		logger.Info("serving every server at one endpoint", "url", base+"/mcp", "names", "SERVER"+cfg.Aggregate.Separator+"TOOL")
	}
	if len(fronts) == 0 {
		fmt.Fprintln(m.Stderr, "guard serve: no server to serve: add servers with a command to the configuration (servers: NAME: {command: [...]})")
		return ExitUsage
	}
	go warnDuplicateTools(bg, db, logger)
	serves := make([]string, 0, len(members)+1)
	for _, mb := range members {
		serves = append(serves, "http://"+listen+"/mcp/"+mb.name)
	}
	if (o.Aggregate || cfg.Aggregate.Enabled) && len(members) > 0 {
		serves = append(serves, "http://"+listen+"/mcp")
	}
	rt.started("", serves)
	// Every request's reading is bounded, the endpoints' (which lift the
	// bound for their response streams) and the other routes' alike, and
	// so is the number of connections open at once.
	hs := httplimit.Server(mux, bounds)
	done := make(chan error, 1)
	go func() { done <- hs.Serve(httplimit.Listener(l, bounds)) }()
	select {
	case <-ctx.Done():
	case err := <-done:
		if !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(m.Stderr, "guard serve: %v\n", err)
			return ExitFailure
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	for _, f := range fronts {
		f.Close()
	}
	return ExitOK
}

// sessionDescriptors is about how many descriptors one session of guard
// serve keeps open: its server's stdin and stdout, the process's handle,
// and the connection of a response stream.
const sessionDescriptors = 4

// warnDescriptors says, at start, when max_sessions.total sessions would
// need more descriptors than the process may open beside the
// connections of its front (conns) and UI: sessions past that are then
// refused for want of descriptors, not 503 at max_sessions.
func warnDescriptors(cfg *config.Config, conns int, logger *slog.Logger) {
	limit := httplimit.Conns(1)
	need := cfg.MaxSessions.Total*sessionDescriptors + conns + httplimit.Conns(16)
	if need > limit {
		logger.Warn("max_sessions.total needs more file descriptors than this process may open: sessions past what they allow will not start; raise the limit (ulimit -n) or lower max_sessions.total",
			"max_sessions.total", cfg.MaxSessions.Total, "descriptors needed", need, "limit", limit)
	}
}

// memberRun runs one client session of a server as a member of the
// aggregate endpoint: the same relay session as at /mcp/NAME.
func memberRun(o streamable.Options) func(ctx context.Context, c streamable.Caller, conn proxy.Conn) error {
	return func(ctx context.Context, c streamable.Caller, conn proxy.Conn) error {
		opts := o.Session(c)
		if o.Remote != nil {
			return o.Remote(ctx, opts, c, conn)
		}
		if o.Child == nil {
			return fmt.Errorf("%w: no command", stdio.ErrStart)
		}
		_, err := o.Child(ctx, opts, conn, nil)
		return err
	}
}

// remoteRun is the streamable.Options.Remote of a server reached over HTTP: each
// client session gets an upstream session of its own, whose requests carry
// rm's headers or, with a token exchange (auth), credentials obtained for
// the session's caller c in place of the Authorization they configure.
func remoteRun(rm remote.Remote, auth func(ctx context.Context, c streamable.Caller) (string, error)) func(ctx context.Context, opts proxy.Options, c streamable.Caller, conn proxy.Conn) error {
	return func(ctx context.Context, opts proxy.Options, c streamable.Caller, conn proxy.Conn) error {
		rm := rm
		if auth != nil {
			rm.Authorization = func(ctx context.Context) (string, error) { return auth(ctx, c) }
		}
		return remote.Run(ctx, opts, rm, conn)
	}
}

// warnDuplicateTools warns, once per name, when two servers offer a tool of
// the same name: a client that sees several servers may call the wrong one.
func warnDuplicateTools(ctx context.Context, db *store.DB, logger *slog.Logger) {
	warned := map[string]bool{}
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		if tools, err := db.Catalog().Tools(ctx, ""); err == nil {
			for name, servers := range duplicateTools(tools) {
				if !warned[name] {
					warned[name] = true
					logger.Warn("two servers offer a tool of the same name", "tool", name, "servers", servers)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// duplicateTools maps each tool name offered by more than one server to
// those servers.
func duplicateTools(tools []guard.Tool) map[string][]string {
	by := map[string][]string{}
	for _, t := range tools {
		by[t.Name] = append(by[t.Name], t.Server)
	}
	for name, servers := range by {
		if len(servers) < 2 {
			delete(by, name)
		}
	}
	return by
}
