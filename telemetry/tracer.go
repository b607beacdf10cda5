package telemetry

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// maxAttributes is the most attributes a span keeps (the SDK's default
// limit); the rest are counted as dropped. Events and links are not kept
// (guard's spans have none): they are counted as dropped.
const maxAttributes = 128

// provider is the TracerProvider of guard's spans: every tracer it hands
// out ends its spans into the same pipeline.
type provider struct {
	embedded.TracerProvider
	p       *pipeline
	sampler sampler
}

// scope is an instrumentation scope: the tracer's name and version.
type scope struct{ name, version string }

// Tracer returns the tracer of the scope name (and the version opts give).
func (pv *provider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	c := trace.NewTracerConfig(opts...)
	return &tracer{pv: pv, scope: scope{name, c.InstrumentationVersion()}}
}

// sampler is ParentBased(TraceIDRatioBased(share)), as the SDK has them:
// a span with a parent (remote or local) is sampled when its parent is; a
// trace guard starts is sampled when its id falls in the share.
type sampler struct {
	all, none bool
	bound     uint64 // TraceIDRatioBased's: of the id's last 8 bytes, shifted right once
}

func newSampler(share float64) sampler {
	switch {
	case share >= 1:
		return sampler{all: true}
	case share <= 0:
		return sampler{none: true}
	}
	return sampler{bound: uint64(share * (1 << 63))}
}

// sampled decides for a span of trace tid under parent.
func (s sampler) sampled(parent trace.SpanContext, tid trace.TraceID) bool {
	switch {
	case parent.IsValid():
		return parent.IsSampled()
	case s.all:
		return true
	case s.none:
		return false
	}
	return binary.BigEndian.Uint64(tid[8:16])>>1 < s.bound
}

// tracer starts spans of one scope.
type tracer struct {
	embedded.Tracer
	pv    *provider
	scope scope
}

// Start starts a span, a child of the span (or remote span context) in
// ctx unless the options ask for a new root. A span that is not sampled
// records nothing but has its own span context, with the sampled flag
// off, to pass on.
func (t *tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	if ctx == nil {
		ctx = context.Background()
	}
	var parent trace.SpanContext
	if !cfg.NewRoot() {
		parent = trace.SpanContextFromContext(ctx)
	}
	tid := parent.TraceID()
	if !tid.IsValid() {
		tid = newTraceID()
	}
	sampled := t.pv.sampler.sampled(parent, tid)
	flags := parent.TraceFlags() &^ trace.FlagsSampled
	if sampled {
		flags |= trace.FlagsSampled
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: newSpanID(), TraceFlags: flags, TraceState: parent.TraceState()})
	if !sampled {
		// The API's own span of a bare span context: it records nothing.
		ctx = trace.ContextWithSpanContext(ctx, sc)
		return ctx, trace.SpanFromContext(ctx)
	}
	s := &span{tracer: t, sc: sc, parent: parent, kind: trace.ValidateSpanKind(cfg.SpanKind()), name: name, start: cfg.Timestamp()}
	if s.start.IsZero() {
		s.start = time.Now()
	}
	// The config's slices are its own copies of the options'.
	s.attrs = cfg.Attributes()
	if len(s.attrs) > maxAttributes {
		s.droppedAttrs = len(s.attrs) - maxAttributes
		s.attrs = s.attrs[:maxAttributes:maxAttributes]
	}
	s.droppedLinks = len(cfg.Links())
	return trace.ContextWithSpan(ctx, s), s
}

// newTraceID is a random trace id, never all zero.
func newTraceID() trace.TraceID {
	var id trace.TraceID
	for !id.IsValid() {
		binary.BigEndian.PutUint64(id[:8], rand.Uint64())
		binary.BigEndian.PutUint64(id[8:], rand.Uint64())
	}
	return id
}

// newSpanID is a random span id, never zero. math/rand/v2's functions
// draw from the runtime's ChaCha8 generators, seeded by the system's
// random source: unpredictable, and without a lock.
func newSpanID() trace.SpanID {
	var id trace.SpanID
	for !id.IsValid() {
		binary.BigEndian.PutUint64(id[:], rand.Uint64())
	}
	return id
}

// span is a sampled span. What its methods set is kept under mu until End;
// once ended it changes no more, and the pipeline reads it without the
// lock.
type span struct {
	embedded.Span
	tracer *tracer
	sc     trace.SpanContext
	parent trace.SpanContext
	kind   trace.SpanKind
	start  time.Time

	mu           sync.Mutex
	ended        bool
	name         string
	end          time.Time
	attrs        []attribute.KeyValue
	droppedAttrs int
	status       codes.Code
	desc         string
	droppedEvs   int
	droppedLinks int
}

// End ends the span (once: later calls do nothing) and queues it for
// export.
func (s *span) End(opts ...trace.SpanEndOption) {
	var end time.Time
	if len(opts) > 0 {
		c := trace.NewSpanEndConfig(opts...)
		end = c.Timestamp()
	}
	if end.IsZero() {
		end = time.Now()
	}
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended, s.end = true, end
	s.mu.Unlock()
	s.tracer.pv.p.enqueue(s)
}

// AddEvent counts a dropped event.
func (s *span) AddEvent(string, ...trace.EventOption) { s.dropEvent() }

// RecordError counts a dropped event (the exception's), for an error.
func (s *span) RecordError(err error, _ ...trace.EventOption) {
	if err != nil {
		s.dropEvent()
	}
}

func (s *span) dropEvent() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.droppedEvs++
	}
}

// AddLink counts a dropped link.
func (s *span) AddLink(trace.Link) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.droppedLinks++
	}
}

// IsRecording reports whether the span has not ended.
func (s *span) IsRecording() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.ended
}

// SpanContext is the span's.
func (s *span) SpanContext() trace.SpanContext { return s.sc }

// SetStatus sets the status as the API orders them: Ok is final, Error
// replaces Unset (and an earlier Error), Unset changes nothing. The
// description is kept for Error only.
func (s *span) SetStatus(code codes.Code, description string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || s.status > code { // Unset < Error < Ok
		return
	}
	s.status, s.desc = code, ""
	if code == codes.Error {
		s.desc = description
	}
}

// SetName renames the span.
func (s *span) SetName(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.name = name
	}
}

// SetAttributes adds attributes; one set again under the same key
// replaces the earlier value when the span is exported.
func (s *span) SetAttributes(kvs ...attribute.KeyValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	room := maxAttributes - len(s.attrs)
	if len(kvs) > room {
		s.droppedAttrs += len(kvs) - room
		kvs = kvs[:room]
	}
	s.attrs = append(s.attrs, kvs...)
}

// TracerProvider is the span's.
func (s *span) TracerProvider() trace.TracerProvider { return s.tracer.pv }
