// Package pgtest starts throwaway PostgreSQL clusters for tests: each
// its own data directory, on a loopback port and a socket directory of
// its own, run as an unprivileged user when the tests run as root, and
// stopped when its test ends. It never touches a system cluster.
package pgtest

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"testing"
)

// BinEnv names the variable that holds the directory of PostgreSQL's
// programs (initdb, pg_ctl); without it, the newest of Debian's
// /usr/lib/postgresql/*/bin is used.
const BinEnv = "GUARD_TEST_PG_BIN"

// Cluster is a running throwaway cluster.
type Cluster struct {
	// Dir holds the cluster: its data directory (Dir/data), its
	// sockets and its log.
	Dir string
	// Port is the loopback TCP port it listens on.
	Port int
	// URL is a connection URL for the cluster's superuser, guard,
	// which needs no password from the loopback address.
	URL   string
	bin   string
	opts  string // the server's options (pg_ctl -o)
	owner *owner
}

// Bin returns the directory of PostgreSQL's programs, or "" when there
// is none.
func Bin() string {
	if d := os.Getenv(BinEnv); d != "" {
		return d
	}
	if runtime.GOOS == "windows" {
		return "" // Debian's place is Unix's (and Linux's programs do not run here)
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d
		}
	}
	return ""
}

func version(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// Start initialises and starts a cluster for t, stopped and removed when
// t ends. The test is skipped, saying why, when PostgreSQL is not
// installed.
func Start(t testing.TB) *Cluster {
	t.Helper()
	bin := Bin()
	if bin == "" {
		t.Skipf("PostgreSQL is not installed (Debian's package postgresql, or %s naming its bin directory)", BinEnv)
	}
	c, err := start(bin)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return c
}

// Options configure New.
type Options struct {
	// Durable keeps PostgreSQL's fsync on: a cluster whose commits cost
	// what they do in production (a benchmark's). Tests' clusters run
	// without it.
	Durable bool
	// Settings are more of the server's settings, each NAME=VALUE (pg_ctl
	// -o "-c NAME=VALUE"): shared_preload_libraries=pg_stat_statements,
	// say, for a benchmark that counts statements.
	Settings []string
}

// New initialises and starts a cluster of PostgreSQL's programs in Bin
// outside a test (a benchmark's); Stop stops and removes it.
func New(o Options) (*Cluster, error) {
	bin := Bin()
	if bin == "" {
		return nil, fmt.Errorf("PostgreSQL is not installed (Debian's package postgresql, or %s naming its bin directory)", BinEnv)
	}
	return launch(bin, o)
}

func start(bin string) (*Cluster, error) { return launch(bin, Options{}) }

func launch(bin string, o Options) (*Cluster, error) {
	dir, err := os.MkdirTemp("", "guard-pg-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir, bin: bin}
	if c.owner, err = clusterOwner(); err != nil {
		return nil, err
	}
	if err := c.owner.chown(dir); err != nil {
		return nil, err
	}
	if c.Port, err = freePort(); err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if err := c.run("initdb", "-D", data, "-U", "guard", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions"); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	opts := fmt.Sprintf("-k %s -h 127.0.0.1 -p %d -c max_connections=200", dir, c.Port)
	if !o.Durable {
		opts += " -c fsync=off -c full_page_writes=off"
	}
	for _, set := range o.Settings {
		opts += " -c " + set
	}
	c.opts = opts
	if err := c.run("pg_ctl", "start", "-D", data, "-w", "-l", filepath.Join(dir, "log"), "-o", opts); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w\n%s", err, log)
	}
	c.URL = fmt.Sprintf("postgres://guard@127.0.0.1:%d/postgres?sslmode=disable", c.Port)
	return c, nil
}

// Halt stops the server and keeps the cluster: Resume starts it again,
// on the same port, with everything it had committed.
func (c *Cluster) Halt() error {
	return c.run("pg_ctl", "stop", "-D", filepath.Join(c.Dir, "data"), "-m", "fast", "-w")
}

// Resume starts a halted cluster again.
func (c *Cluster) Resume() error {
	return c.run("pg_ctl", "start", "-D", filepath.Join(c.Dir, "data"), "-w", "-l", filepath.Join(c.Dir, "log"), "-o", c.opts)
}

// Pid is the cluster's postmaster: its process tree is the cluster's.
func (c *Cluster) Pid() (int, error) {
	b, err := os.ReadFile(filepath.Join(c.Dir, "data", "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	first, _, _ := bytes.Cut(b, []byte("\n"))
	return strconv.Atoi(string(bytes.TrimSpace(first)))
}

// Stop stops the cluster (fast shutdown) and removes its directory.
func (c *Cluster) Stop() error {
	err := c.run("pg_ctl", "stop", "-D", filepath.Join(c.Dir, "data"), "-m", "fast", "-w")
	return errors.Join(err, os.RemoveAll(c.Dir))
}

// run runs one of PostgreSQL's programs as the cluster's owner.
func (c *Cluster) run(prog string, args ...string) error {
	cmd := exec.Command(filepath.Join(c.bin, prog), args...)
	cmd.Dir = c.Dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	c.owner.runs(cmd)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w\n%s", prog, err, out.Bytes())
	}
	return nil
}

// freePort returns a loopback port no one listens on now, below the
// ephemeral range (32768 and up on Linux): a cluster that is halted and
// started again (Halt, Resume) finds its port free, as no connection's
// local port nor port-0 listener is given one from there meanwhile.
func freePort() (int, error) {
	var last error
	for range 100 {
		port := 20000 + rand.IntN(12000)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			last = err
			continue
		}
		l.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free port below the ephemeral range: %w", last)
}
