package e2e

import (
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/guard-mcp/guard/e2e/guardtest"
	"github.com/guard-mcp/guard/internal/pgtest"
)

// With PostgreSQL down every call is refused, and /healthz answered 200 all
// the same, so the balancer kept routing to guard. /readyz turns 503 once
// guard's probe finds the audit log cannot be written (no call needed),
// on guard serve's listener and the UI's alike, naming the cause but not
// the database; /healthz stays 200 (the process is alive). Once PostgreSQL
// is back, /readyz turns 200 within 5 s with no client traffic, and one
// lifecycle record marks the recovery.
func TestReadyzFollowsPostgreSQL(t *testing.T) {
	if !pgtest.Postgres() {
		t.Skip("PostgreSQL only (" + pgtest.EngineEnv + "=postgres)")
	}
	pg := pgtest.Start(t) // a cluster of this test's own, to stop
	db, err := pg.CreateDatabase("guarddb_of_the_outage")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, "servers:\n  notes:\n    command: ["+guardBin+", example-server]\n")
	e.db = db
	ui := guardtest.FreePort(t)
	s := guardtest.StartServe(t, "", guardBin, e.environ, os.Stderr, "serve", "--config", e.cfg, "--db", e.db, "--ui", ui)
	listeners := []string{"http://" + s.Addr, "http://" + ui}
	waitReady := func(what string, want int, within time.Duration) string {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			code, body := get(t, http.DefaultClient, listeners[0]+"/readyz")
			if code == want {
				return body
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: /readyz answered %d %q for %v", what, code, body, within)
			}
			time.Sleep(20 * time.Millisecond) // polling: the probe's turn is the event
		}
	}
	waitReady("at start", http.StatusOK, 10*time.Second)
	for _, l := range listeners {
		if code, body := get(t, http.DefaultClient, l+"/readyz"); code != http.StatusOK || !strings.HasPrefix(body, "ready: the audit log can be written") {
			t.Fatalf("%s/readyz at start: %d %q", l, code, body)
		}
	}

	if err := pg.Halt(); err != nil {
		t.Fatal(err)
	}
	body := waitReady("PostgreSQL down, no traffic", http.StatusServiceUnavailable, 30*time.Second)
	if !strings.HasPrefix(body, "not ready: the audit log could not be written: ") {
		t.Errorf("/readyz while PostgreSQL is down: %q", body)
	}
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{u.Host, u.Hostname(), u.Port(), u.User.Username() + "@", strings.TrimPrefix(u.Path, "/"), "postgres://"} {
		if strings.Contains(body, secret) {
			t.Errorf("/readyz names %q: %q", secret, body)
		}
	}
	for _, l := range listeners {
		if code, _ := get(t, http.DefaultClient, l+"/readyz"); code != http.StatusServiceUnavailable {
			t.Errorf("%s/readyz while PostgreSQL is down: %d, want 503", l, code)
		}
		if code, body := get(t, http.DefaultClient, l+"/healthz"); code != http.StatusOK || body != "ok\n" {
			t.Errorf("%s/healthz while PostgreSQL is down: %d %q, want 200", l, code, body)
		}
	}

	if err := pg.Resume(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	waitReady("PostgreSQL back, no traffic", http.StatusOK, 5*time.Second)
	t.Logf("ready again %v after PostgreSQL was back", time.Since(back).Round(time.Millisecond))
	if code, _ := get(t, http.DefaultClient, listeners[1]+"/readyz"); code != http.StatusOK {
		t.Errorf("the UI's /readyz once PostgreSQL is back: %d", code)
	}
	out, code := e.guard("audit", "query", "--kind", "lifecycle", "--format", "jsonl")
	if code != 0 {
		t.Fatalf("audit query: %s", out)
	}
	var recovered []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r struct{ Decision, Reason string }
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if r.Decision == "recovered" {
			recovered = append(recovered, r.Reason)
		}
	}
	if len(recovered) != 1 || !strings.HasPrefix(recovered[0], "the audit log can be written again; it could not since ") {
		t.Fatalf("lifecycle records of the recovery: %q, want one", recovered)
	}
}
