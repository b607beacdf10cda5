package e2e

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// A request body that trickles in (headers, then a byte a second) is cut
// after --body-timeout: guard answers 408 and closes the connection.
func TestHTTPBodyThatTricklesInIsCut(t *testing.T) {
	_, url := serveExample(t, "", "--body-timeout", "1s")
	host := strings.TrimPrefix(strings.TrimSuffix(url, "/mcp/notes"), "http://")
	conn, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("POST /mcp/notes HTTP/1.1\r\nHost: " + host +
		"\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() { // the slow client: one byte a second, until guard hangs up
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	start := time.Now()
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	got, _ := io.ReadAll(conn) // until guard closes the connection
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("a body trickling in was read for %v (guard answered %q)", d, got)
	}
	if !strings.HasPrefix(string(got), "HTTP/1.1 408") {
		t.Fatalf("guard answered %q, want 408", got)
	}
}

// /metrics and the endpoints check Host (DNS rebinding), and /metrics
// needs a client's bearer token where tokens are configured; allowed_hosts
// adds names, wildcards among them. /healthz and /readyz answer any Host,
// and no token.
func TestHTTPHealthAndMetricsFrontDoor(t *testing.T) {
	tok, line := newToken(t, "prometheus")
	for _, withTokens := range []bool{false, true} {
		config := "allowed_hosts: [guard.internal, \"*.replicas.example.com\"]\n"
		if withTokens {
			config += "clients:\n  " + line + "\n"
		}
		_, url := serveExample(t, config)
		base := strings.TrimSuffix(url, "/mcp/notes")
		get := func(path, host, token string) int {
			t.Helper()
			req, _ := http.NewRequest("GET", base+path, nil)
			if host != "" {
				req.Host = host
			}
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		for _, path := range []string{"/metrics", "/mcp/notes"} {
			for _, host := range []string{"evil.example.com", "replicas.example.com", "guard.internal.evil.example.com"} {
				if code := get(path, host, tok); code != http.StatusForbidden {
					t.Errorf("tokens %v: %s with Host %s: %d, want 403", withTokens, path, host, code)
				}
			}
		}
		for _, host := range []string{"", "guard.internal", "r1.replicas.example.com"} {
			if code := get("/metrics", host, tok); code != http.StatusOK {
				t.Errorf("tokens %v: /metrics with Host %q: %d, want 200", withTokens, host, code)
			}
		}
		for _, path := range []string{"/healthz", "/readyz"} {
			for _, host := range []string{"", "evil.example.com"} {
				if code := get(path, host, ""); code != http.StatusOK {
					t.Errorf("tokens %v: %s with Host %q: %d, want 200", withTokens, path, host, code)
				}
			}
		}
		want := http.StatusOK
		if withTokens {
			want = http.StatusUnauthorized
		}
		if code := get("/metrics", "", ""); code != want {
			t.Errorf("tokens %v: /metrics without a token: %d, want %d", withTokens, code, want)
		}
		if code := get("/metrics", "", "wrong"); withTokens && code != http.StatusUnauthorized {
			t.Errorf("/metrics with a wrong token: %d, want 401", code)
		}
	}
}

// One token cannot open sessions, each a server process, without end:
// guard serve answers its initialize 503 past max_sessions.per_client,
// and every client's past max_sessions.total, while the sessions it
// serves go on.
func TestHTTPSessionsAreBoundedPerClientAndInAll(t *testing.T) {
	aliceTok, aliceLine := newToken(t, "alice")
	bobTok, bobLine := newToken(t, "bob")
	_, url := serveExample(t, "max_sessions: {total: 3, per_client: 2}\nclients:\n  "+aliceLine+"\n  "+bobLine+"\n")
	initialize := func(token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for i, tc := range []struct {
		token string
		code  int
		says  string
	}{
		{aliceTok, http.StatusOK, ""},
		{aliceTok, http.StatusOK, ""},
		{aliceTok, http.StatusServiceUnavailable, "Too many sessions of this client: at most 2 at once (max_sessions.per_client)"},
		{bobTok, http.StatusOK, ""},
		{bobTok, http.StatusServiceUnavailable, "Too many sessions: guard serves at most 3 at once (max_sessions.total)"},
	} {
		code, body := initialize(tc.token)
		if code != tc.code || !strings.Contains(body, tc.says) {
			t.Fatalf("session %d: %d %s, want %d %q", i+1, code, body, tc.code, tc.says)
		}
	}
}

// guard serve takes its addresses from the environment (GUARD_LISTEN,
// GUARD_UI) and logs the ones it bound: asked for port 0, the logged
// addresses are those that answer, front (with /metrics) and UI.
func TestServeLogsTheAddressesItBound(t *testing.T) {
	e := newEnv(t, "servers:\n  notes:\n    command: ["+guardBin+", example-server]\n")
	cmd := exec.Command(guardBin, "serve", "--config", e.cfg, "--db", e.db)
	cmd.Env = append(append(os.Environ(), e.environ...), "GUARD_LISTEN=127.0.0.1:0", "GUARD_UI=127.0.0.1:0", "GUARD_LOG_FORMAT=json")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }()
	bound := map[string]string{} // message: addr
	lines := bufio.NewScanner(stderr)
	for len(bound) < 2 && lines.Scan() {
		var l struct{ Msg, Addr, Metrics string }
		if json.Unmarshal(lines.Bytes(), &l) == nil && l.Addr != "" {
			bound[l.Msg] = l.Addr
			if l.Msg == "listening" && l.Metrics != "http://"+l.Addr+"/metrics" {
				t.Errorf("the metrics' address %q, bound %s", l.Metrics, l.Addr)
			}
		}
	}
	front, ui := bound["listening"], bound["approval UI"]
	for _, addr := range []string{front, ui} {
		if host, port, err := net.SplitHostPort(addr); err != nil || host != "127.0.0.1" || port == "0" {
			t.Fatalf("addresses logged: %v", bound)
		}
	}
	go io.Copy(io.Discard, stderr)
	for _, url := range []string{"http://" + front + "/healthz", "http://" + front + "/metrics", "http://" + ui + "/healthz"} {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %d", url, resp.StatusCode)
		}
	}
}
