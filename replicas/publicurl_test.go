package replicas

import (
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"
)

// exampleServer is the configuration of guard's example server as "notes".
func exampleServer() string {
	return "servers:\n  notes:\n    command: [" + guardBin + ", example-server]\n"
}

// Behind the balancer, the replicas answer the public host (public_url)
// and the public origin as their own, and refuse any other; the UI too.
// /healthz and /readyz answer any Host.
// guard ui url prints the public address, and a login there lasts across
// requests although each replica keeps its own logins (the balancer's
// cookie keeps the browser on one).
func TestPublicHostAndOriginThroughTheBalancer(t *testing.T) {
	c := newCluster(t, 2, exampleServer())
	public := strings.TrimPrefix(c.public, "http://")
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
	for _, tc := range []struct {
		host, origin string
		want         int
	}{
		{"", "", http.StatusOK}, // the public host, as clients send it
		{"", c.public, http.StatusOK},
		{"evil.example", "", http.StatusForbidden},
		{"evil.example:" + strings.Split(public, ":")[1], "", http.StatusForbidden},
		{"", "http://evil.example", http.StatusForbidden},
		{"", c.public + ".evil.example", http.StatusForbidden},
		{"", "http://127.0.0.1:1", http.StatusForbidden},
	} {
		if got := request(t, "GET", c.public+"/metrics", tc.host, tc.origin, ""); got != tc.want {
			t.Errorf("GET /metrics, Host %q, Origin %q: %d, want %d", tc.host, tc.origin, got, tc.want)
		}
		for _, path := range []string{"/healthz", "/readyz"} {
			if got := request(t, "GET", c.public+path, tc.host, tc.origin, ""); got != http.StatusOK {
				t.Errorf("GET %s, Host %q, Origin %q: %d, want 200", path, tc.host, tc.origin, got)
			}
		}
		if got := request(t, "POST", c.url("notes"), tc.host, tc.origin, initialize); got != tc.want {
			t.Errorf("POST initialize, Host %q, Origin %q: %d, want %d", tc.host, tc.origin, got, tc.want)
		}
	}
	// Each replica reached directly answers its own address and the
	// public host, nothing else.
	for _, r := range c.replicas {
		for host, want := range map[string]int{"": http.StatusOK, public: http.StatusOK, "evil.example": http.StatusForbidden} {
			if got := request(t, "GET", "http://"+r.serve.Addr+"/metrics", host, "", ""); got != want {
				t.Errorf("%s directly, Host %q: %d, want %d", r.name, host, got, want)
			}
		}
	}

	// The UI, through the balancer.
	if got := request(t, "GET", c.public+"/", "evil.example", "", ""); got != http.StatusForbidden {
		t.Errorf("the UI for a foreign host: %d", got)
	}
	out, code := c.guard("ui", "url")
	login := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(login, c.public+"/login?token=") {
		t.Fatalf("guard ui url: %d %s", code, out)
	}
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	resp, err := browser.Get(login)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/name" && resp.Request.URL.Path != "/" {
		t.Fatalf("logging in at %s: %d at %s", login, resp.StatusCode, resp.Request.URL)
	}
	// Round robin alone would send every other page to the replica that
	// does not know the login.
	for i := range 4 {
		resp, err := browser.Get(c.public + "/activity")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("page %d after the login: %d", i, resp.StatusCode)
		}
	}
}
