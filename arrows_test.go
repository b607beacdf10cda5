package guard

import (
	"os/exec"
	"strings"
	"testing"
)

// deps lists what the packages pattern names link, as `go list -deps`
// reports it.
func deps(t *testing.T, pattern string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pattern).Output()
	if err != nil {
		t.Skipf("go list is not available here: %v", err)
	}
	return strings.Fields(string(out))
}

// The arrows of DESIGN.md's package table: the relay never imports the
// store, the UI or the policy (it asks for decisions through interfaces it
// declares), and so does not link CEL.
func TestTheRelaysArrows(t *testing.T) {
	for _, d := range deps(t, "./proxy/...") {
		for _, banned := range []string{"github.com/guard-mcp/guard/store", "github.com/guard-mcp/guard/web",
			"github.com/guard-mcp/guard/policy", "cel.dev/cel-go", "github.com/google/cel-go"} {
			if d == banned || strings.HasPrefix(d, banned+"/") {
				t.Errorf("the relay links %s", d)
			}
		}
	}
}

// The relay's transports are packages beside it that import it, never
// the reverse: proxy links none of them (proxy/stdio, the child process:
// its pipes, process groups and job objects; proxy/remote, the HTTP and
// SSE upstreams; proxy/streamable, the HTTP front). Each links no more of
// guard than the relay may: neither the store, the UI nor the policy, nor
// CEL.
func TestTheTransportsArrows(t *testing.T) {
	transports := []string{"github.com/guard-mcp/guard/proxy/stdio", "github.com/guard-mcp/guard/proxy/remote",
		"github.com/guard-mcp/guard/proxy/streamable"}
	for _, d := range deps(t, "./proxy") {
		for _, tr := range transports {
			if d == tr {
				t.Errorf("proxy links %s: the transports import the relay, not the reverse", d)
			}
		}
	}
	for _, tr := range transports {
		for _, d := range deps(t, tr) {
			for _, banned := range []string{"github.com/guard-mcp/guard/store", "github.com/guard-mcp/guard/web",
				"github.com/guard-mcp/guard/policy", "cel.dev/cel-go", "github.com/google/cel-go"} {
				if d == banned || strings.HasPrefix(d, banned+"/") {
					t.Errorf("%s links %s", tr, d)
				}
			}
		}
	}
}

// policy holds no one else's configuration: it links neither the package
// that reads the file (config, whose reader config/read is a leaf) nor the
// packages whose sections the file also holds.
func TestThePolicysArrows(t *testing.T) {
	for _, d := range deps(t, "./policy/...") {
		for _, banned := range []string{"github.com/guard-mcp/guard/config", "github.com/guard-mcp/guard/web",
			"github.com/guard-mcp/guard/auth", "github.com/guard-mcp/guard/notify", "github.com/guard-mcp/guard/stream",
			"github.com/guard-mcp/guard/store"} {
			if d == banned {
				t.Errorf("policy links %s", d)
			}
		}
	}
	for _, d := range deps(t, "./config/read") {
		if strings.HasPrefix(d, "github.com/guard-mcp/guard") && d != "github.com/guard-mcp/guard/config/read" {
			t.Errorf("config/read links %s: it is a leaf, which policy and web import", d)
		}
	}
}

// The guard binary carries the product alone: neither the benchmark, nor
// the PostgreSQL test clusters, nor package testing.
func TestTheBinaryLinksNoTests(t *testing.T) {
	for _, d := range deps(t, "./cmd/guard") {
		for _, banned := range []string{"testing", "github.com/guard-mcp/guard/benchmark",
			"github.com/guard-mcp/guard/internal/pgtest", "github.com/guard-mcp/guard/e2e"} {
			if d == banned || strings.HasPrefix(d, banned+"/") {
				t.Errorf("guard links %s", d)
			}
		}
	}
}
