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
	"github.com/guard-mcp/guard/internal/pgtest"
	"github.com/guard-mcp/guard/store"
)

// PostgreSQL stopped under the load of 16 clients on three replicas: every
// call made while it is down is refused, with the audit log's error, and
// none reaches the server; the replicas' /readyz turns 503, so HAProxy
// takes every replica out (of new sessions: a session stays on its
// replica, which refuses its calls meanwhile, and is not lost to
// another's 404); the sessions stay; once PostgreSQL is back the replicas
// are ready again by themselves, HAProxy puts them back and they serve,
// without a restart; and every call that
// was answered has its request and outcome in the audit log, which
// verifies; a call refused although its outcome was committed (the
// answer to its COMMIT lost as PostgreSQL stopped) has an event saying
// it was refused.
func TestPostgreSQLStoppedAndStartedUnderLoad(t *testing.T) {
	if !pgtest.Postgres() {
		t.Skip("PostgreSQL only (" + pgtest.EngineEnv + "=postgres)")
	}
	const clients = 16
	pg := pgtest.Start(t) // a cluster of this test's own, to stop
	db, err := pg.CreateDatabase("outage")
	if err != nil {
		t.Fatal(err)
	}
	c := newClusterOn(t, 3, "policy: {default: allow}\n"+exampleServer(), db)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	type client struct {
		cs                    *mcp.ClientSession
		answered, refused     atomic.Int64
		answeredAfterOutage   atomic.Int64
		unexpected            atomic.Value // the first call answered otherwise (a string)
		refusedWhileAnswering atomic.Bool
	}
	load := make([]*client, clients)
	for i := range load {
		load[i] = &client{cs: c.connect(ctx, c.url("notes"), fmt.Sprintf("load-%d", i), "2025-11-25")}
	}
	var (
		mu       sync.Mutex
		answered = map[string]bool{} // the text of every call answered
		refused  = map[string]bool{} // and of every call refused
		down     atomic.Bool
		back     atomic.Bool
		wg       sync.WaitGroup
		stop     = make(chan struct{})
	)
	for i, l := range load {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				after := back.Load()
				want := fmt.Sprintf("load-%d-%d", i, n)
				res, err := l.cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": want}})
				switch {
				case err == nil && !res.IsError && text(res) == want:
					mu.Lock()
					answered[want] = true
					mu.Unlock()
					l.answered.Add(1)
					if after {
						l.answeredAfterOutage.Add(1)
					}
				case err != nil && strings.Contains(err.Error(), "Refused: the audit log could not be written"),
					// The store could not be read either: guard fails closed.
					err == nil && res.IsError && text(res) == "Refused: the tool's review could not be read":
					mu.Lock()
					refused[want] = true
					mu.Unlock()
					l.refused.Add(1)
					if !down.Load() {
						l.refusedWhileAnswering.Store(true)
					}
				default:
					l.unexpected.CompareAndSwap(nil, fmt.Sprintf("call %d: %q %v", n, text(res), err))
					return
				}
			}
		})
	}
	every := func(what string, cond func(*client) bool) {
		t.Helper()
		waitUntil(t, what, func() bool {
			for i, l := range load {
				if f, _ := l.unexpected.Load().(string); f != "" {
					t.Fatalf("client %d: %s", i, f)
				}
				if !cond(l) {
					return false
				}
			}
			return true
		})
	}
	every("every client had 5 calls answered", func(l *client) bool { return l.answered.Load() >= 5 })
	down.Store(true)
	if err := pg.Halt(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	every("every client had a call refused while PostgreSQL is down", func(l *client) bool { return l.refused.Load() > 0 })
	t.Logf("PostgreSQL down: every client refused within %v", time.Since(start).Round(time.Millisecond))
	for _, r := range c.replicas {
		c.haproxy.waitState(t, "guard_mcp", r.name, "DOWN")
		c.haproxy.waitState(t, "guard_ui", r.name, "DOWN")
	}
	t.Logf("PostgreSQL down: every replica out of HAProxy within %v", time.Since(start).Round(time.Millisecond))
	if err := pg.Resume(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	back.Store(true)
	for _, r := range c.replicas {
		c.haproxy.waitState(t, "guard_mcp", r.name, "UP")
	}
	t.Logf("PostgreSQL back: every replica back in HAProxy within %v", time.Since(start).Round(time.Millisecond))
	every("every client had 5 calls answered after PostgreSQL came back", func(l *client) bool { return l.answeredAfterOutage.Load() >= 5 })
	t.Logf("PostgreSQL back: every client answered again within %v", time.Since(start).Round(time.Millisecond))
	close(stop)
	wg.Wait()
	requests, ok := c.echoCalls()
	mu.Lock()
	defer mu.Unlock()
	for want := range answered {
		if id := requests[want]; id == "" || !ok[id] {
			t.Errorf("call %s was answered, but its request and outcome are not both in the audit log", want)
		}
	}
	// A call whose outcome was committed as PostgreSQL stopped, though
	// the replica never heard so, was refused: the log must say that too.
	corrected := map[string]bool{}
	for _, r := range c.records() {
		if r.Kind == guard.KindEvent && r.Method == store.MethodUnconfirmed {
			corrected[r.CallID] = true
		}
	}
	for want := range refused {
		if id := requests[want]; id != "" && ok[id] && !corrected[id] {
			t.Errorf("call %s was refused, yet the audit log has it answered ok, and nothing says it was refused", want)
		}
	}
	for i, l := range load {
		if l.refusedWhileAnswering.Load() {
			t.Errorf("client %d had a call refused before PostgreSQL stopped", i)
		}
	}
	t.Logf("%d calls answered, %d refused while PostgreSQL was down", len(answered), len(refused))
	t.Log(c.stopAndVerify())
}
