// Package metrics keeps guard's operational figures and serves them to
// Prometheus: counters of calls by server, tool, decision and outcome,
// latency histograms, values read at scrape time, the Go runtime's and
// the process's figures, and the build. It is client_golang underneath,
// one registry per process (no global one), in the text format or in
// OpenMetrics (with exemplars) as the scraper asks.
package metrics

import (
	"context"
	"net/http"
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
)

// Build identifies the running binary in guard_build_info.
type Build struct {
	Version  string
	Revision string // "" when unknown
}

// Registry holds one process's metrics.
type Registry struct {
	reg     *prometheus.Registry
	calls   *prometheus.CounterVec
	latency *prometheus.HistogramVec
}

// New returns a registry with the Go runtime's and the process's
// collectors, guard_build_info for b, and the per-call series.
func New(b Build) *Registry {
	r := &Registry{
		reg: prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "guard_calls_total",
			Help: "Tool calls that ended, by server, tool, decision and outcome.",
		}, []string{"server", "tool", "decision", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "guard_call_duration_seconds",
			Help:    "How long tool calls took through guard, holds included.",
			Buckets: LatencyBuckets,
		}, []string{"server"}),
	}
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "guard_build_info",
		Help: "Always 1: the version and revision of the running guard, and its platform.",
	}, []string{"version", "revision", "goos", "goarch"})
	info.WithLabelValues(b.Version, b.Revision, runtime.GOOS, runtime.GOARCH).Set(1)
	r.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		info, r.calls, r.latency,
	)
	return r
}

// Call counts one finished tool call and its duration. When ctx carries
// a sampled OpenTelemetry span context, the counter and the histogram
// keep its trace id as their exemplar, so that a scraper taking
// OpenMetrics leads from a rate or a slow bucket to the trace of a call
// (a trace not sampled was not exported: its id would lead nowhere).
func (r *Registry) Call(ctx context.Context, server, tool, decision, outcome string, seconds float64) {
	c := r.calls.WithLabelValues(server, tool, decision, outcome)
	h := r.latency.WithLabelValues(server)
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsSampled() || !sc.IsValid() {
		c.Inc()
		h.Observe(seconds)
		return
	}
	ex := prometheus.Labels{"trace_id": sc.TraceID().String()}
	c.(prometheus.ExemplarAdder).AddWithExemplar(1, ex)
	h.(prometheus.ExemplarObserver).ObserveWithExemplar(seconds, ex)
}

// Handler serves the metrics: OpenMetrics to a scraper that asks for it
// (exemplars are only in that format), else the text format, gzipped
// when accepted. A value that cannot be read leaves its series out of
// that scrape rather than failing it.
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{EnableOpenMetrics: true, ErrorHandling: promhttp.ContinueOnError})
}

// Gauge adds a value read when the metrics are scraped; a read that fails
// leaves the series out.
func (r *Registry) Gauge(name, help string, read func() (float64, error)) {
	r.reg.MustRegister(newFuncCollector(name, help, prometheus.GaugeValue, read))
}

// CounterFunc adds a counter whose value is kept elsewhere and read when
// the metrics are scraped (it must only grow); a read that fails leaves
// the series out.
func (r *Registry) CounterFunc(name, help string, read func() (float64, error)) {
	r.reg.MustRegister(newFuncCollector(name, help, prometheus.CounterValue, read))
}

// Sample is one series of a labelled value: its label values, in the
// order of the label names given with it, and its value.
type Sample struct {
	Labels []string
	Value  float64
}

// GaugeVec adds a gauge of several series, told apart by the labels
// named, read when the metrics are scraped.
func (r *Registry) GaugeVec(name, help string, labels []string, read func() ([]Sample, error)) {
	r.reg.MustRegister(newVecCollector(name, help, prometheus.GaugeValue, labels, read))
}

// CounterVec adds a counter of several series, told apart by the labels
// named, whose values are kept elsewhere and read when the metrics are
// scraped (each must only grow).
func (r *Registry) CounterVec(name, help string, labels []string, read func() ([]Sample, error)) {
	r.reg.MustRegister(newVecCollector(name, help, prometheus.CounterValue, labels, read))
}

// Histogram adds a histogram kept elsewhere (the audit writer's).
func (r *Registry) Histogram(name, help string, h *Histogram) {
	r.reg.MustRegister(&histogramCollector{desc: prometheus.NewDesc(name, help, nil, nil), h: h})
}

// funcCollector is one series whose value is read at scrape time.
type funcCollector struct {
	desc *prometheus.Desc
	kind prometheus.ValueType
	read func() (float64, error)
}

func newFuncCollector(name, help string, kind prometheus.ValueType, read func() (float64, error)) *funcCollector {
	return &funcCollector{desc: prometheus.NewDesc(name, help, nil, nil), kind: kind, read: read}
}

// Describe implements prometheus.Collector.
func (f *funcCollector) Describe(ch chan<- *prometheus.Desc) { ch <- f.desc }

// Collect implements prometheus.Collector.
func (f *funcCollector) Collect(ch chan<- prometheus.Metric) {
	if v, err := f.read(); err == nil {
		ch <- prometheus.MustNewConstMetric(f.desc, f.kind, v)
	}
}

// vecCollector is labelled series whose values are read at scrape time.
type vecCollector struct {
	desc *prometheus.Desc
	kind prometheus.ValueType
	read func() ([]Sample, error)
}

func newVecCollector(name, help string, kind prometheus.ValueType, labels []string, read func() ([]Sample, error)) *vecCollector {
	return &vecCollector{desc: prometheus.NewDesc(name, help, labels, nil), kind: kind, read: read}
}

// Describe implements prometheus.Collector.
func (v *vecCollector) Describe(ch chan<- *prometheus.Desc) { ch <- v.desc }

// Collect implements prometheus.Collector: the samples read, all or none.
func (v *vecCollector) Collect(ch chan<- prometheus.Metric) {
	samples, err := v.read()
	if err != nil {
		return
	}
	for _, s := range samples {
		if m, err := prometheus.NewConstMetric(v.desc, v.kind, s.Value, s.Labels...); err == nil {
			ch <- m
		}
	}
}

// histogramCollector serves a Histogram kept elsewhere.
type histogramCollector struct {
	desc *prometheus.Desc
	h    *Histogram
}

// Describe implements prometheus.Collector.
func (c *histogramCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *histogramCollector) Collect(ch chan<- prometheus.Metric) {
	count, sum, buckets := c.h.snapshot()
	ch <- prometheus.MustNewConstHistogram(c.desc, count, sum, buckets)
}
