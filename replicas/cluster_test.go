package replicas

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/e2e/guardtest"
	"github.com/guard-mcp/guard/internal/pgtest"
	"github.com/guard-mcp/guard/store"
)

var guardBin string

func TestMain(m *testing.M) {
	guardtest.Main(m, "../cmd/guard", &guardBin)
}

// database returns the --db value the replicas of a test share, and what
// their environment needs besides, for the engine GUARD_TEST_DB names:
// by default one SQLite file in dir (several processes on one machine
// share it); with "postgres", a new database in the tests' PostgreSQL
// cluster, each replica with a data directory of its own (its UI token)
// and the one checkpoint key of the configuration (audit.key_file).
func database(t *testing.T, dir string) (db string, environ []string) {
	t.Helper()
	if pgtest.Postgres() {
		return pgtest.Database(t), nil
	}
	return filepath.Join(dir, "data", "guard.db"), nil
}

// haproxyBin is Debian's haproxy, which scripts/test installs.
func haproxyBin(t *testing.T) string {
	return guardtest.Peer(t, "GUARD_TEST_HAPROXY", "/usr/sbin/haproxy")
}

// cluster is guard serve run as several replicas on one database and
// configuration, behind HAProxy.
type cluster struct {
	t        *testing.T
	dir      string
	cfg      string   // the configuration file
	db       string   // the --db value
	environ  []string // added to every guard's environment
	public   string   // public_url: the balancer, http://127.0.0.1:PORT
	replicas []*replica
	haproxy  *haproxy

	mu       sync.Mutex
	sessions []*mcp.ClientSession // the clients' sessions
}

// replica is one guard serve of a cluster.
type replica struct {
	name  string
	cfg   string // its configuration, when not the cluster's
	ui    string // --ui address
	serve *guardtest.Serve
	log   string // its stderr
}

// url is the replica's own endpoint of a server, reached without the
// balancer.
func (r *replica) url(server string) string { return "http://" + r.serve.Addr + "/mcp/" + server }

// newCluster starts n replicas of guard serve on config (public_url, the
// balancer's address, is added to it) and HAProxy in front of them, and
// returns once the balancer sees every replica up. Everything stops at
// the test's end.
func newCluster(t *testing.T, n int, config string) *cluster {
	t.Helper()
	return newClusterOn(t, n, config, "")
}

// newClusterOn is newCluster on the database db ("": the one database
// gives).
func newClusterOn(t *testing.T, n int, config, db string) *cluster {
	t.Helper()
	dir := t.TempDir()
	c := &cluster{t: t, dir: dir, cfg: filepath.Join(dir, "guard.yaml")}
	// The balancer's socket is made now and handed to HAProxy as it is:
	// a port only chosen now and bound later could be taken meanwhile
	// (by a connection's local port, say) while the replicas start.
	front, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer front.Close() // HAProxy has its own copy
	bind := front.Addr().String()
	c.public = "http://" + bind
	if c.db = db; db == "" {
		c.db, c.environ = database(t, dir)
	}
	if pgtest.Postgres() {
		// One key for every replica, as a team deploys it.
		config = "audit: {key_file: " + filepath.Join(dir, "audit.key") + "}\n" + config
	}
	if err := os.WriteFile(c.cfg, []byte("public_url: "+c.public+"\n"+config), 0o600); err != nil {
		t.Fatal(err)
	}
	// The first creates the database; the others open it.
	for i := range n {
		r := &replica{name: fmt.Sprintf("r%d", i+1), ui: guardtest.FreePort(t)}
		c.start(r, "")
		c.replicas = append(c.replicas, r)
	}
	c.haproxy = startHAProxy(t, front.(*net.TCPListener), c.replicas)
	t.Cleanup(func() {
		if t.Failed() {
			for _, r := range c.replicas {
				t.Logf("guard serve %s (%s):\n%s", r.name, r.serve.Addr, tail(r.log, 40))
			}
			t.Logf("haproxy:\n%s", tail(c.haproxy.log, 60))
		}
	})
	return c
}

// start starts replica r's guard serve, listening on addr (a free port
// when ""), its output appended to its log.
func (c *cluster) start(r *replica, addr string) {
	c.t.Helper()
	r.log = filepath.Join(c.dir, r.name+".log")
	cfg := c.cfg
	if r.cfg != "" {
		cfg = r.cfg
	}
	environ := c.environ
	if pgtest.Postgres() {
		// Each replica has its own machine's data directory.
		environ = append(slices.Clip(environ), "XDG_DATA_HOME="+filepath.Join(c.dir, r.name+"-data"))
	}
	r.serve = guardtest.StartServe(c.t, addr, guardBin, environ, logFile(c.t, r.log),
		"serve", "--config", cfg, "--db", c.db, "--ui", r.ui)
}

// restart starts again a replica that stopped, on the same addresses, as
// a service manager would.
func (c *cluster) restart(r *replica) {
	c.t.Helper()
	c.start(r, r.serve.Addr)
}

// stop stops the clients, the balancer and every replica, the replicas
// as a person would (an interrupt): each ends its sessions and writes
// what it holds of the audit log.
func (c *cluster) stop() {
	c.t.Helper()
	// The clients and the balancer go first: a replica waits a while for
	// the streams still open to end.
	c.mu.Lock()
	for _, cs := range c.sessions {
		cs.Close()
	}
	c.mu.Unlock()
	c.haproxy.stop()
	errs := make([]error, len(c.replicas))
	var wg sync.WaitGroup
	for i, r := range c.replicas {
		if r.serve.Ended() { // stopped or killed by the test
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = r.serve.Stop() }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			c.t.Errorf("guard serve %s: %v", c.replicas[i].name, err)
		}
	}
}

// url is a server's endpoint through the balancer.
func (c *cluster) url(server string) string { return c.public + "/mcp/" + server }

// guard runs a guard subcommand on the cluster's configuration and
// database, and returns its output and exit status.
func (c *cluster) guard(args ...string) (string, int) {
	c.t.Helper()
	cmd := exec.Command(guardBin, guardtest.Args(c.cfg, c.db, args...)...)
	if c.environ != nil {
		cmd.Env = append(os.Environ(), c.environ...)
	}
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	} else if err != nil {
		c.t.Fatal(err)
	}
	return string(out), 0
}

// records returns every record of the audit log, oldest first, read
// with the store package from the shared database.
func (c *cluster) records() []*guard.Record {
	c.t.Helper()
	ctx := context.Background()
	db, err := store.OpenReadOnly(ctx, store.Options{Path: c.db})
	if err != nil {
		c.t.Fatalf("opening the audit log: %v", err)
	}
	defer db.Close()
	var recs []*guard.Record
	if err := db.Reader().Records(ctx, func(r *guard.Record) error {
		recs = append(recs, r)
		return nil
	}); err != nil {
		c.t.Fatalf("reading the audit log: %v", err)
	}
	return recs
}

// waitRecords waits until found is true of the audit log, or fails after
// 20s saying what it waited for.
func (c *cluster) waitRecords(what string, found func([]*guard.Record) bool) []*guard.Record {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		recs := c.records()
		if found(recs) {
			return recs
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the audit log never showed %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pending waits for a held call of tool and returns its approval.
func (c *cluster) pending(tool string) *guard.Approval {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, code := c.guard("approvals", "list", "--format", "jsonl")
		if code != 0 {
			c.t.Fatalf("guard approvals list: %s", out)
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var a guard.Approval
			if line != "" && json.Unmarshal([]byte(line), &a) == nil && a.Tool == tool && a.State == guard.ApprovalPending {
				return &a
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no call of %s was held", tool)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stopAndVerify stops the replicas, then runs guard audit verify and
// fails unless it passes.
func (c *cluster) stopAndVerify() string {
	c.t.Helper()
	c.stop()
	out, code := c.guard("audit", "verify")
	if code != 0 || !strings.HasPrefix(out, "ok") {
		c.t.Fatalf("guard audit verify: %d %s", code, out)
	}
	return out
}

// connect opens an MCP session (go-sdk client, Streamable HTTP) of
// protocol revision version at url; it is closed when the replicas stop,
// or at the test's end.
func (c *cluster) connect(ctx context.Context, url, name, version string) *mcp.ClientSession {
	c.t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: name, Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		c.t.Fatalf("%s: connecting to %s: %v", name, url, err)
	}
	c.mu.Lock()
	c.sessions = append(c.sessions, cs)
	c.mu.Unlock()
	c.t.Cleanup(func() { cs.Close() })
	return cs
}

// text is the text of a result's first content, "" when it has none.
func text(r *mcp.CallToolResult) string {
	if r == nil || len(r.Content) == 0 {
		return ""
	}
	if tc, ok := r.Content[0].(*mcp.TextContent); ok {
		return tc.Text
	}
	return ""
}

// haproxy is an HAProxy process of a test, run in the foreground.
type haproxy struct {
	cfg    string
	socket string
	log    string // its output
	cmd    *exec.Cmd
	exited chan error
	once   sync.Once
}

// stop stops HAProxy (its connections to clients and replicas close), and
// waits for it.
func (h *haproxy) stop() {
	h.once.Do(func() {
		_ = h.cmd.Process.Signal(os.Interrupt)
		select {
		case <-h.exited:
		case <-time.After(10 * time.Second):
			_ = h.cmd.Process.Kill()
			<-h.exited
		}
	})
}

// balancerConfig is what testdata/haproxy.cfg.tmpl (docs/haproxy.cfg
// with its addresses as placeholders) is filled in with.
type balancerConfig struct {
	Bind        string
	PublicHost  string
	StatsSocket string
	Secure      bool // the UI's cookie: HAProxy terminates TLS
	Replicas    []balancedReplica
}

// haproxyTemplate is the HAProxy configuration of the tests.
func haproxyTemplate(t *testing.T) *template.Template {
	t.Helper()
	tmpl, err := template.ParseFiles(filepath.Join(guardtest.RepoRoot(), "replicas", "testdata", "haproxy.cfg.tmpl"))
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

type balancedReplica struct{ Name, MCP, UI string }

// startHAProxy runs HAProxy with docs/haproxy.cfg, its addresses those of
// the test, on the socket of front (passed to it as its fd 3) in front of
// replicas, and returns once it sees every replica up.
func startHAProxy(t *testing.T, front *net.TCPListener, replicas []*replica) *haproxy {
	t.Helper()
	tmpl := haproxyTemplate(t)
	dir := t.TempDir()
	sock, err := front.File()
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	bind := front.Addr().String()
	bc := balancerConfig{Bind: "fd@3", PublicHost: bind, StatsSocket: filepath.Join(dir, "admin.sock")}
	for _, r := range replicas {
		bc.Replicas = append(bc.Replicas, balancedReplica{Name: r.name, MCP: r.serve.Addr, UI: r.ui})
	}
	var cfg bytes.Buffer
	if err := tmpl.Execute(&cfg, bc); err != nil {
		t.Fatal(err)
	}
	h := &haproxy{cfg: filepath.Join(dir, "haproxy.cfg"), socket: bc.StatsSocket, log: filepath.Join(dir, "haproxy.log"), exited: make(chan error, 1)}
	if err := os.WriteFile(h.cfg, cfg.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	h.cmd = exec.Command(haproxyBin(t), "-f", h.cfg, "-db")
	h.cmd.ExtraFiles = []*os.File{sock}
	out := logFile(t, h.log)
	h.cmd.Stdout, h.cmd.Stderr = out, out
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { h.exited <- h.cmd.Wait() }()
	t.Cleanup(h.stop)
	for _, r := range replicas {
		h.waitState(t, "guard_mcp", r.name, "UP")
		h.waitState(t, "guard_ui", r.name, "UP")
	}
	return h
}

// stat returns HAProxy's statistics of every server of its backends, by
// "backend/server", each by column (status: UP, DOWN...; stot: the
// sessions it served), from its admin socket.
func (h *haproxy) stat() (map[string]map[string]string, error) {
	lines, err := h.command("show stat")
	if err != nil {
		return nil, err
	}
	var cols []string
	got := map[string]map[string]string{}
	for _, line := range lines {
		if strings.HasPrefix(line, "# ") {
			cols = strings.Split(strings.TrimPrefix(line, "# "), ",")
			continue
		}
		f := strings.Split(line, ",")
		if len(cols) == 0 || len(f) < len(cols) {
			continue
		}
		row := map[string]string{}
		for i, c := range cols {
			row[c] = f[i]
		}
		got[row["pxname"]+"/"+row["svname"]] = row
	}
	return got, nil
}

// sticky returns HAProxy's stick table of the MCP backend: the replica
// each session id was learned from, by session id.
func (h *haproxy) sticky() (map[string]string, error) {
	lines, err := h.command("show table guard_mcp")
	if err != nil {
		return nil, err
	}
	got := map[string]string{}
	for _, line := range lines {
		var key, server string
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "key="); ok {
				key = v
			}
			if v, ok := strings.CutPrefix(f, "server_key="); ok {
				server = v
			}
		}
		if key != "" {
			got[key] = server
		}
	}
	return got, nil
}

// command runs a command on HAProxy's admin socket and returns the lines
// of its answer.
func (h *haproxy) command(cmd string) ([]string, error) {
	conn, err := net.DialTimeout("unix", h.socket, time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte(cmd + "\n")); err != nil {
		return nil, err
	}
	var lines []string
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines, sc.Err()
}

// waitState waits until HAProxy reports a backend's server in state
// (UP, DOWN), or fails after 20s.
func (h *haproxy) waitState(t *testing.T, backend, server, state string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := h.stat()
		if err == nil && strings.HasPrefix(st[backend+"/"+server]["status"], state) {
			return
		}
		select {
		case err := <-h.exited:
			h.exited <- err
			t.Fatalf("haproxy exited: %v\n%s", err, tail(h.log, 60))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("haproxy never saw %s/%s %s: %v %v", backend, server, state, st, err)
		}
	}
}

// logFile creates the file a process's output goes to, closed at the
// test's end.
func logFile(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// tail is the last n lines of the file at path.
func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// request sends a request with the given Host and Origin (none when "")
// and returns its status.
func request(t *testing.T, method, url, host, origin, body string) int {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
	}
	if host != "" {
		req.Host = host
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
