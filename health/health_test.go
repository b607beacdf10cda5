package health

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
	"github.com/jackc/pgx/v5"
)

// The cause /readyz gives of a failed write names no host, address, user,
// database or password, whatever the error said.
func TestCauseSaysWhyNotWhere(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// A real refused connection, as pgx reports it.
	_, refused := pgx.Connect(ctx, "postgres://guard:s3cret@127.0.0.1:1/guarddb?sslmode=disable")
	if refused == nil {
		t.Fatal("a connection to port 1 was not refused")
	}
	// The system's own words for it: "connection refused" on Linux.
	var errno syscall.Errno
	if !errors.As(refused, &errno) {
		t.Fatalf("a refused connection without its errno: %v", refused)
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{refused, errno.Error()},
		{errors.New("dial postgres://guard:s3cret@db.internal:5432/guarddb: timeout"), "dial …: timeout"},
		{errors.New("failed to connect to `user=guard database=guarddb`: 10.0.0.5:5432 (db.internal): server said no"), "failed to connect to `… …`: … (…): server said no"},
	} {
		got := Cause(tc.err)
		if got != tc.want {
			t.Errorf("Cause(%q) = %q, want %q", tc.err, got, tc.want)
		}
		for _, secret := range []string{"s3cret", "guarddb", "db.internal", "127.0.0.1", "10.0.0.5", "5432", "user=guard"} {
			if strings.Contains(got, secret) {
				t.Errorf("Cause(%q) = %q: it names %s", tc.err, got, secret)
			}
		}
	}
}

// lockDB takes an SQLite database's write lock from another connection,
// as another process committing does; the returned func releases it.
func lockDB(t *testing.T, path string) func() {
	t.Helper()
	c, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := c.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	release := func() {
		_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
		conn.Close()
		c.Close()
	}
	t.Cleanup(release)
	return release
}

type alertList []string

func (a alertList) Alerts(context.Context) ([]string, error) { return a, nil }

// /readyz follows the audit log: 200 while it can be written, 503 once a
// probe finds it cannot (with no traffic), naming why, and 200 again once
// it can, with one record of the recovery; integrity alerts are counted
// and never make it 503. /healthz answers 200 throughout, to any Host.
func TestReadyzFollowsTheAuditLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "guard.db")
	db, err := store.Open(context.Background(), store.Options{Path: path, Durability: "normal", BusyWait: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var recoveries atomic.Int32
	c := New(Options{Log: db.Writing(), Alerts: alertList{"record 3 was altered"}, ProbeEvery: 20 * time.Millisecond, IdleEvery: 50 * time.Millisecond,
		Recovered: func(ctx context.Context, since time.Time, cause string) error {
			err := db.Operations().RecordLifecycle(store.Lifecycle{Event: "recovered", Process: "test", Reason: "the audit log can be written again: " + cause})
			if err == nil {
				recoveries.Add(1)
			}
			return err
		}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	mux := http.NewServeMux()
	c.Routes(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	get := func(path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Host = "rebinding.attacker.example"
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			select {
			case <-db.Writing().WritesChanged():
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	if code, body := get("/readyz"); code != http.StatusOK || body != "ready: the audit log can be written\nintegrity alerts: 1 not acknowledged (guard audit verify names them)\n" {
		t.Fatalf("/readyz of a writable log: %d %q", code, body)
	}
	release := lockDB(t, path)
	var body string
	waitFor("/readyz to turn 503 with no traffic", func() bool {
		var code int
		code, body = get("/readyz")
		return code == http.StatusServiceUnavailable
	})
	if !strings.HasPrefix(body, "not ready: the audit log could not be written: database is locked") || !strings.Contains(body, "integrity alerts: 1") {
		t.Fatalf("/readyz while the log cannot be written: %q", body)
	}
	if code, body := get("/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz while not ready: %d %q", code, body)
	}
	release()
	waitFor("/readyz to turn 200 again with no traffic", func() bool { code, _ := get("/readyz"); return code == http.StatusOK })
	var got []string
	if err := db.Reader().QueryRecords(context.Background(), guard.KindLifecycle, store.Filter{}, func(r *guard.Record) error {
		got = append(got, r.Decision+": "+r.Reason)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || recoveries.Load() != 1 || !strings.HasPrefix(got[0], "recovered: the audit log can be written again: database is locked") {
		b, _ := json.Marshal(got)
		t.Fatalf("lifecycle records: %s, want one recovery", b)
	}
}
