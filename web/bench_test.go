package web_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
)

// withPending makes n pending approvals over a few servers and tools.
func withPending(tb testing.TB, e *env, n int) {
	tb.Helper()
	ctx := context.Background()
	for s := range 5 {
		server := fmt.Sprintf("server-%d", s)
		var tools []guard.Tool
		for k := range 4 {
			name := fmt.Sprintf("tool_%d", k)
			tools = append(tools, tool(server, name, `{"name":"`+name+`","annotations":{"destructiveHint":true}}`))
		}
		if err := e.db.Catalog().RecordTools(ctx, server, tools, time.Now(), false); err != nil {
			tb.Fatal(err)
		}
	}
	for i := range n {
		e.holdWith(&guard.Approval{Server: fmt.Sprintf("server-%d", i%5), Tool: fmt.Sprintf("tool_%d", i%4),
			Arguments: fmt.Sprintf(`{"path":"/srv/data/project-%d/report.pdf","content":"%s","overwrite":true}`, i, strings.Repeat("lorem ipsum ", 10)),
			Rule:      "default", HeldReason: "destructive tool", Client: "claude-ai/0.1.0"})
	}
}

// pendingPageTimes loads the pending page n times and returns the times,
// sorted.
func pendingPageTimes(tb testing.TB, b *browser, n int, want int) []time.Duration {
	tb.Helper()
	var ds []time.Duration
	for range n {
		start := time.Now()
		res, body := b.get("/")
		ds = append(ds, time.Since(start))
		if res.StatusCode != http.StatusOK || strings.Count(body, "data-approval-id=") != want {
			tb.Fatalf("pending page: %d, %d cards", res.StatusCode, strings.Count(body, "data-approval-id="))
		}
	}
	slices.Sort(ds)
	return ds
}

// TestPendingPageWith1000Approvals: with 1,000 pending approvals the
// pending page shows each one's card. How fast it does is a figure,
// not a test (a busy machine is slower): BenchmarkPendingPage reports
// it (target p50 ≤ 200 ms), and this test logs it.
func TestPendingPageWith1000Approvals(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 approvals: not with -short")
	}
	e := newEnv(t)
	withPending(t, e, 1000)
	b := e.login("alice")
	ds := pendingPageTimes(t, b, 5, 1000)
	t.Logf("pending page with 1,000 approvals: p50 %v over %d loads (a figure; see BenchmarkPendingPage)", ds[len(ds)/2], len(ds))
}

func BenchmarkPendingPage(b *testing.B) {
	e := newEnv(b)
	withPending(b, e, 1000)
	br := e.login("alice")
	var ds []time.Duration
	for b.Loop() {
		ds = append(ds, pendingPageTimes(b, br, 1, 1000)...)
	}
	slices.Sort(ds)
	p50 := ds[len(ds)/2]
	b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
	b.Logf("pending page with 1,000 approvals: p50 %v over %d loads (target ≤ 200ms)", p50, len(ds))
}
