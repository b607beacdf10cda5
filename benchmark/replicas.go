package benchmark

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/template"
	"time"

	"github.com/guard-mcp/guard/internal/pgtest"
	"github.com/jackc/pgx/v5"
)

// ReplicasConfig says what guard-bench --replicas measures: go-sdk clients,
// each its own session, calling a trivial tool of go-sdk's conformance
// server (one process, guard's HTTP upstream) through guard serve on
// SQLite, through guard serve on PostgreSQL, and through several guard
// serve replicas on one PostgreSQL database behind HAProxy configured as
// docs/haproxy.cfg says (replicas/testdata/haproxy.cfg.tmpl, its
// addresses as placeholders). PostgreSQL is a cluster of the benchmark's own,
// with fsync on: a commit costs what it does in production.
type ReplicasConfig struct {
	Guard string
	Dir   string
	// Fixture is go-sdk's conformance/everything-server.
	Fixture string
	// HAProxy is the haproxy binary; HAProxyConfig the template of its
	// configuration (replicas/testdata/haproxy.cfg.tmpl).
	HAProxy, HAProxyConfig string
	// Replicas is how many replicas run behind HAProxy (default 3).
	Replicas    int
	Calls       int
	Concurrency []int
	Rounds      int
}

// The rows of a replicas run.
const (
	rowSQLite   = "serve, SQLite"
	rowPostgres = "serve, PostgreSQL"
)

func rowReplicas(n int) string { return fmt.Sprintf("%d replicas, HAProxy", n) }

// guardSet is the guard serve processes of a row, and where clients reach
// them.
type guardSet struct {
	url  string
	pids []int
	// On PostgreSQL: the database, and the guards' /metrics.
	db      string
	metrics []string
}

// RunReplicas measures as configured and writes a report to w as it goes.
func RunReplicas(ctx context.Context, cfg ReplicasConfig, w io.Writer) (*Report, error) {
	if cfg.Calls <= 0 {
		cfg.Calls = 3000
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = 3
	}
	if len(cfg.Concurrency) == 0 {
		cfg.Concurrency = []int{16, 64}
	}
	tmpl, err := template.ParseFiles(cfg.HAProxyConfig)
	if err != nil {
		return nil, fmt.Errorf("haproxy configuration: %w", err)
	}
	var procs []*exec.Cmd
	defer func() { stopAll(procs) }()
	start := func(name string, argv []string, env []string) (*exec.Cmd, error) {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), env...)
		log, err := os.Create(filepath.Join(cfg.Dir, strings.ReplaceAll(name, " ", "-")+".log"))
		if err != nil {
			return nil, err
		}
		defer log.Close()
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		procs = append(procs, cmd)
		return cmd, nil
	}
	// The server, over HTTP, shared by every row.
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	upstream := "http://" + addr + "/mcp"
	if _, err := start("fixture", []string{cfg.Fixture, "-http", addr, "-stateless=false"}, nil); err != nil {
		return nil, err
	}
	if err := waitReady(ctx, upstream); err != nil {
		return nil, fmt.Errorf("fixture: %w", err)
	}
	fmt.Fprintln(w, "starting a PostgreSQL cluster of the benchmark's own (fsync on)")
	pg, err := pgtest.New(pgtest.Options{Durable: true, Settings: pgSettings})
	if err != nil {
		return nil, err
	}
	defer pg.Stop()
	meter, err := newPGMeter(ctx, pg)
	if err != nil {
		return nil, err
	}
	defer meter.close(ctx)
	dbURL := func(name string) (string, error) {
		c, err := pgx.Connect(ctx, pg.URL)
		if err != nil {
			return "", err
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
			return "", err
		}
		return strings.Replace(pg.URL, "/postgres?", "/"+name+"?", 1), nil
	}
	writeConfig := func(name, extra string) (string, error) {
		p := filepath.Join(cfg.Dir, name+".yaml")
		body := "durability: full\npolicy: {default: allow}\naudit: {key_file: " + filepath.Join(cfg.Dir, name+".key") + "}\n" + extra +
			"servers:\n  upstream:\n    url: " + upstream + "\n    new_tools: allow\n"
		return p, os.WriteFile(p, []byte(body), 0o600)
	}
	// serve starts a guard serve and returns its MCP and UI addresses.
	serve := func(name, conf, db string) (listen, ui string, pid int, err error) {
		if listen, err = freeAddr(); err != nil {
			return "", "", 0, err
		}
		if ui, err = freeAddr(); err != nil {
			return "", "", 0, err
		}
		cmd, err := start(name, []string{cfg.Guard, "serve", "--config", conf, "--db", db, "--listen", listen, "--ui", ui},
			[]string{"XDG_DATA_HOME=" + filepath.Join(cfg.Dir, name+"-data"), "XDG_CONFIG_HOME=" + filepath.Join(cfg.Dir, name+"-config")})
		if err != nil {
			return "", "", 0, err
		}
		if err := waitReady(ctx, "http://"+listen+"/mcp/upstream"); err != nil {
			return "", "", 0, fmt.Errorf("%s: %w", name, err)
		}
		return listen, ui, cmd.Process.Pid, nil
	}
	sets := map[string]*guardSet{}
	// One guard serve on SQLite, durability full (the default).
	conf, err := writeConfig("sqlite", "")
	if err != nil {
		return nil, err
	}
	listen, _, pid, err := serve("sqlite", conf, filepath.Join(cfg.Dir, "sqlite.db"))
	if err != nil {
		return nil, err
	}
	sets[rowSQLite] = &guardSet{url: "http://" + listen + "/mcp/upstream", pids: []int{pid}}
	// One on PostgreSQL.
	db, err := dbURL("single")
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if conf, err = writeConfig("postgres", ""); err != nil {
		return nil, err
	}
	if listen, _, pid, err = serve("postgres", conf, db); err != nil {
		return nil, err
	}
	sets[rowPostgres] = &guardSet{url: "http://" + listen + "/mcp/upstream", pids: []int{pid}, db: "single", metrics: []string{"http://" + listen + "/metrics"}}
	// Several on one PostgreSQL database, behind HAProxy.
	if db, err = dbURL("replicas"); err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	bind, err := freeAddr()
	if err != nil {
		return nil, err
	}
	if conf, err = writeConfig("replicas", "public_url: http://"+bind+"\n"); err != nil {
		return nil, err
	}
	type backend struct{ Name, MCP, UI string }
	var backends []backend
	rs := &guardSet{url: "http://" + bind + "/mcp/upstream", db: "replicas"}
	for i := range cfg.Replicas {
		name := fmt.Sprintf("r%d", i+1)
		listen, ui, pid, err := serve("replica-"+name, conf, db)
		if err != nil {
			return nil, err
		}
		backends = append(backends, backend{name, listen, ui})
		rs.pids = append(rs.pids, pid)
		rs.metrics = append(rs.metrics, "http://"+listen+"/metrics")
	}
	hcfg := filepath.Join(cfg.Dir, "haproxy.cfg")
	f, err := os.Create(hcfg)
	if err != nil {
		return nil, err
	}
	err = tmpl.Execute(f, map[string]any{"Bind": bind, "PublicHost": bind, "StatsSocket": filepath.Join(cfg.Dir, "haproxy.sock"), "Replicas": backends})
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("haproxy configuration: %w", err)
	}
	if _, err := start("haproxy", []string{cfg.HAProxy, "-f", hcfg, "-db"}, nil); err != nil {
		return nil, err
	}
	if err := waitReady(ctx, rs.url); err != nil {
		return nil, fmt.Errorf("haproxy: %w", err)
	}
	sets[rowReplicas(cfg.Replicas)] = rs

	names := []string{rowSQLite, rowPostgres, rowReplicas(cfg.Replicas)}
	rep := &Report{}
	fmt.Fprintf(w, "cpu/call is guard's (all replicas); with children is PostgreSQL's (every server process of the cluster)\n")
	uses := map[string]*pgUse{}
	err = rep.rounds(w, names, cfg.Concurrency, cfg.Rounds, cfg.Calls, func(i, n, _, calls int) (sample, error) {
		set := sets[names[i]]
		// The cluster's counters are read outside the CPU readings:
		// before guard's first, after the cluster's last.
		var readings []pgReading
		var rerr error
		pgReads := 0
		count := func(after bool) {
			if set.db != "" && rerr == nil {
				var r pgReading
				r, rerr = meter.read(ctx, set.db, set.metrics, after)
				readings = append(readings, r)
			}
		}
		cpu := func() time.Duration {
			if len(readings) == 0 {
				count(false)
			}
			var d time.Duration
			for _, p := range set.pids {
				d += procCPU(p)
			}
			return d
		}
		pgCPU := func() time.Duration {
			d := treeCPU(meter.pid)
			if pgReads++; pgReads == 2 {
				count(true)
			}
			return d
		}
		sm, err := measureClients(ctx, target{name: names[i], url: set.url}, n, calls, cpu, pgCPU)
		if err == nil && rerr != nil {
			err = fmt.Errorf("%s: %w", names[i], rerr)
		}
		if err == nil && len(readings) == 2 {
			key := fmt.Sprintf("%s/%d", names[i], n)
			if uses[key] == nil {
				uses[key] = &pgUse{}
			}
			uses[key].add(readings[0], readings[1], len(sm.lat), sm.elapsed, sm.tree)
		}
		return sm, err
	})
	if err != nil {
		return nil, err
	}
	rep.pgReport(w, names, cfg.Concurrency, uses)
	return rep, nil
}

// stopAll interrupts the processes and waits for them, a few seconds at
// most each.
func stopAll(procs []*exec.Cmd) {
	for i := len(procs) - 1; i >= 0; i-- {
		c := procs[i]
		_ = c.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = c.Process.Kill()
			<-done
		}
	}
}

// freeAddr is a loopback address no one listens on now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
