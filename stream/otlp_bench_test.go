package stream

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
)

// What sending records over OTLP costs guard: encoding a batch of 200
// (a request and an outcome per call, every fifth caller authenticated)
// and posting it, per record. The receiver reads each request and answers
// success; it is a test server, so that its work stays out of the figure.
func BenchmarkOTLPSend(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer srv.Close()
	o, err := newOTLP(srv.URL, nil, "bench-host", func(string, ...any) {})
	if err != nil {
		b.Fatal(err)
	}
	defer o.close()
	recs := make([]*guard.Record, 200)
	now := time.Now()
	for i := range recs {
		r := &guard.Record{Seq: int64(i + 1), ID: guard.NewID(), CallID: guard.NewID(), Kind: guard.KindRequest, Time: now,
			Server: "files", Method: "tools/call", Tool: "write_file", Decision: guard.DecisionAllowed, DecidedBy: "default",
			Arguments: fmt.Sprintf(`{"path":"/tmp/f%d","text":"%s"}`, i, strings.Repeat("x", 200)),
			PrevHash:  strings.Repeat("a", 64), Hash: strings.Repeat("b", 64)}
		if i%2 == 1 {
			r.Kind, r.Outcome, r.Result, r.Arguments = guard.KindOutcome, guard.OutcomeOK, `{"content":[{"type":"text","text":"ok"}]}`, ""
		}
		if i%10 < 2 {
			r.User, r.UserEmail, r.UserGroups = streamUser.Subject, streamUser.Email, streamUser.Groups
		}
		recs[i] = r
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := o.send(context.Background(), recs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
}
