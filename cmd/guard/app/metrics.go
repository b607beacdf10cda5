package app

import (
	"context"
	"errors"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/health"
	"github.com/guard-mcp/guard/metrics"
	"github.com/guard-mcp/guard/proxy"
	"github.com/guard-mcp/guard/store"
	"github.com/guard-mcp/guard/stream"
	"github.com/guard-mcp/guard/telemetry"
)

// countingRecorder counts every finished tool call as its outcome record
// goes to the audit log; a traced call's counts carry its trace id as
// their exemplar (proxy.ContextRecorder).
type countingRecorder struct {
	proxy.Recorder
	reg *metrics.Registry
}

func (c countingRecorder) AppendAsync(recs ...*guard.Record) <-chan error {
	return c.AppendContext(context.Background(), recs...)
}

func (c countingRecorder) AppendContext(ctx context.Context, recs ...*guard.Record) <-chan error {
	for _, r := range recs {
		if r.Kind == guard.KindOutcome && r.Method == "tools/call" && r.Outcome != guard.OutcomeInputRequired {
			c.reg.Call(ctx, r.Server, r.Tool, r.Decision, r.Outcome, float64(r.DurationMS)/1000)
		}
	}
	return c.Recorder.AppendAsync(recs...)
}

// NewMetrics returns the registry of a serving process: the build, call
// counters fed by rec, pending approvals and the audit writer's latency
// from db.
func (m *Main) NewMetrics(db *store.DB) *metrics.Registry {
	reg := metrics.New(metrics.Build{Version: m.Version, Revision: m.Revision})
	reg.Gauge("guard_pending_approvals", "Calls waiting for a person's decision, in every process on this database.", func() (float64, error) {
		n, _, err := db.Holds().CountApprovals(context.Background(), guard.ApprovalPending)
		return float64(n), err
	})
	reg.Histogram("guard_audit_append_seconds", "How long an append to the audit log took until durable in the journal (waiting for room included).", db.Writing().AppendLatency())
	reg.Histogram("guard_audit_batch_records", "Records moved into the database per audit transaction.", db.Writing().BatchSizes())
	reg.Histogram("guard_audit_lock_held_seconds", "How long each audit transaction held the audit log's lock on PostgreSQL, which the writers of every replica take in turn (from the lock's answer to the COMMIT's).", db.Writing().LockHeld())
	reg.Gauge("guard_audit_backlog_records", "Audit records appended by this process and not yet in the database.", func() (float64, error) {
		return float64(db.Writing().Backlog()), nil
	})
	reg.Gauge("guard_audit_backlog_peak_records", "The most audit records this process has had waiting to go into the database.", func() (float64, error) {
		return float64(db.Writing().PeakBacklog()), nil
	})
	reg.CounterFunc("guard_audit_integrity_alerts", "Integrity alerts this process raised: a damaged journal of a process that stopped, whose acknowledged records may be lost (guard audit verify names each until it is acknowledged); a record without a valid MAC, written to the database without the checkpoint key, which guard neither builds the tree over nor signs (verify names it).", func() (float64, error) {
		return float64(db.Integrity().IntegrityAlerts()), nil
	})
	addVerifyMetrics(reg, db)
	treeMetrics(reg, db)
	retentionMetrics(reg, db)
	return reg
}

// tracingMetrics adds the tracer's counts of spans, read at scrape time
// (none while tracing is off).
func tracingMetrics(reg *metrics.Registry, t *telemetry.Tracing) {
	if t == nil {
		return
	}
	for _, c := range []struct {
		name, help string
		count      func(telemetry.Stats) int64
	}{
		{"guard_trace_spans_ended_total", "Sampled spans that ended in this process.", func(s telemetry.Stats) int64 { return s.Ended }},
		{"guard_trace_spans_exported_total", "Spans the OTLP receiver took.", func(s telemetry.Stats) int64 { return s.Exported }},
		{"guard_trace_spans_failed_total", "Spans of export requests that failed (the receiver unreachable, refusing or too slow), not sent again.", func(s telemetry.Stats) int64 { return s.Failed }},
		{"guard_trace_spans_dropped_total", "Spans dropped unsent: the queue to the receiver was full, or guard was stopping.", func(s telemetry.Stats) int64 { return s.Dropped }},
	} {
		reg.CounterFunc(c.name, c.help, func() (float64, error) { return float64(c.count(t.Stats())), nil })
	}
}

// healthMetrics adds readiness: what /readyz answers, for alerts that
// do not poll it.
func healthMetrics(reg *metrics.Registry, h *health.Checker) {
	reg.Gauge("guard_ready", "1 while /readyz answers 200 (the audit log can be written), 0 while it answers 503.", func() (float64, error) {
		if h.Ready() {
			return 1, nil
		}
		return 0, nil
	})
}

// errNoVerification leaves out the gauges of the last verification while
// there was none.
var errNoVerification = errors.New("no verification yet")

// addVerifyMetrics adds the scheduled verification's figures, read from
// the database: every process on it shows the same, whichever verified.
func addVerifyMetrics(reg *metrics.Registry, db *store.DB) {
	reg.CounterFunc("guard_audit_verify_failures_total", "Scheduled verifications of the audit log that failed (audit.verify_every), by any process on this database.", func() (float64, error) {
		n, err := db.Verifier().VerificationFailures(context.Background())
		return float64(n), err
	})
	last := func(f func(v *store.Verification) float64) func() (float64, error) {
		return func() (float64, error) {
			v, err := db.Verifier().LastVerification(context.Background())
			if err == nil && v == nil {
				err = errNoVerification
			}
			if err != nil {
				return 0, err
			}
			return f(v), nil
		}
	}
	reg.Gauge("guard_audit_verify_ok", "1 when the last scheduled verification of the audit log passed, 0 when it failed.", last(func(v *store.Verification) float64 {
		if v.OK {
			return 1
		}
		return 0
	}))
	reg.Gauge("guard_audit_verify_last_timestamp_seconds", "When the last scheduled verification of the audit log ran (Unix time).", last(func(v *store.Verification) float64 {
		return float64(v.Time.UnixMilli()) / 1000
	}))
}

// streamMetrics adds how far each receiver of the audit stream is behind,
// from the cursors in the database (whichever process streams).
func streamMetrics(reg *metrics.Registry, s *stream.Streamer) {
	if s == nil {
		return
	}
	lag := func(value func(stream.Lag) float64) func() ([]metrics.Sample, error) {
		return func() ([]metrics.Sample, error) {
			lags, err := s.Lag(context.Background())
			out := make([]metrics.Sample, len(lags))
			for i, l := range lags {
				out[i] = metrics.Sample{Labels: []string{l.Receiver}, Value: value(l)}
			}
			return out, err
		}
	}
	reg.GaugeVec("guard_stream_lag_records", "Audit records the receiver is not yet known to have.", []string{receiverLabel},
		lag(func(l stream.Lag) float64 { return float64(l.Records) }))
	reg.GaugeVec("guard_stream_lag_seconds", "Age of the oldest audit record the receiver is not yet known to have (0 when it has them all).", []string{receiverLabel},
		lag(func(l stream.Lag) float64 { return l.Age.Seconds() }))
}

// receiverLabel names the series of a receiver (of the stream, of
// announcements) by the receiver's name.
const receiverLabel = "receiver"

// retentionMetrics adds the retention job's counters, read from the
// database: every process on it shows the same, whichever ran the job.
func retentionMetrics(reg *metrics.Registry, db *store.DB) {
	total := func(failures bool) func() (float64, error) {
		return func() (float64, error) {
			pruned, failed, err := db.Pruning().RetentionTotals(context.Background())
			if failures {
				return float64(failed), err
			}
			return float64(pruned), err
		}
	}
	reg.CounterFunc("guard_audit_pruned_records_total", "Audit records whose bodies the retention job archived and removed from the database (audit.retention), by any process on this database.", total(false))
	reg.CounterFunc("guard_audit_retention_failures_total", "Runs of the retention job that failed (an archive not written or not verified, bodies not removed), by any process on this database.", total(true))
}

// treeMetrics adds the tree's counters to a serving process's metrics.
func treeMetrics(reg *metrics.Registry, db *store.DB) {
	reg.CounterFunc("guard_audit_checkpoints_refused_total", "Checkpoints not signed because the log did not extend the last one (it was truncated or rewritten).", func() (float64, error) {
		return float64(db.Integrity().CheckpointRefusals()), nil
	})
	reg.CounterFunc("guard_audit_witness_failures_total", "Checkpoints a witness (file, syslog, HTTP) did not get.", func() (float64, error) {
		return float64(db.Integrity().WitnessFailures()), nil
	})
}
