package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/internal/otlp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// exporter is the SDK's SpanExporter for OTLP/HTTP: it makes an export
// request of each batch (ExportTraceServiceRequest) and posts it with
// internal/otlp. The batch processor calls ExportSpans from one goroutine
// at a time.
type exporter struct {
	endpoint string
	client   *otlp.Client
	resource *resourcepb.Resource
	logger   *slog.Logger
	req      []byte

	exported, failed atomic.Int64
	mu               sync.Mutex
	failing          bool // the last export failed
}

func newExporter(cfg Config, o Options) (*exporter, error) {
	endpoint, err := otlp.SignalURL(cfg.OTLP, "traces")
	if err != nil {
		return nil, fmt.Errorf("telemetry: otlp %q: %w", guard.DisplayURL(cfg.OTLP), err)
	}
	client, err := otlp.New(otlp.Config{URL: endpoint, Signal: "traces", Timeout: exportTimeout, Getenv: o.Getenv, Headers: cfg.Headers})
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	attrs := map[string]string{"service.name": "guard", "host.name": o.Hostname}
	if o.Version != "" {
		attrs["service.version"] = o.Version
	}
	res, err := otlp.Resource(o.Getenv, attrs)
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	return &exporter{endpoint: endpoint, client: client, resource: res, logger: o.Logger}, nil
}

// ExportSpans sends one batch. A failure is counted and logged here, not
// returned: the SDK would hand it to the process's global error handler,
// and it would not send the batch again either.
func (e *exporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	var err error
	e.req, err = otlp.AppendRequest(e.req[:0], resourceSpans(e.resource, spans))
	if err == nil {
		err = e.client.Export(ctx, e.req)
	}
	if partial := (*otlp.PartialError)(nil); errors.As(err, &partial) {
		e.exported.Add(int64(len(spans)) - partial.Rejected)
		e.failed.Add(partial.Rejected)
		if partial.Rejected > 0 {
			e.logger.Warn("the OTLP receiver refused some spans", "receiver", guard.DisplayURL(e.endpoint), "err", err)
		}
		err = nil
	} else if err == nil {
		e.exported.Add(int64(len(spans)))
	} else {
		e.failed.Add(int64(len(spans)))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case err != nil && !e.failing:
		e.failing = true
		e.logger.Warn("traces are not delivered: spans are dropped until the receiver takes them again", "receiver", guard.DisplayURL(e.endpoint), "err", err)
	case err == nil && e.failing:
		e.failing = false
		e.logger.Info("traces are delivered again", "receiver", guard.DisplayURL(e.endpoint), "failed_spans", e.failed.Load())
	}
	return nil
}

// Shutdown is the SDK's; the client is closed by Tracing.Shutdown.
func (e *exporter) Shutdown(context.Context) error { return nil }

// resourceSpans puts spans in one ResourceSpans of res, a ScopeSpans per
// instrumentation scope, in the order they came.
func resourceSpans(res *resourcepb.Resource, spans []sdktrace.ReadOnlySpan) *tracepb.ResourceSpans {
	rs := &tracepb.ResourceSpans{Resource: res}
	scopes := map[string]*tracepb.ScopeSpans{}
	for _, s := range spans {
		sc := s.InstrumentationScope()
		ss := scopes[sc.Name+"\x00"+sc.Version]
		if ss == nil {
			ss = &tracepb.ScopeSpans{Scope: &commonpb.InstrumentationScope{Name: sc.Name, Version: sc.Version}}
			scopes[sc.Name+"\x00"+sc.Version] = ss
			rs.ScopeSpans = append(rs.ScopeSpans, ss)
		}
		ss.Spans = append(ss.Spans, span(s))
	}
	return rs
}

// OTLP's span flags: the context's trace flags, and whether the parent
// was remote (and that this is known).
const (
	flagHasIsRemote = 0x100
	flagIsRemote    = 0x200
)

// span is one span as OTLP has it.
func span(s sdktrace.ReadOnlySpan) *tracepb.Span {
	sc, parent := s.SpanContext(), s.Parent()
	tid, sid := sc.TraceID(), sc.SpanID()
	p := &tracepb.Span{
		TraceId:                tid[:],
		SpanId:                 sid[:],
		TraceState:             sc.TraceState().String(),
		Name:                   s.Name(),
		Kind:                   tracepb.Span_SpanKind(s.SpanKind()), // the same numbers
		StartTimeUnixNano:      unixNano(s.StartTime().UnixNano()),
		EndTimeUnixNano:        unixNano(s.EndTime().UnixNano()),
		Attributes:             attributes(s.Attributes()),
		DroppedAttributesCount: uint32(s.DroppedAttributes()),
		DroppedEventsCount:     uint32(s.DroppedEvents()),
		DroppedLinksCount:      uint32(s.DroppedLinks()),
		Flags:                  uint32(sc.TraceFlags()) | flagHasIsRemote,
	}
	if parent.IsValid() {
		psid := parent.SpanID()
		p.ParentSpanId = psid[:]
		if parent.IsRemote() {
			p.Flags |= flagIsRemote
		}
	}
	for _, ev := range s.Events() {
		p.Events = append(p.Events, &tracepb.Span_Event{Name: ev.Name, TimeUnixNano: unixNano(ev.Time.UnixNano()),
			Attributes: attributes(ev.Attributes), DroppedAttributesCount: uint32(ev.DroppedAttributeCount)})
	}
	for _, l := range s.Links() {
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		p.Links = append(p.Links, &tracepb.Span_Link{TraceId: ltid[:], SpanId: lsid[:], TraceState: l.SpanContext.TraceState().String(),
			Attributes: attributes(l.Attributes), Flags: uint32(l.SpanContext.TraceFlags()) | flagHasIsRemote})
	}
	switch st := s.Status(); st.Code {
	case codes.Error:
		p.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: st.Description}
	case codes.Ok:
		p.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_OK}
	}
	return p
}

func unixNano(n int64) uint64 { return uint64(max(n, 0)) }

// attributes are kvs as OTLP has them.
func attributes(kvs []attribute.KeyValue) []*commonpb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	out := make([]*commonpb.KeyValue, len(kvs))
	for i, kv := range kvs {
		out[i] = &commonpb.KeyValue{Key: string(kv.Key), Value: value(kv.Value)}
	}
	return out
}

// value is an attribute's value as OTLP has it; kinds guard does not
// set are sent as their text.
func value(v attribute.Value) *commonpb.AnyValue {
	switch v.Type() {
	case attribute.BOOL:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: v.AsBool()}}
	case attribute.INT64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v.AsInt64()}}
	case attribute.FLOAT64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v.AsFloat64()}}
	case attribute.STRING:
		return otlp.StringValue(v.AsString())
	case attribute.STRINGSLICE:
		ss := v.AsStringSlice()
		vals := make([]*commonpb.AnyValue, len(ss))
		for i, s := range ss {
			vals[i] = otlp.StringValue(s)
		}
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: vals}}}
	}
	return otlp.StringValue(v.Emit())
}

// The SDK's span kinds and OTLP's have the same numbers.
var _ = [1]struct{}{}[int(trace.SpanKindClient)-int(tracepb.Span_SPAN_KIND_CLIENT)]
