package replicas

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/guard-mcp/guard/e2e/guardtest"
	"github.com/guard-mcp/guard/internal/pgtest"
)

var differsRE = regexp.MustCompile(`(?m)^guard_replicas_config_differs (\d+)$`)

// differs reads replica r's guard_replicas_config_differs, or "" when its
// metrics do not have it yet.
func (c *cluster) differs(r *replica) string {
	c.t.Helper()
	resp, err := http.Get("http://" + r.serve.Addr + "/metrics")
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if m := differsRE.FindSubmatch(b); m != nil {
		return string(m[1])
	}
	return ""
}

// waitDiffers waits until replica r's metrics count want replicas whose
// configuration differs from its own.
func (c *cluster) waitDiffers(r *replica, want string) {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for got := c.differs(r); got != want; got = c.differs(r) {
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: guard_replicas_config_differs is %q, want %s", r.name, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// On PostgreSQL a replica whose configuration differs from the others'
// (here its approval.wait) says so in its log and its metrics, and so do
// the others; once it stops, they agree again.
func TestAReplicaWithAnotherConfiguration(t *testing.T) {
	if !pgtest.Postgres() {
		t.Skip("replicas compare their configurations on PostgreSQL (" + pgtest.EngineEnv + "=postgres)")
	}
	c := newCluster(t, 2, "approval: {wait: 40s}\n"+exampleServer())
	for _, r := range c.replicas {
		c.waitDiffers(r, "0")
	}
	b, err := os.ReadFile(c.cfg)
	if err != nil {
		t.Fatal(err)
	}
	other := &replica{name: "odd", ui: guardtest.FreePort(t), cfg: filepath.Join(c.dir, "odd.yaml")}
	if err := os.WriteFile(other.cfg, []byte(strings.Replace(string(b), "wait: 40s", "wait: 20s", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	c.start(other, "")
	c.waitDiffers(other, "2")
	for _, r := range c.replicas {
		c.waitDiffers(r, "1")
	}
	log, _ := os.ReadFile(other.log)
	if !strings.Contains(string(log), "configuration differs from other replicas'") {
		t.Fatalf("the odd replica's log does not say its configuration differs:\n%s", log)
	}
	if err := other.serve.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, r := range c.replicas {
		c.waitDiffers(r, "0")
	}
	c.stopAndVerify()
}
