package replicas

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A rate limit counts the calls of every replica: of calls spread over
// three replicas by the balancer, some at once, exactly as many pass as
// the limit allows, and the others get guard's rate-limit denial.
func TestRateLimitAcrossReplicas(t *testing.T) {
	const allowed, clients, each = 5, 6, 3
	c := newCluster(t, 3, "policy: {default: allow}\nlimits:\n  - {server: notes, tool: echo, rate: "+strconv.Itoa(allowed)+"/day}\n"+exampleServer())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	before, err := c.haproxy.stat()
	if err != nil {
		t.Fatal(err)
	}
	// Sessions (2025-11-25) land on the replicas in turn; each call of a
	// 2026-07-28 client, which has none, lands anywhere.
	sessions := make([]*mcp.ClientSession, clients)
	for i := range sessions {
		v := "2025-11-25"
		if i%2 == 1 {
			v = "2026-07-28"
		}
		sessions[i] = c.connect(ctx, c.url("notes"), fmt.Sprintf("limited-%d", i), v)
	}
	var (
		mu             sync.Mutex
		passed, denied int
		wg             sync.WaitGroup
	)
	for i, cs := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range each {
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": fmt.Sprintf("c%d-%d", i, n)}})
				mu.Lock()
				switch {
				case err != nil:
					t.Errorf("client %d, call %d: %v", i, n, err)
				case !res.IsError && text(res) == fmt.Sprintf("c%d-%d", i, n):
					passed++
				case res.IsError && strings.HasPrefix(text(res), "Rate limit: echo allows 5 calls per day; retry in "):
					denied++
				default:
					t.Errorf("client %d, call %d: %q", i, n, text(res))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if passed != allowed || denied != clients*each-allowed {
		t.Fatalf("%d calls passed and %d were denied, want %d and %d", passed, denied, allowed, clients*each-allowed)
	}
	// They were spread: every replica served some.
	after, err := c.haproxy.stat()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range c.replicas {
		k := "guard_mcp/" + r.name
		b, _ := strconv.Atoi(before[k]["stot"])
		a, _ := strconv.Atoi(after[k]["stot"])
		if a-b < clients/len(c.replicas) {
			t.Errorf("the balancer sent %s %d requests", r.name, a-b)
		}
	}
	c.stopAndVerify()
}
