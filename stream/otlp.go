package stream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"
	"strings"
	"time"

	guard "github.com/guard-mcp/guard"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploghttp"
	otellog "go.opentelemetry.io/otel/log"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	"go.opentelemetry.io/otel/sdk/resource"
)

// otlp sends records as OpenTelemetry log records over OTLP/HTTP. A
// batch is one export request, sent when send is called; the receiver has
// the records once it answered the request with success (a 2xx status):
// confirm has nothing left to wait for. The exporter's own retries are
// off: the streamer retries, from its cursor.
type otlp struct {
	endpoint string
	exp      *otlploghttp.Exporter
	provider *sdklog.LoggerProvider
	logger   otellog.Logger
	batch    *collect
	buf      []byte
	warn     func(msg string, args ...any)
}

// collect is a processor that keeps what is emitted, for the streamer to
// export itself.
type collect struct{ recs []sdklog.Record }

func (c *collect) Enabled(context.Context, sdklog.EnabledParameters) bool { return true }
func (c *collect) OnEmit(_ context.Context, r *sdklog.Record) error {
	c.recs = append(c.recs, r.Clone())
	return nil
}
func (c *collect) Shutdown(context.Context) error   { return nil }
func (c *collect) ForceFlush(context.Context) error { return nil }

// otlpTimeout bounds one export request.
const otlpTimeout = 30 * time.Second

func newOTLP(raw string, roots *x509.CertPool, hostname string, warn func(string, ...any)) (*otlp, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("otlp %q: use http(s)://HOST:PORT", guard.DisplayURL(raw))
	}
	path := strings.TrimSuffix(u.Path, "/")
	if !strings.HasSuffix(path, "/v1/logs") {
		path += "/v1/logs"
	}
	opts := []otlploghttp.Option{
		otlploghttp.WithEndpoint(u.Host),
		otlploghttp.WithURLPath(path),
		otlploghttp.WithRetry(otlploghttp.RetryConfig{Enabled: false}),
		otlploghttp.WithTimeout(otlpTimeout),
	}
	if u.Scheme == "http" {
		opts = append(opts, otlploghttp.WithInsecure())
	} else if roots != nil {
		opts = append(opts, otlploghttp.WithTLSClientConfig(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}))
	}
	exp, err := otlploghttp.New(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("otlp %s: %w", guard.DisplayURL(raw), err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", "guard"), attribute.String("host.name", hostname))
	batch := &collect{}
	provider := sdklog.NewLoggerProvider(sdklog.WithResource(res), sdklog.WithProcessor(batch))
	return &otlp{
		endpoint: u.Scheme + "://" + u.Host + path,
		exp:      exp,
		provider: provider,
		logger:   provider.Logger("github.com/guard-mcp/guard/stream"),
		batch:    batch,
		warn:     warn,
	}, nil
}

func (o *otlp) send(ctx context.Context, recs []*guard.Record) error {
	o.batch.recs = o.batch.recs[:0]
	now := time.Now()
	for _, r := range recs {
		var lr otellog.Record
		lr.SetTimestamp(r.Time)
		lr.SetObservedTimestamp(now)
		lr.SetEventName("guard.audit." + r.Kind)
		switch severity(r) {
		case Warning:
			lr.SetSeverity(otellog.SeverityWarn)
			lr.SetSeverityText("WARN")
		case Notice:
			lr.SetSeverity(otellog.SeverityInfo2)
			lr.SetSeverityText("NOTICE")
		default:
			lr.SetSeverity(otellog.SeverityInfo)
			lr.SetSeverityText("INFO")
		}
		o.buf = appendRecord(o.buf[:0], r)
		lr.SetBody(attribute.StringValue(string(o.buf)))
		lr.AddAttributes(attributes(r)...)
		o.logger.Emit(ctx, lr)
	}
	err := o.exp.Export(ctx, o.batch.recs)
	clear(o.batch.recs)
	if err != nil && strings.Contains(err.Error(), "partial success") {
		// The receiver took the request and refused some records for
		// good: sending them again would not change that.
		o.warn("the OTLP receiver refused some records", "err", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("otlp %s: %w", o.endpoint, err)
	}
	return nil
}

// attributes are the record's fields a receiver filters on most, each
// under "guard." and the audit record's name; the body holds them all
// (every attribute costs the exporter, and the collector, work per
// record).
func attributes(r *guard.Record) []attribute.KeyValue {
	kv := []attribute.KeyValue{
		attribute.Int64("guard.seq", r.Seq),
		attribute.String("guard.id", r.ID),
		attribute.String("guard.kind", r.Kind),
	}
	for _, f := range [...]struct{ k, v string }{
		{"guard.call_id", r.CallID}, {"guard.server", r.Server}, {"guard.tool", r.Tool},
		{"guard.decision", r.Decision}, {"guard.decided_by", r.DecidedBy}, {"guard.outcome", r.Outcome},
		{"guard.user", r.User}, {"guard.user_email", r.UserEmail},
	} {
		if f.v != "" {
			kv = append(kv, attribute.String(f.k, f.v))
		}
	}
	if len(r.UserGroups) > 0 {
		kv = append(kv, attribute.StringSlice("guard.user_groups", r.UserGroups))
	}
	return kv
}

func (o *otlp) confirm(context.Context) error { return nil }

// reset has nothing to drop: each batch was a request of its own.
func (o *otlp) reset() {}

func (o *otlp) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = o.provider.Shutdown(ctx)
	_ = o.exp.Shutdown(ctx)
}
