package metrics

import (
	"math"
	"sort"
	"sync/atomic"
)

// Histogram counts observations (in seconds, or records) into fixed
// buckets, for a part that keeps its figures before any registry exists
// (the audit writer): Registry.Histogram serves it. Safe for concurrent
// use without locks.
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
func (h *Histogram) Observe(v float64) {
	i := sort.SearchFloat64s(h.bounds, v)
	h.counts[i].Add(1)
	h.n.Add(1)
	for {
		old := h.sum.Load()
		if h.sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// Count is the number of observations.
func (h *Histogram) Count() uint64 { return h.n.Load() }

// Sum is the sum of the observations.
func (h *Histogram) Sum() float64 { return math.Float64frombits(h.sum.Load()) }

// snapshot returns the count, the sum and the cumulative count of each
// upper bound. The count is the buckets' total, so that a scrape during
// an Observe is consistent in itself.
func (h *Histogram) snapshot() (count uint64, sum float64, buckets map[float64]uint64) {
	buckets = make(map[float64]uint64, len(h.bounds))
	for i, b := range h.bounds {
		count += h.counts[i].Load()
		buckets[b] = count
	}
	count += h.counts[len(h.bounds)].Load()
	return count, h.Sum(), buckets
}
