package app

import (
	"context"
	"time"

	"github.com/guard-mcp/guard/metrics"
	"github.com/guard-mcp/guard/notify"
	"github.com/guard-mcp/guard/store"
)

// notifyMetrics adds what this process delivered to each receiver of the
// announcements of new holds (the one holding the lease "notify" does).
func notifyMetrics(reg *metrics.Registry, n *notify.Notifier) {
	if n == nil {
		return
	}
	count := func(value func(notify.Stat) uint64) func() ([]metrics.Sample, error) {
		return func() ([]metrics.Sample, error) {
			stats := n.Stats()
			out := make([]metrics.Sample, len(stats))
			for i, s := range stats {
				out[i] = metrics.Sample{Labels: []string{s.Receiver}, Value: float64(value(s))}
			}
			return out, nil
		}
	}
	reg.CounterVec("guard_notify_sent_total", "Announcements of new holds delivered, by receiver.", []string{receiverLabel},
		count(func(s notify.Stat) uint64 { return s.Sent }))
	reg.CounterVec("guard_notify_failures_total", "Attempts to deliver an announcement of a new hold that failed, by receiver.", []string{receiverLabel},
		count(func(s notify.Stat) uint64 { return s.Failures }))
	reg.CounterVec("guard_notify_given_up_total", "Announcements of new holds not delivered within their retries, by receiver.", []string{receiverLabel},
		count(func(s notify.Stat) uint64 { return s.GivenUp }))
}

// deliveryProblems lists, for the UI's Pending page, the configured
// receivers whose latest delivery event in the audit log (from any
// process) is a failure.
func deliveryProblems(db *store.DB, receivers []notify.Config) func(ctx context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		ps, err := notify.Undelivered(ctx, db.Reader(), time.Now().Add(-notify.ProblemsFor), receivers)
		lines := make([]string, len(ps))
		for i, p := range ps {
			lines[i] = p.String()
		}
		return lines, err
	}
}
