package store

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	guard "github.com/guard-mcp/guard"
)

// BenchmarkAppendCall appends one call per op as the proxy does: its
// request record, then its outcome record, each an append of its own,
// with a distinct call id and arguments and a result of a realistic
// size. cpu-ns/op includes the ingester's work for both records.
//
// "caught-up" waits after each call until its records are in the
// database, so that every call is a transaction of its own (or two): the
// ingester's cost per transaction, as a guard with few calls has it.
func BenchmarkAppendCall(b *testing.B) {
	for _, n := range []int{0, 1, 8} {
		name := fmt.Sprintf("normal/%d", n)
		if n == 0 {
			name = "normal/caught-up"
		}
		b.Run(name, func(b *testing.B) {
			db, err := Open(context.Background(), Options{Path: filepath.Join(b.TempDir(), "b.db"), Durability: "normal"})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			defer reportCPU(b, db)()
			var next atomic.Int64
			b.SetParallelism(max(n, 1))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := next.Add(1)
					req := &guard.Record{CallID: guard.NewID(), Kind: guard.KindRequest, Session: "s1", Client: "claude-ai/0.1.0",
						Server: "files", Method: "tools/call", Tool: "write_file", Decision: guard.DecisionAllowed, DecidedBy: "default",
						Arguments: fmt.Sprintf(`{"path":"/srv/data/project-%d/report.txt","content":"quarterly revenue figures for the board, draft %d"}`, i%97, i)}
					out := &guard.Record{CallID: req.CallID, Kind: guard.KindOutcome, Session: "s1", Client: req.Client,
						Server: "files", Method: "tools/call", Tool: "write_file", Decision: guard.DecisionAllowed, DecidedBy: "default",
						Outcome: guard.OutcomeOK, Result: fmt.Sprintf(`{"content":[{"type":"text","text":"wrote %d bytes to /srv/data/project-%d/report.txt"}]}`, 40+i%1000, i%97)}
					if err := db.Append(req); err != nil {
						b.Fatal(err)
					}
					if err := db.Append(out); err != nil {
						b.Fatal(err)
					}
					if n == 0 {
						db.ing.caughtUp(context.Background())
					}
				}
			})
		})
	}
}
