package metrics

import (
	"strings"
	"testing"
)

func TestRegistryWrite(t *testing.T) {
	r := New()
	r.Call("files", `we"ird`, "allowed", "ok", 0.0003)
	r.Call("files", `we"ird`, "allowed", "ok", 2)
	r.Call("files", "rm", "denied", "denied", 0)
	h := NewHistogram([]float64{0.001, 0.01})
	h.Observe(0.0005)
	h.Observe(0.5)
	r.Histogram("guard_audit_append_seconds", "append", h)
	r.Gauge("guard_pending_approvals", "pending", func() (float64, error) { return 7, nil })
	var b strings.Builder
	r.Write(&b)
	out := b.String()
	for _, want := range []string{
		`guard_calls_total{server="files",tool="rm",decision="denied",outcome="denied"} 1`,
		`guard_calls_total{server="files",tool="we\"ird",decision="allowed",outcome="ok"} 2`,
		`guard_call_duration_seconds_bucket{server="files",le="0.0005"} 2`,
		`guard_call_duration_seconds_bucket{server="files",le="+Inf"} 3`,
		`guard_call_duration_seconds_count{server="files"} 3`,
		`guard_audit_append_seconds_bucket{le="0.001"} 1`,
		`guard_audit_append_seconds_bucket{le="0.01"} 1`,
		`guard_audit_append_seconds_bucket{le="+Inf"} 2`,
		`guard_audit_append_seconds_sum 0.5005`,
		"guard_pending_approvals 7",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}

func TestGaugeVec(t *testing.T) {
	r := New()
	r.GaugeVec("guard_stream_lag_records", "lag", func() ([]Sample, error) {
		return []Sample{
			{Labels: [][2]string{{"receiver", "syslog tcp://a:1"}}, Value: 3},
			{Labels: [][2]string{{"receiver", `otlp "b"`}}, Value: 0},
		}, nil
	})
	var b strings.Builder
	r.Write(&b)
	out := b.String()
	for _, want := range []string{
		"# TYPE guard_stream_lag_records gauge\n",
		`guard_stream_lag_records{receiver="syslog tcp://a:1"} 3` + "\n",
		`guard_stream_lag_records{receiver="otlp \"b\""} 0` + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}

func TestCounterVec(t *testing.T) {
	r := New()
	r.CounterVec("guard_notify_sent_total", "sent", func() ([]Sample, error) {
		return []Sample{{Labels: [][2]string{{"receiver", "json https://ops.example.com 1a2b3c"}}, Value: 4}}, nil
	})
	var b strings.Builder
	r.Write(&b)
	out := b.String()
	for _, want := range []string{
		"# TYPE guard_notify_sent_total counter\n",
		`guard_notify_sent_total{receiver="json https://ops.example.com 1a2b3c"} 4` + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}
