// Package telemetry exports guard's traces: the configuration's
// telemetry: section, a tracer from the OpenTelemetry SDK (sampling,
// batching) whose spans an exporter of its own sends over OTLP/HTTP with
// internal/otlp, as the audit stream sends its log records.
//
// The SDK's own OTLP exporters are not used: they link gRPC and its HTTP
// gateway (see internal/otlp). Nothing here is global: no tracer provider
// is installed in the otel package; whoever needs the tracer is handed it.
// A collector that is down or slow never slows a call: spans wait in the
// batch processor's queue (dropped past it), each export is bounded, and
// failures are counted (Stats) and logged when they start and end, never
// passed to the SDK's global error handler.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/internal/otlp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
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
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	exp      *exporter
	ended    *atomic.Int64
}

// Scope is the instrumentation scope of guard's spans.
const Scope = "github.com/guard-mcp/guard"

// New returns the tracing cfg describes (cfg.On()).
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
	exp, err := newExporter(cfg, o)
	if err != nil {
		return nil, err
	}
	ended := new(atomic.Int64)
	p := sdktrace.NewTracerProvider(
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.Sample))),
		sdktrace.WithSpanProcessor(counter{ended}),
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(o.BatchTimeout), sdktrace.WithExportTimeout(exportTimeout)),
	)
	return &Tracing{provider: p, tracer: p.Tracer(Scope, trace.WithInstrumentationVersion(o.Version)), exp: exp, ended: ended}, nil
}

// exportTimeout bounds one export request, answer included.
const exportTimeout = 10 * time.Second

// Tracer is the tracer of guard's spans.
func (t *Tracing) Tracer() trace.Tracer { return t.tracer }

// Shutdown sends the spans still queued, within ctx, and stops.
func (t *Tracing) Shutdown(ctx context.Context) error {
	err := t.provider.Shutdown(ctx)
	t.exp.client.Close()
	if err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	return nil
}

// Stats count spans: Ended sampled spans ended, Exported those the
// receiver took, Failed those of export requests that failed (the
// receiver unreachable, refusing, too slow: not sent again). Ended −
// Exported − Failed are queued, or were dropped when the queue was full.
type Stats struct {
	Ended, Exported, Failed int64
}

// Stats returns the counts so far.
func (t *Tracing) Stats() Stats {
	return Stats{Ended: t.ended.Load(), Exported: t.exp.exported.Load(), Failed: t.exp.failed.Load()}
}

// counter counts the sampled spans that end.
type counter struct{ n *atomic.Int64 }

func (c counter) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (c counter) OnEnd(sdktrace.ReadOnlySpan)                     { c.n.Add(1) }
func (c counter) Shutdown(context.Context) error                  { return nil }
func (c counter) ForceFlush(context.Context) error                { return nil }
