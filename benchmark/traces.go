package benchmark

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// traceSink is an OTLP/HTTP receiver that takes export requests and
// discards them, answering success: what tracing costs guard, without a
// collector's own cost on the machine.
type traceSink struct {
	url      string
	srv      *http.Server
	requests atomic.Int64
	bytes    atomic.Int64
}

func startTraceSink() (*traceSink, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("trace sink: %w", err)
	}
	s := &traceSink{url: "http://" + l.Addr().String()}
	s.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		s.requests.Add(1)
		s.bytes.Add(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = s.srv.Serve(l) }()
	return s, nil
}

func (s *traceSink) close() { _ = s.srv.Close() }

// tracingCost compares, for a lone caller, each durability mode's row with
// tracing on with the row without: what a call costs more when every call
// is traced (medians over the rounds of each round's difference).
func (rep *Report) tracingCost(w io.Writer, modes []string, sink *traceSink) {
	fmt.Fprintf(w, "trace sink: %d export requests, %d bytes\n", sink.requests.Load(), sink.bytes.Load())
	for _, d := range modes {
		off, on := rep.find("guard durability="+d, 1), rep.find("guard "+d+" +traces", 1)
		if len(off) == 0 || len(off) != len(on) {
			continue
		}
		var cpu, p50 []time.Duration
		var rate []float64
		for i := range off {
			cpu = append(cpu, on[i].treePerCall()-off[i].treePerCall())
			p50 = append(p50, on[i].p50()-off[i].p50())
			rate = append(rate, on[i].perSec()/off[i].perSec())
		}
		fmt.Fprintf(w, "tracing on, stdio %s, 1 caller: cpu/call with children %s more than off (median of %d rounds), p50 %s more, calls/s %.2f of off\n",
			d, fmtDur(median(cpu)), len(off), fmtDur(median(p50)), median(rate))
	}
}
