package pgtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BouncerBin is Debian's PgBouncer, which scripts/test installs.
const BouncerBin = "/usr/sbin/pgbouncer"

// Bouncer runs PgBouncer in front of the cluster, pooling in mode
// ("session", "transaction" or "statement"), until t ends, and returns the
// URL of the database name through it. The test is skipped when PgBouncer
// is not installed.
func (c *Cluster) Bouncer(t testing.TB, mode, name string) string {
	t.Helper()
	if _, err := os.Stat(BouncerBin); err != nil {
		t.Skipf("PgBouncer is not installed (Debian's package pgbouncer): %v", err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(c.Dir, "pgbouncer-"+mode)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	ini := fmt.Sprintf(`[databases]
* = host=127.0.0.1 port=%d
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
max_client_conn = 200
default_pool_size = 50
logfile = %s
`, c.Port, port, filepath.Join(dir, "users.txt"), mode, filepath.Join(dir, "log"))
	for file, text := range map[string]string{"pgbouncer.ini": ini, "users.txt": `"guard" ""` + "\n"} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{dir, filepath.Join(dir, "pgbouncer.ini"), filepath.Join(dir, "users.txt")} {
		if err := c.owner.chown(p); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(BouncerBin, filepath.Join(dir, "pgbouncer.ini"))
	cmd.Dir = dir
	c.owner.runs(cmd) // it will not run as root
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.Dial("tcp", addr)
		if err == nil {
			conn.Close()
			break
		}
		select {
		case err := <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "log"))
			t.Fatalf("pgbouncer exited: %v\n%s%s", err, out.String(), log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgbouncer does not listen on %s: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Sprintf("postgres://guard@%s/%s?sslmode=disable", addr, name)
}
