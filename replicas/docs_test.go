package replicas

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/guard-mcp/guard/e2e/guardtest"
)

// The configuration docs/replicas.md shows is docs/haproxy.cfg, the one
// these tests run, to the byte.
func TestTheDocumentedConfigurationIsTheTestedOne(t *testing.T) {
	docs := filepath.Join(guardtest.RepoRoot(), "docs")
	cfg, err := os.ReadFile(filepath.Join(docs, "haproxy.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(docs, "replicas.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "```haproxy\n"+string(cfg)+"```\n") {
		t.Fatal("docs/replicas.md does not show docs/haproxy.cfg as it is: copy the file into its haproxy block")
	}
}
