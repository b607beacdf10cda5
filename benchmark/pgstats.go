package benchmark

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/guard-mcp/guard/internal/pgtest"
	"github.com/guard-mcp/guard/store/postgres"
	"github.com/jackc/pgx/v5"
)

// What the calls of a row on PostgreSQL cost the benchmark's cluster,
// besides its CPU time: the statements each call and each batch of the
// audit log ran (pg_stat_statements, loaded by the cluster's
// shared_preload_libraries), the round trips they took, and how long
// each batch held the audit log's lock (guard's metrics).
//
// Statements are pg_stat_statements' calls of the row's database, and
// each audit batch's BEGIN and COMMIT: pg_stat_statements (PostgreSQL 15)
// counts a utility statement sent as a prepared statement, as pgx sends
// them, once per connection, not each time it runs. Round trips are the
// TCP segments with data that the server received on the connections of
// the row's database (ss -ti, data_segs_in): a client sends its request,
// one or several statements with their Sync, in one write and waits for
// the answer, and on loopback a write up to 64 KB is one segment, so each
// segment is one round trip (a larger request counts more than one).
// Connections opened while the calls run count whole; those closed
// meanwhile are lost (counted as churned). Batches are the audit log's
// transactions: the calls of the statement that inserts records, and
// guard's guard_audit_batch_records.

// pgSettings load pg_stat_statements in the cluster, and have it time
// the planning of statements too.
var pgSettings = []string{"shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track_planning=on"}

// Guard's metrics the benchmark reads (cmd/guard/app/metrics.go).
const (
	metricBatches = "guard_audit_batch_records"
	metricLock    = "guard_audit_lock_held_seconds"
)

// pgMeter reads the counters of the benchmark's cluster, over a
// connection of its own to another database (its statements are not the
// rows') through the cluster's Unix socket (not counted by ss).
type pgMeter struct {
	conn *pgx.Conn
	pid  int // the postmaster
	port int
}

func newPGMeter(ctx context.Context, pg *pgtest.Cluster) (*pgMeter, error) {
	pid, err := pg.Pid()
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	conn, err := pgx.Connect(ctx, fmt.Sprintf("host=%s port=%d user=guard dbname=postgres sslmode=disable", pg.Dir, pg.Port))
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("postgres: pg_stat_statements: %w", err)
	}
	return &pgMeter{conn: conn, pid: pid, port: pg.Port}, nil
}

func (m *pgMeter) close(ctx context.Context) { m.conn.Close(ctx) }

// stmtCount is what pg_stat_statements holds of one statement.
type stmtCount struct {
	query string
	calls int64
	exec  float64 // ms
	plan  float64 // ms
	rows  int64
}

// pgReading is one reading of the counters, for one database.
type pgReading struct {
	stmts map[int64]stmtCount // by queryid
	segs  map[string]int64    // data segments received, by client address
	// The audit writer's figures, summed over the row's guards: batches,
	// records, and the audit lock's time held (s) and holds.
	batches, records, held, holds float64
}

// read reads the counters of database db, and guard's metrics at urls:
// a reading taken before the calls (after false) reads the metrics
// first, one after them reads them last, so that the statements a
// scrape runs count in neither.
func (m *pgMeter) read(ctx context.Context, db string, urls []string, after bool) (pgReading, error) {
	r := pgReading{stmts: map[int64]stmtCount{}}
	metrics := func() error {
		for _, u := range urls {
			ms, err := scrape(ctx, u)
			if err != nil {
				return err
			}
			r.batches += ms[metricBatches+"_count"]
			r.records += ms[metricBatches+"_sum"]
			r.held += ms[metricLock+"_sum"]
			r.holds += ms[metricLock+"_count"]
		}
		return nil
	}
	if !after {
		if err := metrics(); err != nil {
			return r, err
		}
	}
	rows, err := m.conn.Query(ctx, `SELECT s.queryid, s.query, s.calls, s.total_exec_time, s.total_plan_time, s.rows
 FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = $1 AND s.queryid IS NOT NULL`, db)
	if err != nil {
		return r, fmt.Errorf("pg_stat_statements: %w", err)
	}
	for rows.Next() {
		var id int64
		var s stmtCount
		if err := rows.Scan(&id, &s.query, &s.calls, &s.exec, &s.plan, &s.rows); err != nil {
			rows.Close()
			return r, fmt.Errorf("pg_stat_statements: %w", err)
		}
		c := r.stmts[id]
		c.query, c.calls, c.exec, c.plan, c.rows = s.query, c.calls+s.calls, c.exec+s.exec, c.plan+s.plan, c.rows+s.rows
		r.stmts[id] = c
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return r, fmt.Errorf("pg_stat_statements: %w", err)
	}
	var ports []int32
	if err := m.conn.QueryRow(ctx, `SELECT coalesce(array_agg(client_port), '{}') FROM pg_stat_activity WHERE datname = $1 AND client_port > 0`, db).Scan(&ports); err != nil {
		return r, fmt.Errorf("pg_stat_activity: %w", err)
	}
	if r.segs, err = m.segments(ctx, ports); err != nil {
		return r, err
	}
	if after {
		err = metrics()
	}
	return r, err
}

// segments reads, for each connection to the cluster from one of the
// client ports, the data segments the server has received on it.
func (m *pgMeter) segments(ctx context.Context, ports []int32) (map[string]int64, error) {
	out, err := exec.CommandContext(ctx, "ss", "-tinH", "state", "established", "sport", "=", ":"+strconv.Itoa(m.port)).Output()
	if err != nil {
		return nil, fmt.Errorf("ss: %w", err)
	}
	return parseSegments(string(out), ports), nil
}

// parseSegments reads the output of ss -tinH: each connection's line (its
// peer's address last) and then its information's (data_segs_in:N), for
// the connections from the ports.
func parseSegments(out string, ports []int32) map[string]int64 {
	segs := map[string]int64{}
	peer := ""
	for line := range strings.Lines(out) {
		if line == "" || line[0] == ' ' || line[0] == '\t' {
			for _, f := range strings.Fields(line) {
				if v, ok := strings.CutPrefix(f, "data_segs_in:"); ok && peer != "" {
					n, _ := strconv.ParseInt(v, 10, 64)
					segs[peer] += n
				}
			}
			continue
		}
		peer = ""
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		addr := f[len(f)-1]
		i := strings.LastIndexByte(addr, ':')
		p, err := strconv.Atoi(addr[i+1:])
		if i >= 0 && err == nil && slices.Contains(ports, int32(p)) {
			peer = addr
		}
	}
	return segs
}

// scrape reads the plain series (name and value, no labels) of a guard's
// /metrics.
func scrape(ctx context.Context, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics: %s: %v", resp.Status, err)
	}
	ms := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.ContainsAny(name, "{#") {
			continue
		}
		if x, err := strconv.ParseFloat(v, 64); err == nil {
			ms[name] = x
		}
	}
	return ms, nil
}

// pgUse is what a row's calls cost the cluster, summed over its rounds.
type pgUse struct {
	calls   int
	elapsed time.Duration
	cpu     time.Duration
	stmts   map[int64]stmtCount
	// segs are the round trips; churned the connections lost meanwhile.
	segs, churned                 int64
	batches, records, held, holds float64
}

// add adds a round of calls: the difference between the readings a and
// b taken around it, and the cluster's CPU time.
func (u *pgUse) add(a, b pgReading, calls int, elapsed, cpu time.Duration) {
	if u.stmts == nil {
		u.stmts = map[int64]stmtCount{}
	}
	u.calls += calls
	u.elapsed += elapsed
	u.cpu += cpu
	for id, s := range b.stmts {
		c := u.stmts[id]
		c.query = s.query
		c.calls += s.calls - a.stmts[id].calls
		c.exec += s.exec - a.stmts[id].exec
		c.plan += s.plan - a.stmts[id].plan
		c.rows += s.rows - a.stmts[id].rows
		u.stmts[id] = c
	}
	for p, n := range b.segs {
		u.segs += n - a.segs[p]
	}
	for p := range a.segs {
		if _, ok := b.segs[p]; !ok {
			u.churned++
		}
	}
	u.batches += b.batches - a.batches
	u.records += b.records - a.records
	u.held += b.held - a.held
	u.holds += b.holds - a.holds
}

// statements is the statements run, in all: those pg_stat_statements
// counts, but for BEGIN and COMMIT, and a BEGIN and a COMMIT for each
// audit batch.
func (u *pgUse) statements() int64 {
	var n int64
	for _, s := range u.stmts {
		if !txControl(s.query) {
			n += s.calls
		}
	}
	return n + 2*u.recordInserts()
}

// txControl reports whether a statement begins or ends a transaction.
func txControl(query string) bool {
	switch strings.ToUpper(strings.TrimSpace(query)) {
	case "BEGIN", "COMMIT", "ROLLBACK":
		return true
	}
	return false
}

// recordInserts is the calls of the statements that insert records: one
// per audit batch.
func (u *pgUse) recordInserts() int64 {
	var n int64
	for _, s := range u.stmts {
		q := strings.ToLower(strings.TrimSpace(s.query))
		if strings.HasPrefix(q, "insert into records") || strings.HasPrefix(q, "copy records") {
			n += s.calls
		}
	}
	return n
}

// perCall is x per call of the row.
func (u *pgUse) perCall(x float64) float64 { return x / float64(max(u.calls, 1)) }

// auditBatches is the batches the row's guards committed: as their
// metrics count them, else the statements that inserted records.
func (u *pgUse) auditBatches() float64 {
	if u.batches > 0 {
		return u.batches
	}
	return float64(u.recordInserts())
}

// write reports the row's use of the cluster: statements and round trips
// per call and per batch, the lock, and the top statements by calls and by
// time.
func (u *pgUse) write(w io.Writer, name string, callers int) {
	b := u.auditBatches()
	stmts := float64(u.statements())
	fmt.Fprintf(w, "%s, %s: PostgreSQL cpu/call %s; statements/call %.2f, per batch %.1f; round trips/call %.2f, per batch %.1f",
		name, clients(callers), fmtDur(u.cpu/time.Duration(max(u.calls, 1))), u.perCall(stmts), stmts/max(b, 1), u.perCall(float64(u.segs)), float64(u.segs)/max(b, 1))
	if u.churned > 0 {
		fmt.Fprintf(w, " (connections closed meanwhile: %d)", u.churned)
	}
	var exec, plan float64
	for _, s := range u.stmts {
		exec, plan = exec+s.exec, plan+s.plan
	}
	fmt.Fprintf(w, "; executing %.0f µs/call, planning %.0f, under the audit lock %.0f", u.perCall(exec*1000), u.perCall(plan*1000), u.underLock()*1e6)
	fmt.Fprintf(w, "; batches %.0f, %.1f calls and %.1f records each", b, float64(u.calls)/max(b, 1), u.records/max(u.batches, 1))
	if u.holds > 0 {
		hold := u.held / u.holds
		fmt.Fprintf(w, "; audit lock held %s/batch, %.2f of the time", fmtDur(time.Duration(hold*float64(time.Second))), u.held/u.elapsed.Seconds())
	}
	fmt.Fprintln(w)
	top := func(by string, key func(s stmtCount) float64) {
		ss := slices.Collect(func(yield func(stmtCount) bool) {
			for _, s := range u.stmts {
				if s.calls > 0 && !yield(s) {
					return
				}
			}
		})
		slices.SortFunc(ss, func(a, b stmtCount) int { return cmp.Compare(key(b), key(a)) })
		fmt.Fprintf(w, "  top by %s: per call, exec and plan µs per call, rows per call, statement\n", by)
		for _, s := range ss[:min(len(ss), 6)] {
			q := strings.Join(strings.Fields(s.query), " ")
			if len(q) > 90 {
				q = q[:90] + "…"
			}
			fmt.Fprintf(w, "    %6.2f %8.1f %6.1f %7.2f  %s\n", u.perCall(float64(s.calls)), u.perCall(s.exec*1000), u.perCall(s.plan*1000), u.perCall(float64(s.rows)), q)
		}
	}
	top("calls", func(s stmtCount) float64 { return float64(s.calls) })
	top("time", func(s stmtCount) float64 { return s.exec + s.plan })
}

// The targets on PostgreSQL.
const (
	// targetPGCPU is PostgreSQL's CPU per call, one replica, 16 clients.
	targetPGCPU = 300 * time.Microsecond
	// modelCores are the machines the replicas' model is worked out for.
	modelCores8, modelCores32 = 8, 32
)

// pgReport writes what each row on PostgreSQL cost the cluster, the lines
// of its targets, and the replicas' model.
func (rep *Report) pgReport(w io.Writer, names []string, concurrency []int, uses map[string]*pgUse) {
	fmt.Fprintln(w, "\nPostgreSQL (pg_stat_statements; round trips are data segments the server received, ss -ti; batches and the audit lock from guard's /metrics):")
	for _, n := range concurrency {
		for _, name := range names {
			if u := uses[fmt.Sprintf("%s/%d", name, n)]; u != nil {
				u.write(w, name, n)
			}
		}
	}
	fmt.Fprintln(w)
	guardCPU := func(name string, n int) time.Duration {
		return perRound(rep.find(name, n), rep.find(name, n), func(a, _ sample) (time.Duration, bool) { return a.cpuPerCall(), true })
	}
	if u := uses[rowPostgres+"/16"]; u != nil {
		pg := u.cpu / time.Duration(max(u.calls, 1))
		rep.target(w, "PostgreSQL, 1 replica, 16 clients: PostgreSQL CPU/call %s (target ≤ %s): %s; statements/call %.2f, round trips/call %.2f; guard CPU/call %s (on SQLite %s)",
			fmtDur(pg), fmtDur(targetPGCPU), met(pg <= targetPGCPU), u.perCall(float64(u.statements())), u.perCall(float64(u.segs)),
			fmtDur(guardCPU(rowPostgres, 16)), fmtDur(guardCPU(rowSQLite, 16)))
	}
	for _, name := range names[2:] {
		const n = 64
		one, many := rep.find(rowPostgres, n), rep.find(name, n)
		u1, un := uses[rowPostgres+"/64"], uses[name+"/64"]
		if one == nil || many == nil || u1 == nil || un == nil {
			continue
		}
		ratio := perRound(many, one, func(a, b sample) (float64, bool) { return a.perSec() / b.perSec(), true })
		rep.target(w, "%s, %s: calls/s %.2f× one replica's; cpu/call guard %s, PostgreSQL %s (one replica: guard %s, PostgreSQL %s)",
			name, clients(n), ratio, fmtDur(guardCPU(name, n)), fmtDur(un.cpu/time.Duration(max(un.calls, 1))),
			fmtDur(guardCPU(rowPostgres, n)), fmtDur(u1.cpu/time.Duration(max(u1.calls, 1))))
		rep.replicasModel(w, name, guardCPU(name, n), un, uses)
	}
}

// replicasModel works out, from a row's measured costs, the calls per
// second its replicas and PostgreSQL would make on machines with more
// cores (docs/replicas.md, "How far replicas go"). Guard's and
// PostgreSQL's CPU per call scale with the cores: C/(guard + PostgreSQL)
// calls/s on C cores. The audit lock does not: each batch holds it for
// h = a + b×n (n its calls), so the lock allows at most n/(a+b×n)
// calls/s, which tends to 1/b as batches grow, and they grow as the
// lock gets busy (the calls that come while a batch holds it go in the
// next). b is fitted over the rows measured, where the writers wait for
// these two cores while they hold the lock (an upper bound), and
// bounded below by PostgreSQL's own time for the batch's statements under
// the lock (pg_stat_statements: execution and planning, without the lock,
// BEGIN and COMMIT).
func (rep *Report) replicasModel(w io.Writer, name string, guard time.Duration, u *pgUse, uses map[string]*pgUse) {
	var xs, ys []float64 // calls per batch, lock held per batch (s)
	for _, v := range uses {
		if v.holds > 0 {
			xs = append(xs, float64(v.calls)/v.holds)
			ys = append(ys, v.held/v.holds)
		}
	}
	if len(xs) < 2 {
		return // guard has no lock figures (an older binary)
	}
	// PostgreSQL's time under the lock is least inflated by the wait
	// for the cores in the row that waited least.
	floor := u.underLock()
	for _, v := range uses {
		if v.holds > 0 && v.underLock() > 0 {
			floor = min(floor, v.underLock())
		}
	}
	a, b := fitLine(xs, ys)
	b = max(b, floor)
	perCall := guard + u.cpu/time.Duration(max(u.calls, 1))
	us := func(s float64) string { return fmtDur(time.Duration(s * float64(time.Second))) }
	fmt.Fprintf(w, "model of %s: CPU/call %s (guard and PostgreSQL); audit lock held a + b×n per batch of n calls: a = %s, b = %s fitted over %d rows, b ≥ %s (PostgreSQL's time under the lock, least of the rows)\n",
		name, fmtDur(perCall), us(a), us(b), len(xs), us(floor))
	for _, c := range []int{modelCores8, modelCores32} {
		cpu := float64(c) / perCall.Seconds()
		hi, lo := 1/floor, 1/b
		binds := "CPU binds"
		switch {
		case hi < cpu:
			binds = fmt.Sprintf("the audit lock binds: without its work per call, %.1f× as many", cpu/hi)
		case lo < cpu:
			binds = "the audit lock may bind"
		}
		rep.target(w, "model, %s on %d cores: %.0f calls/s by CPU, %.0f to %.0f by the audit lock: %s", name, c, cpu, lo, hi, binds)
	}
}

// underLock is PostgreSQL's time per call for the audit batches'
// statements under the lock (in s), but for the lock, BEGIN and COMMIT,
// which a batch runs once whatever its calls, and the call index's
// writers' statements, which run after the batch, outside the lock
// (they carry postgres.OutsideLock).
func (u *pgUse) underLock() float64 {
	var ms float64
	for _, s := range u.stmts {
		if txControl(s.query) || strings.Contains(strings.ToUpper(s.query), "PG_ADVISORY_XACT_LOCK") ||
			strings.Contains(s.query, postgres.OutsideLock) {
			continue
		}
		ms += s.exec + s.plan
	}
	return u.perCall(ms) / 1000
}

// fitLine fits y = a + b×x by least squares; with fewer than two distinct
// x it is the mean of y over x.
func fitLine(xs, ys []float64) (a, b float64) {
	n := float64(len(xs))
	if n == 0 {
		return 0, 0
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx, sy, sxx, sxy = sx+xs[i], sy+ys[i], sxx+xs[i]*xs[i], sxy+xs[i]*ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0, sy / sx
	}
	b = (n*sxy - sx*sy) / d
	return (sy - b*sx) / n, b
}
