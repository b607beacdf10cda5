package replicas

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	guard "github.com/guard-mcp/guard"
)

// waitUntil waits until cond is true, or fails after 30s saying what it
// waited for.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// loadClient is one client calling echo again and again.
type loadClient struct {
	cs        *mcp.ClientSession
	home      string       // the replica its session lives in
	answered  atomic.Int64 // calls answered as they should be
	afterKill atomic.Int64 // of them, calls made after the kill
	failure   atomic.Value // the first call that was not (a string)
}

// A replica killed with SIGKILL under the load of 16 clients costs only
// its own sessions: the sessions of the other replicas go on working,
// new sessions start on them, and once the killed replica is started
// again (as a service manager would), every call answered before the kill
// has its request and outcome in the audit log, which verifies.
func TestKillAReplicaUnderLoad(t *testing.T) {
	const clients = 16
	c := newCluster(t, 3, "policy: {default: allow}\n"+exampleServer())
	victim := c.replicas[0]
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	load := make([]*loadClient, clients)
	for i := range load {
		load[i] = &loadClient{cs: c.connect(ctx, c.url("notes"), fmt.Sprintf("load-%d", i), "2025-11-25")}
	}
	table, err := c.haproxy.sticky()
	if err != nil {
		t.Fatal(err)
	}
	onVictim := 0
	for i, l := range load {
		if l.home = table[l.cs.ID()]; l.home == "" {
			t.Fatalf("client %d: the balancer did not learn its session %s: %v", i, l.cs.ID(), table)
		}
		if l.home == victim.name {
			onVictim++
		}
	}
	if onVictim == 0 || onVictim == clients {
		t.Fatalf("%d of %d sessions on %s: round robin should have spread them", onVictim, clients, victim.name)
	}

	var (
		mu       sync.Mutex
		answered = map[string]bool{} // the text of every call answered
		wg       sync.WaitGroup
		killed   atomic.Bool
		stop     = make(chan struct{})
	)
	for i, l := range load {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				after := killed.Load()
				want := fmt.Sprintf("load-%d-%d", i, n)
				res, err := l.cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": want}})
				if err != nil || res.IsError || text(res) != want {
					l.failure.Store(fmt.Sprintf("call %d: %q %v", n, text(res), err))
					return // its session is gone
				}
				mu.Lock()
				answered[want] = true
				mu.Unlock()
				l.answered.Add(1)
				if after {
					l.afterKill.Add(1)
				}
			}
		}()
	}
	waitUntil(t, "every client had 5 calls answered", func() bool {
		for _, l := range load {
			if l.answered.Load() < 5 {
				return false
			}
		}
		return true
	})
	killed.Store(true)
	if err := victim.serve.Kill(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("guard serve %s after SIGKILL: %v", victim.name, err)
	}
	t.Logf("%s killed at %v", victim.name, time.Since(start).Round(time.Millisecond))
	c.haproxy.waitState(t, "guard_mcp", victim.name, "DOWN")
	t.Logf("the balancer took %s out at %v", victim.name, time.Since(start).Round(time.Millisecond))
	waitUntil(t, "every client of the other replicas had 10 calls answered after the kill", func() bool {
		for _, l := range load {
			if l.home != victim.name && l.afterKill.Load() < 10 {
				return false
			}
		}
		return true
	})
	// A new session starts on a replica that is up.
	fresh := c.connect(ctx, c.url("notes"), "after-the-kill", "2025-11-25")
	if res, err := fresh.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "fresh"}}); err != nil || text(res) != "fresh" {
		t.Fatalf("a new session after the kill: %q %v", text(res), err)
	}
	close(stop)
	wg.Wait()
	t.Logf("the clients stopped at %v", time.Since(start).Round(time.Millisecond))
	for i, l := range load {
		f, _ := l.failure.Load().(string)
		switch {
		case l.home != victim.name && f != "":
			t.Errorf("client %d, on %s, which was not killed: %s", i, l.home, f)
		case l.home == victim.name:
			t.Logf("client %d, on the killed %s: %d calls answered, then %s", i, l.home, l.answered.Load(), f)
		}
	}

	// What the killed replica had acknowledged is in its journal (SQLite);
	// a writable guard opening the database moves it in.
	missing := func() []string {
		calls, ok := c.echoCalls()
		mu.Lock()
		defer mu.Unlock()
		var m []string
		for want := range answered {
			if id := calls[want]; id == "" || !ok[id] {
				m = append(m, want)
			}
		}
		return m
	}
	t.Logf("%d calls answered; before %s restarted, %d of them lack their request or outcome in the database", len(answered), victim.name, len(missing()))
	c.restart(victim)
	c.haproxy.waitState(t, "guard_mcp", victim.name, "UP")
	t.Logf("%s back at %v", victim.name, time.Since(start).Round(time.Millisecond))
	if m := missing(); len(m) > 0 {
		t.Fatalf("%d calls answered, %d without their request and outcome in the audit log: %v", len(answered), len(m), m)
	}
	t.Log(c.stopAndVerify())
}

// echoCalls reads the echo calls of the audit log: each call's id by the
// text it echoed, and the ids of the calls whose outcome is ok.
func (c *cluster) echoCalls() (ids map[string]string, ok map[string]bool) {
	ids, ok = map[string]string{}, map[string]bool{}
	for _, r := range c.records() {
		switch {
		case r.Kind == guard.KindRequest && r.Tool == "echo":
			if s, found := strings.CutPrefix(r.Arguments, `{"text":"`); found {
				ids[strings.TrimSuffix(s, `"}`)] = r.CallID
			}
		case r.Kind == guard.KindOutcome && r.Tool == "echo" && r.Outcome == "ok":
			ok[r.CallID] = true
		}
	}
	return ids, ok
}
