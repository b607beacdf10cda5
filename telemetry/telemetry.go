// Package telemetry exports guard's traces: the configuration's
// telemetry: section, and a tracer of its own implementing the
// OpenTelemetry API (go.opentelemetry.io/otel/trace) whose spans are
// sampled as the SDK's ParentBased(TraceIDRatioBased) sampler does,
// queued, batched by one goroutine and sent over OTLP/HTTP with
// internal/otlp, as the audit stream sends its log records.
//
// The OpenTelemetry SDK is not used: its sampler, batch processor,
// attribute handling and self-observability cost about 700 KB of a release
// binary held to 35 MB, and more CPU per span than guard's calls can
// spare. The API, the W3C propagation format (package propagation) and the
// OTLP protocol are OpenTelemetry's own; requests are written in OTLP's
// protobuf wire format directly (encode.go). Nothing here is global: no
// tracer provider is installed in the otel package; whoever needs the
// tracer is handed it. A collector that is down or slow never slows a
// call: an ended span is appended to a bounded queue (dropped past it,
// and counted), each export is bounded, and failures are counted (Stats)
// and logged when they start and end.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/internal/otlp"
	"go.opentelemetry.io/otel/trace"
)

// Config is the configuration file's telemetry: section. Tracing is off
// while OTLP is "".
type Config struct {
	// OTLP is the OTLP/HTTP receiver's base URL (http://HOST:4318), or its
	// traces URL (.../v1/traces).
	OTLP string
	// Sample is the share of traces started by guard that are sampled, 0
	// to 1 (default 1); a trace a client started keeps the client's
	// decision.
	Sample float64
	// Headers are sent with every export request (an API key): they may
	// hold secrets, and are never logged.
	Headers map[string]string
}

// On reports whether tracing is configured.
func (c Config) On() bool { return c.OTLP != "" }

// Validate checks the receiver's URL and the share sampled.
func (c Config) Validate() error {
	if !c.On() {
		if len(c.Headers) > 0 {
			return errors.New("telemetry: headers without otlp: name the receiver (otlp: http://HOST:4318)")
		}
		return nil
	}
	if _, err := otlp.SignalURL(c.OTLP, "traces"); err != nil {
		return fmt.Errorf("telemetry: otlp %q: %w", guard.DisplayURL(c.OTLP), err)
	}
	if c.Sample < 0 || c.Sample > 1 {
		return fmt.Errorf("telemetry: sample %v: use a share from 0 to 1", c.Sample)
	}
	return nil
}

// Options are what New needs besides the configuration.
type Options struct {
	// Logger gets the exporter's failures, once when they start and once
	// when they end.
	Logger *slog.Logger
	// Getenv reads the OTEL_* variables (default os.Getenv).
	Getenv func(string) string
	// Hostname is the resource's host.name (default os.Hostname).
	Hostname string
	// Version is guard's, the resource's service.version.
	Version string
	// BatchTimeout is how long a span may wait before its batch is sent
	// (default 1s).
	BatchTimeout time.Duration
}

// Tracing is a tracer whose spans go to the configured receiver.
type Tracing struct {
	p      *pipeline
	tracer trace.Tracer
}

// Scope is the instrumentation scope of guard's spans.
const Scope = "github.com/guard-mcp/guard"

// New returns the tracing cfg describes (cfg.On()), its goroutine
// started: Shutdown stops it.
func New(cfg Config, o Options) (*Tracing, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Hostname == "" {
		o.Hostname, _ = os.Hostname()
	}
	if o.BatchTimeout <= 0 {
		o.BatchTimeout = time.Second
	}
	p, err := newPipeline(cfg, o)
	if err != nil {
		return nil, err
	}
	pv := &provider{p: p, sampler: newSampler(cfg.Sample)}
	go p.run()
	return &Tracing{p: p, tracer: &tracer{pv: pv, scope: scope{Scope, o.Version}}}, nil
}

// exportTimeout bounds one export request, answer included.
const exportTimeout = 10 * time.Second

// Tracer is the tracer of guard's spans.
func (t *Tracing) Tracer() trace.Tracer { return t.tracer }

// Shutdown stops taking spans and sends those still queued, within ctx.
// It returns an error when some could not be sent in that time.
func (t *Tracing) Shutdown(ctx context.Context) error { return t.p.shutdown(ctx) }

// Stats count spans: Ended sampled spans ended, Exported those the
// receiver took, Failed those of export requests that failed (the
// receiver unreachable, refusing, too slow: not sent again), Dropped
// those the queue had no room for (or that ended after Shutdown, or were
// still queued when its time was over). Ended − Exported − Failed −
// Dropped are queued or being sent.
type Stats struct {
	Ended, Exported, Failed, Dropped int64
}

// Stats returns the counts so far.
func (t *Tracing) Stats() Stats {
	return Stats{Ended: t.p.ended.Load(), Exported: t.p.exported.Load(), Failed: t.p.failed.Load(), Dropped: t.p.dropped.Load()}
}
