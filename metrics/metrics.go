// Package metrics keeps guard's operational figures and writes them in the
// Prometheus text exposition format: counters of calls by server, tool,
// decision and outcome, latency histograms, and gauges read at scrape time.
package metrics

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Histogram counts observations (in seconds, or records) into fixed buckets. Safe for
// concurrent use without locks.
type Histogram struct {
	bounds []float64
	counts []atomic.Uint64 // per bucket, not cumulative; the last is +Inf
	sum    atomic.Uint64   // float64 bits
	n      atomic.Uint64
}

// LatencyBuckets span 50 µs to 10 s.
var LatencyBuckets = []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10}

// NewHistogram returns a histogram with the given upper bounds.
func NewHistogram(bounds []float64) *Histogram {
	return &Histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds)+1)}
}

// Observe adds one observation.
func (h *Histogram) Observe(seconds float64) {
	i := sort.SearchFloat64s(h.bounds, seconds)
	h.counts[i].Add(1)
	h.n.Add(1)
	for {
		old := h.sum.Load()
		if h.sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+seconds)) {
			return
		}
	}
}

// Count is the number of observations.
func (h *Histogram) Count() uint64 { return h.n.Load() }

// Sum is the sum of the observations.
func (h *Histogram) Sum() float64 { return math.Float64frombits(h.sum.Load()) }

// write writes the histogram's series with the given labels.
func (h *Histogram) write(w io.Writer, name, labels string) {
	var cum uint64
	for i, b := range h.bounds {
		cum += h.counts[i].Load()
		fmt.Fprintf(w, "%s_bucket{%s} %d\n", name, join(labels, `le="`+strconv.FormatFloat(b, 'g', -1, 64)+`"`), cum)
	}
	cum += h.counts[len(h.bounds)].Load()
	fmt.Fprintf(w, "%s_bucket{%s} %d\n", name, join(labels, `le="+Inf"`), cum)
	fmt.Fprintf(w, "%s_sum%s %g\n", name, braces(labels), math.Float64frombits(h.sum.Load()))
	fmt.Fprintf(w, "%s_count%s %d\n", name, braces(labels), h.n.Load())
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "," + b
}

func braces(labels string) string {
	if labels == "" {
		return ""
	}
	return "{" + labels + "}"
}

// label renders one label pair, escaped as the format requires.
func label(name, value string) string {
	v := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(value)
	return name + `="` + v + `"`
}

// callKey identifies a counter of calls.
type callKey struct{ server, tool, decision, outcome string }

// Registry holds guard's metrics.
type Registry struct {
	mu       sync.Mutex
	calls    map[callKey]uint64
	latency  map[string]*Histogram // by server
	gauges   []gauge
	vecs     []gaugeVec
	external []external
}

type gauge struct {
	name, help string
	read       func() (float64, error)
	kind       string // "gauge" or "counter"
}

// Sample is one series of a labelled gauge: its labels, in order, and
// its value.
type Sample struct {
	Labels [][2]string
	Value  float64
}

type gaugeVec struct {
	name, help string
	read       func() ([]Sample, error)
	kind       string // "gauge" or "counter"
}

type external struct {
	name, help string
	h          *Histogram
}

// New returns an empty registry.
func New() *Registry {
	return &Registry{calls: map[callKey]uint64{}, latency: map[string]*Histogram{}}
}

// Call counts one finished tool call and its duration.
func (r *Registry) Call(server, tool, decision, outcome string, seconds float64) {
	r.mu.Lock()
	r.calls[callKey{server, tool, decision, outcome}]++
	h := r.latency[server]
	if h == nil {
		h = NewHistogram(LatencyBuckets)
		r.latency[server] = h
	}
	r.mu.Unlock()
	h.Observe(seconds)
}

// Gauge adds a value read when the metrics are scraped.
func (r *Registry) Gauge(name, help string, read func() (float64, error)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gauges = append(r.gauges, gauge{name, help, read, "gauge"})
}

// CounterFunc adds a counter whose value is kept elsewhere and read when
// the metrics are scraped (it must only grow).
func (r *Registry) CounterFunc(name, help string, read func() (float64, error)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gauges = append(r.gauges, gauge{name, help, read, "counter"})
}

// GaugeVec adds a gauge of several series, told apart by their labels,
// read when the metrics are scraped.
func (r *Registry) GaugeVec(name, help string, read func() ([]Sample, error)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.vecs = append(r.vecs, gaugeVec{name, help, read, "gauge"})
}

// CounterVec adds a counter of several series, told apart by their
// labels, whose values are kept elsewhere and read when the metrics are
// scraped (each must only grow).
func (r *Registry) CounterVec(name, help string, read func() ([]Sample, error)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.vecs = append(r.vecs, gaugeVec{name, help, read, "counter"})
}

// Histogram adds a histogram kept elsewhere (the audit writer's).
func (r *Registry) Histogram(name, help string, h *Histogram) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.external = append(r.external, external{name, help, h})
}

// Write writes every metric in the Prometheus text format.
func (r *Registry) Write(w io.Writer) {
	r.mu.Lock()
	keys := make([]callKey, 0, len(r.calls))
	for k := range r.calls {
		keys = append(keys, k)
	}
	counts := make(map[callKey]uint64, len(r.calls))
	for k, v := range r.calls {
		counts[k] = v
	}
	servers := make([]string, 0, len(r.latency))
	for s := range r.latency {
		servers = append(servers, s)
	}
	lat := r.latency
	gauges := append([]gauge(nil), r.gauges...)
	vecs := append([]gaugeVec(nil), r.vecs...)
	ext := append([]external(nil), r.external...)
	r.mu.Unlock()
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		return a.server+"\x00"+a.tool+"\x00"+a.decision+"\x00"+a.outcome < b.server+"\x00"+b.tool+"\x00"+b.decision+"\x00"+b.outcome
	})
	sort.Strings(servers)
	fmt.Fprintln(w, "# HELP guard_calls_total Tool calls that ended, by server, tool, decision and outcome.")
	fmt.Fprintln(w, "# TYPE guard_calls_total counter")
	for _, k := range keys {
		fmt.Fprintf(w, "guard_calls_total{%s,%s,%s,%s} %d\n", label("server", k.server), label("tool", k.tool),
			label("decision", k.decision), label("outcome", k.outcome), counts[k])
	}
	fmt.Fprintln(w, "# HELP guard_call_duration_seconds How long tool calls took through guard, holds included.")
	fmt.Fprintln(w, "# TYPE guard_call_duration_seconds histogram")
	for _, s := range servers {
		r.mu.Lock()
		h := lat[s]
		r.mu.Unlock()
		h.write(w, "guard_call_duration_seconds", label("server", s))
	}
	for _, g := range gauges {
		v, err := g.read()
		if err != nil {
			continue
		}
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s %g\n", g.name, g.help, g.name, g.kind, g.name, v)
	}
	for _, g := range vecs {
		samples, err := g.read()
		if err != nil {
			continue
		}
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", g.name, g.help, g.name, g.kind)
		for _, s := range samples {
			var labels []string
			for _, l := range s.Labels {
				labels = append(labels, label(l[0], l[1]))
			}
			fmt.Fprintf(w, "%s%s %g\n", g.name, braces(strings.Join(labels, ",")), s.Value)
		}
	}
	for _, e := range ext {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s histogram\n", e.name, e.help, e.name)
		e.h.write(w, e.name, "")
	}
}
