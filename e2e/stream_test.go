package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/stream"
	"github.com/guard-mcp/guard/stream/streamtest"
)

// Two guard processes on one database, both configured to stream the
// audit log to a real rsyslog: one streams (it holds the lease), the
// records of both arrive in order, each once; when it exits, guard serve
// takes over and streams what follows; its /metrics says how far the
// receiver is behind.
func TestStreamAcrossProcesses(t *testing.T) {
	rs := streamtest.NewRsyslog(t, nil)
	e := newEnv(t, fmt.Sprintf(`policy: {default: allow}
servers:
  notes: {command: [%q, example-server]}
audit:
  stream:
    - {syslog: "tcp://%s"}
`, guardBin, rs.Addr))
	calls := func(lc *lineClient, from, n int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			lc.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"call %d"}}}`, i, i))
			if text, isErr := resultText(lc.next(20 * time.Second)); isErr || text != fmt.Sprintf("call %d", i) {
				t.Fatalf("call %d: %q", i, text)
			}
		}
	}
	records := func() int {
		t.Helper()
		db := e.openReadOnly(context.Background())
		defer db.Close()
		n := 0
		if err := db.Reader().Records(context.Background(), func(*guard.Record) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	holder := func() string {
		t.Helper()
		db := e.openReadOnly(context.Background())
		defer db.Close()
		h, err := db.Streams().LeaseHolder(context.Background(), stream.LeaseName)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}

	first := startLines(t, e.wrap("notes", guardBin, "example-server"))
	first.init()
	streamtest.WaitFor(t, "the first process to take the lease", func() bool { return holder() != "" })
	firstHolder := holder()
	if !strings.Contains(firstHolder, fmt.Sprintf("/%d/", first.cmd.Process.Pid)) {
		t.Fatalf("the lease is held by %q, not by the first process (pid %d)", firstHolder, first.cmd.Process.Pid)
	}
	base := e.serve()
	calls(first, 1, 10)
	n := records()
	rs.WaitRecords(n)
	if h := holder(); h != firstHolder {
		t.Fatalf("the lease moved to %q while the first process ran", h)
	}

	// The first process exits: it releases the lease, guard serve takes it.
	first.in.Close()
	if err := first.cmd.Wait(); err != nil {
		t.Fatalf("guard run: %v", err)
	}
	streamtest.WaitFor(t, "guard serve to take the lease", func() bool { h := holder(); return h != "" && h != firstHolder })
	third := startLines(t, e.wrap("notes", guardBin, "example-server"))
	third.init()
	calls(third, 100, 10)
	n = records()
	rs.WaitRecords(n)
	streamtest.CheckDelivery(t, rs.Seqs(), int64(n), true)

	receiver := `guard_stream_lag_records{receiver="syslog tcp://` + rs.Addr + `"} 0`
	streamtest.WaitFor(t, "guard serve's /metrics to show the stream caught up", func() bool {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), receiver+"\n") && strings.Contains(string(b), `guard_stream_lag_seconds{receiver="syslog tcp://`+rs.Addr+`"} 0`)
	})
}
