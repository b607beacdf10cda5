package replicas

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/guard-mcp/guard/e2e/guardtest"
)

// The configuration docs/replicas.md shows is docs/haproxy.cfg, to the
// byte, and that is the one these tests run: their template filled in
// with the example's addresses is the file.
func TestTheDocumentedConfigurationIsTheTestedOne(t *testing.T) {
	docs := filepath.Join(guardtest.RepoRoot(), "docs")
	cfg, err := os.ReadFile(filepath.Join(docs, "haproxy.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	example := balancerConfig{Bind: ":443 ssl crt /etc/haproxy/certs/guard.example.com.pem", PublicHost: "guard.example.com",
		StatsSocket: "/run/haproxy/admin.sock", Secure: true}
	for i, ip := range []string{"10.0.0.11", "10.0.0.12", "10.0.0.13"} {
		name := "guard" + string(rune('1'+i))
		example.Replicas = append(example.Replicas, balancedReplica{Name: name, MCP: ip + ":8930", UI: ip + ":8931"})
	}
	var filled bytes.Buffer
	if err := haproxyTemplate(t).Execute(&filled, example); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(filled.Bytes(), cfg) {
		t.Fatalf("replicas/testdata/haproxy.cfg.tmpl with docs/haproxy.cfg's addresses is not docs/haproxy.cfg: change both alike\n%s", filled.String())
	}
	md, err := os.ReadFile(filepath.Join(docs, "replicas.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "```haproxy\n"+string(cfg)+"```\n") {
		t.Fatal("docs/replicas.md does not show docs/haproxy.cfg as it is: copy the file into its haproxy block")
	}
}
