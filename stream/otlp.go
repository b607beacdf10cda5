package stream

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/internal/otlp"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
)

// otlpSender sends records as OpenTelemetry log records over OTLP/HTTP. A
// batch is one export request, sent when send is called; the receiver has
// the records once it answered the request with success (a 2xx status):
// confirm has nothing left to wait for. The client does not retry: the
// streamer does, from its cursor.
type otlpSender struct {
	endpoint string
	client   *otlp.Client
	// logs holds the resource and the scope, the same for every request;
	// send puts each batch's records in its scope.
	logs *logspb.ResourceLogs
	buf  []byte
	req  []byte
	warn func(msg string, args ...any)
}

// otlpTimeout bounds one export request.
const otlpTimeout = 30 * time.Second

// otlpScope is the instrumentation scope of guard's log records.
const otlpScope = "github.com/guard-mcp/guard/stream"

func newOTLP(raw string, roots *x509.CertPool, hostname string, warn func(string, ...any)) (*otlpSender, error) {
	endpoint, err := otlp.SignalURL(raw, "logs")
	if err != nil {
		return nil, fmt.Errorf("otlp %q: %w", guard.DisplayURL(raw), err)
	}
	client, err := otlp.New(otlp.Config{URL: endpoint, Signal: "logs", RootCAs: roots, Timeout: otlpTimeout})
	if err != nil {
		return nil, fmt.Errorf("otlp %s: %w", guard.DisplayURL(raw), err)
	}
	res, err := otlp.Resource(nil, map[string]string{"service.name": "guard", "host.name": hostname})
	if err != nil {
		return nil, fmt.Errorf("otlp %s: %w", guard.DisplayURL(raw), err)
	}
	return &otlpSender{
		endpoint: endpoint,
		client:   client,
		logs: &logspb.ResourceLogs{Resource: res, ScopeLogs: []*logspb.ScopeLogs{{
			Scope: &commonpb.InstrumentationScope{Name: otlpScope}}}},
		warn: warn,
	}, nil
}

func (o *otlpSender) send(ctx context.Context, recs []*guard.Record) error {
	now := unixNano(time.Now())
	lrs := make([]*logspb.LogRecord, len(recs))
	for i, r := range recs {
		lr := &logspb.LogRecord{
			TimeUnixNano:         unixNano(r.Time),
			ObservedTimeUnixNano: now,
			EventName:            "guard.audit." + r.Kind,
			Attributes:           attributes(r),
		}
		switch severity(r) {
		case Warning:
			lr.SeverityNumber, lr.SeverityText = logspb.SeverityNumber_SEVERITY_NUMBER_WARN, "WARN"
		case Notice:
			lr.SeverityNumber, lr.SeverityText = logspb.SeverityNumber_SEVERITY_NUMBER_INFO2, "NOTICE"
		default:
			lr.SeverityNumber, lr.SeverityText = logspb.SeverityNumber_SEVERITY_NUMBER_INFO, "INFO"
		}
		o.buf = appendRecord(o.buf[:0], r)
		lr.Body = otlp.StringValue(string(o.buf))
		lrs[i] = lr
	}
	scope := o.logs.ScopeLogs[0]
	scope.LogRecords = lrs
	var err error
	o.req, err = otlp.AppendRequest(o.req[:0], o.logs)
	scope.LogRecords = nil
	if err == nil {
		err = o.client.Export(ctx, o.req)
	}
	if partial := (*otlp.PartialError)(nil); errors.As(err, &partial) {
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

// unixNano is t as OTLP has it: nanoseconds since 1970, 0 before.
func unixNano(t time.Time) uint64 {
	return uint64(max(t.UnixNano(), 0))
}

// attributes are the record's fields a receiver filters on most, each
// under "guard." and the audit record's name; the body holds them all
// (every attribute costs the receiver work per record).
func attributes(r *guard.Record) []*commonpb.KeyValue {
	kv := make([]*commonpb.KeyValue, 0, 12)
	kv = append(kv,
		&commonpb.KeyValue{Key: "guard.seq", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: r.Seq}}},
		otlp.String("guard.id", r.ID),
		otlp.String("guard.kind", r.Kind))
	for _, f := range [...]struct{ k, v string }{
		{"guard.call_id", r.CallID}, {"guard.server", r.Server}, {"guard.tool", r.Tool},
		{"guard.decision", r.Decision}, {"guard.decided_by", r.DecidedBy}, {"guard.outcome", r.Outcome},
		{"guard.user", r.User}, {"guard.user_email", r.UserEmail},
	} {
		if f.v != "" {
			kv = append(kv, otlp.String(f.k, f.v))
		}
	}
	if len(r.UserGroups) > 0 {
		groups := make([]*commonpb.AnyValue, len(r.UserGroups))
		for i, g := range r.UserGroups {
			groups[i] = otlp.StringValue(g)
		}
		kv = append(kv, &commonpb.KeyValue{Key: "guard.user_groups",
			Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: groups}}}})
	}
	return kv
}

func (o *otlpSender) confirm(context.Context) error { return nil }

// reset has nothing to drop: each batch was a request of its own.
func (o *otlpSender) reset() {}

func (o *otlpSender) close() { o.client.Close() }
