package metrics

import (
	"context"
	"errors"
	"net/http/httptest"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// scrape reads r's metrics as a scraper that sends accept would.
func scrape(t *testing.T, r *Registry, accept string) (string, string) {
	t.Helper()
	req := httptest.NewRequest("GET", "/metrics", nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body)
	}
	return rec.Header().Get("Content-Type"), rec.Body.String()
}

func wantLines(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("missing %q in:\n%s", w, out)
		}
	}
}

const openMetrics = "application/openmetrics-text; version=1.0.0"

func TestRegistryText(t *testing.T) {
	r := New(Build{Version: "v1.2.3", Revision: "abc123"})
	ctx := context.Background()
	r.Call(ctx, "files", `we"ird`, "allowed", "ok", 0.0003)
	r.Call(ctx, "files", `we"ird`, "allowed", "ok", 2)
	r.Call(ctx, "files", "rm", "denied", "denied", 0)
	h := NewHistogram([]float64{0.001, 0.01})
	h.Observe(0.0005)
	h.Observe(0.5)
	r.Histogram("guard_audit_append_seconds", "append", h)
	r.Gauge("guard_pending_approvals", "pending", func() (float64, error) { return 7, nil })
	r.Gauge("guard_audit_verify_ok", "unknown yet", func() (float64, error) { return 0, errors.New("no verification yet") })
	r.CounterFunc("guard_audit_witness_failures_total", "witness", func() (float64, error) { return 2, nil })
	typ, out := scrape(t, r, "")
	if !strings.HasPrefix(typ, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q", typ)
	}
	wantLines(t, out,
		`guard_calls_total{decision="denied",outcome="denied",server="files",tool="rm"} 1`,
		`guard_calls_total{decision="allowed",outcome="ok",server="files",tool="we\"ird"} 2`,
		"# TYPE guard_calls_total counter\n",
		`guard_call_duration_seconds_bucket{server="files",le="0.0005"} 2`,
		`guard_call_duration_seconds_bucket{server="files",le="+Inf"} 3`,
		`guard_call_duration_seconds_count{server="files"} 3`,
		"# TYPE guard_audit_append_seconds histogram\n",
		`guard_audit_append_seconds_bucket{le="0.001"} 1`,
		`guard_audit_append_seconds_bucket{le="0.01"} 1`,
		`guard_audit_append_seconds_bucket{le="+Inf"} 2`,
		"guard_audit_append_seconds_sum 0.5005\n",
		"guard_audit_append_seconds_count 2\n",
		"guard_pending_approvals 7\n",
		"# TYPE guard_audit_witness_failures_total counter\nguard_audit_witness_failures_total 2\n",
		`guard_build_info{goarch="`+runtime.GOARCH+`",goos="`+runtime.GOOS+`",revision="abc123",version="v1.2.3"} 1`,
		"# TYPE go_goroutines gauge\n",
		"# TYPE go_gc_duration_seconds summary\n",
	)
	if runtime.GOOS == "linux" {
		wantLines(t, out, "# TYPE process_cpu_seconds_total counter\n", "process_resident_memory_bytes ", "process_open_fds ")
	}
	if strings.Contains(out, "guard_audit_verify_ok") {
		t.Errorf("a value that could not be read is shown:\n%s", out)
	}
}

func TestVecs(t *testing.T) {
	r := New(Build{Version: "devel"})
	r.GaugeVec("guard_stream_lag_records", "lag", []string{"receiver"}, func() ([]Sample, error) {
		return []Sample{{Labels: []string{"syslog tcp://a:1"}, Value: 3}, {Labels: []string{`otlp "b"`}, Value: 0}}, nil
	})
	r.CounterVec("guard_notify_sent_total", "sent", []string{"receiver"}, func() ([]Sample, error) {
		return []Sample{{Labels: []string{"json https://ops.example.com 1a2b3c"}, Value: 4}}, nil
	})
	r.GaugeVec("guard_stream_lag_seconds", "age", []string{"receiver"}, func() ([]Sample, error) {
		return []Sample{{Labels: []string{"syslog tcp://a:1"}, Value: 1}}, errors.New("database gone")
	})
	_, out := scrape(t, r, "")
	wantLines(t, out,
		"# TYPE guard_stream_lag_records gauge\n",
		`guard_stream_lag_records{receiver="syslog tcp://a:1"} 3`+"\n",
		`guard_stream_lag_records{receiver="otlp \"b\""} 0`+"\n",
		"# TYPE guard_notify_sent_total counter\n",
		`guard_notify_sent_total{receiver="json https://ops.example.com 1a2b3c"} 4`+"\n",
	)
	if strings.Contains(out, "guard_stream_lag_seconds") {
		t.Errorf("series read with an error are shown:\n%s", out)
	}
}

// A scraper that asks for OpenMetrics gets it, and the calls made in a
// trace carry its id as their exemplar; calls outside one carry none.
func TestOpenMetricsExemplars(t *testing.T) {
	r := New(Build{Version: "devel"})
	tid := trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{0, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}, TraceFlags: trace.FlagsSampled})
	r.Call(trace.ContextWithSpanContext(context.Background(), sc), "files", "read", "allowed", "ok", 0.0007)
	r.Call(context.Background(), "files", "write", "allowed", "ok", 0.3)
	typ, out := scrape(t, r, openMetrics)
	if !strings.HasPrefix(typ, "application/openmetrics-text") {
		t.Fatalf("Content-Type %q", typ)
	}
	ex := `# {trace_id="4bf92f3577b34da6a3ce929d0e0e4736"}`
	wantLines(t, out,
		`guard_calls_total{decision="allowed",outcome="ok",server="files",tool="read"} 1.0 `+ex+" 1.0 ",
		`guard_call_duration_seconds_bucket{server="files",le="0.001"} 1 `+ex+" 0.0007 ",
		"# EOF\n",
	)
	if m := regexp.MustCompile(`(?m)^guard_calls_total\{[^}]*tool="write"\} 1\.0.*$`).FindString(out); strings.Contains(m, "#") {
		t.Errorf("a call outside a trace has an exemplar: %s", m)
	}
	// The text format has no exemplars, and is what a scraper that asks
	// for nothing gets.
	if _, text := scrape(t, r, ""); strings.Contains(text, "trace_id") {
		t.Errorf("the text format shows exemplars:\n%s", text)
	}
}

func TestHistogramSnapshot(t *testing.T) {
	h := NewHistogram([]float64{1, 2})
	for _, v := range []float64{0.5, 1, 1.5, 3} {
		h.Observe(v)
	}
	count, sum, buckets := h.snapshot()
	if count != 4 || sum != 6 || buckets[1] != 2 || buckets[2] != 3 {
		t.Errorf("snapshot: %d %g %v", count, sum, buckets)
	}
}

// BenchmarkCall is what counting one finished call costs, outside a trace
// and in one (with its exemplar), from several goroutines at once.
func BenchmarkCall(b *testing.B) {
	r := New(Build{Version: "devel"})
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled})
	for _, bc := range []struct {
		name string
		ctx  context.Context
	}{{"untraced", context.Background()}, {"traced", trace.ContextWithSpanContext(context.Background(), sc)}} {
		b.Run(bc.name, func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r.Call(bc.ctx, "files", "read_file", "allowed", "ok", 0.0004)
				}
			})
		})
	}
}
