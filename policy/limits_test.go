package policy

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store"
)

func limitEngine(t *testing.T, conf string, lim Limiter) *Engine[*Config] {
	t.Helper()
	c, err := Parse([]byte(conf), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine("", c, reload, EngineOptions{Limiter: lim})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestParseLimits(t *testing.T) {
	c, err := Parse([]byte("limits:\n  - {server: files, tool: write_file, rate: 30/min, burst: 5}\n  - {rate: 1000/hour}\n"), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if l := c.Limits[0]; l.Count != 30 || l.Per != time.Minute || l.Burst != 5 || l.Tool != "write_file" {
		t.Fatalf("%+v", l)
	}
	if l := c.Limits[1]; l.Server != "*" || l.Burst != 1000 || l.Per != time.Hour {
		t.Fatalf("%+v", l)
	}
	for _, bad := range []string{"limits:\n  - {rate: 30}\n", "limits:\n  - {rate: 30/fortnight}\n", "limits:\n  - {rate: 0/s}\n", "limits:\n  - {tool: x}\n", "limits:\n  - {rate: 3/s, burst: -1}\n"} {
		var ce *ConfigError
		if _, err := Parse([]byte(bad), "c.yaml"); !errors.As(err, &ce) || ce.Line != 2 {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// Limits are checked after the rules and before approval, shared by every
// process on one database, per tool or per server.
func TestLimitsSharedAcrossProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.db")
	open := func() *store.DB {
		db, err := store.Open(context.Background(), store.Options{Path: path, Durability: "normal"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	a, b := open(), open() // two processes' handles on one database
	const conf = `
limits:
  - {server: files, tool: "write_*", rate: 10/min, burst: 4}
policy:
  default: approve
  rules:
    - {name: no-rm, tool: rm, action: deny}
`
	ea, eb := limitEngine(t, conf, a), limitEngine(t, conf, b)
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	call := func(e *Engine[*Config], tool string, at time.Time) guard.Verdict {
		return e.Decide(&guard.Call{Server: "files", Method: "tools/call", ToolName: tool, Tool: tool_(), Time: at})
	}
	var held, limited atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 { // concurrent callers in two processes
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := ea
			if i%2 == 1 {
				e = eb
			}
			switch v := call(e, "write_file", now); v.Rule {
			case "default":
				held.Add(1)
			case guard.RateLimitRule:
				limited.Add(1)
				if v.Action != guard.ActionDeny || guard.DenialText(v) != "Rate limit: write_file allows 10 calls per minute; retry in 6s" {
					t.Errorf("limited: %+v → %q", v, guard.DenialText(v))
				}
			}
		}()
	}
	wg.Wait()
	if held.Load() != 4 || limited.Load() != 4 {
		t.Fatalf("burst 4: %d passed to approval, %d limited", held.Load(), limited.Load())
	}
	// Another tool has its own bucket; a denied call takes no token.
	if v := call(ea, "write_dir", now); v.Rule != "default" {
		t.Fatalf("write_dir: %+v", v)
	}
	if v := call(eb, "rm", now); v.Rule != "no-rm" {
		t.Fatalf("rm: %+v", v)
	}
	// Six seconds later one token is back, in either process.
	if v := call(eb, "write_file", now.Add(6*time.Second)); v.Rule != "default" {
		t.Fatalf("after refill: %+v", v)
	}
	if v := call(ea, "write_file", now.Add(6*time.Second)); v.Rule != guard.RateLimitRule {
		t.Fatalf("second after refill: %+v", v)
	}
	// Monitor mode: allowed, and says it would have been limited.
	em := limitEngine(t, strings.Replace(conf, "policy:\n", "policy:\n  mode: monitor\n", 1), a)
	if v := call(em, "write_file", now.Add(6*time.Second)); v.Action != guard.ActionAllow || v.Would != guard.ActionDeny || v.Rule != guard.RateLimitRule {
		t.Fatalf("monitor: %+v", v)
	}
	// A call a rule denies keeps its rule in monitor mode, and takes no
	// token there either.
	if v := call(em, "rm", now.Add(6*time.Second)); v.Action != guard.ActionAllow || v.Would != guard.ActionDeny || v.Rule != "no-rm" {
		t.Fatalf("monitor, a denied call: %+v", v)
	}
	em2 := limitEngine(t, "limits:\n  - {rate: 5/s}\npolicy:\n  mode: monitor\n  rules:\n    - {name: no-rm, tool: rm, action: deny}\n", failingLimiter{})
	if v := call(em2, "rm", now); v.Rule != "no-rm" {
		t.Fatalf("monitor, a denied call asked the limiter: %+v", v)
	}
}

type failingLimiter struct{}

func (failingLimiter) TakeToken(context.Context, string, float64, int, time.Time) (bool, time.Duration, error) {
	return false, 0, errors.New("disk I/O error")
}

func TestLimitErrorFailsClosed(t *testing.T) {
	e := limitEngine(t, "limits:\n  - {rate: 5/s}\npolicy: {default: allow}\n", failingLimiter{})
	v := e.Decide(&guard.Call{Server: "s", Method: "tools/call", ToolName: "x", Tool: tool_()})
	if v.Action != guard.ActionDeny || !strings.Contains(v.Reason, "disk I/O error") {
		t.Fatalf("%+v", v)
	}
}

func tool_() *guard.Tool { return tool(`{"readOnlyHint":true}`) }
