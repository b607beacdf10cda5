package telemetry

import (
	"math"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// The export request is written straight in protobuf's wire format
// (opentelemetry/proto/collector/trace/v1/trace_service.proto and the
// messages it holds, numbered as below): one pass over the spans, no
// message objects, no per-attribute allocation. A nested message's
// length is written once its content is: its bytes are moved by the
// length's size, at most a few bytes.

// Field numbers.
const (
	// ExportTraceServiceRequest
	fRequestResourceSpans = 1
	// ResourceSpans
	fResource   = 1
	fScopeSpans = 2
	// ScopeSpans
	fScope = 1
	fSpans = 2
	// InstrumentationScope
	fScopeName    = 1
	fScopeVersion = 2
	// Span
	fTraceID           = 1
	fSpanID            = 2
	fTraceState        = 3
	fParentSpanID      = 4
	fName              = 5
	fKind              = 6
	fStart             = 7
	fEnd               = 8
	fAttributes        = 9
	fDroppedAttributes = 10
	fDroppedEvents     = 12
	fDroppedLinks      = 14
	fStatus            = 15
	fFlags             = 16
	// Status
	fStatusMessage = 2
	fStatusCode    = 3
	// KeyValue
	fKey   = 1
	fValue = 2
	// AnyValue
	fString = 1
	fBool   = 2
	fInt    = 3
	fDouble = 4
	fArray  = 5
	// ArrayValue
	fValues = 1
)

// Status codes: OTLP's numbers (the API's Error and Ok are the other way
// round).
const (
	statusOK    = 1
	statusError = 2
)

// OTLP's span flags: the context's trace flags, and whether the parent
// was remote (and that this is known).
const (
	flagHasIsRemote = 0x100
	flagIsRemote    = 0x200
)

// The API's span kinds and OTLP's have the same numbers (internal 1 to
// consumer 5).
var _ = [1]struct{}{}[int(trace.SpanKindConsumer)-5]

// openField appends the tag of a message field; closeField writes its
// length once its content follows.
func openField(b []byte, num protowire.Number) ([]byte, int) {
	return protowire.AppendTag(b, num, protowire.BytesType), len(b) + protowire.SizeTag(num)
}

func closeField(b []byte, start int) []byte {
	n := len(b) - start
	k := protowire.SizeVarint(uint64(n))
	b = append(b, make([]byte, k)...)
	copy(b[start+k:], b[start:start+n])
	protowire.AppendVarint(b[:start], uint64(n))
	return b
}

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
}

func appendString(b []byte, num protowire.Number, v string) []byte {
	return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), v)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}

func appendFixed64(b []byte, num protowire.Number, v uint64) []byte {
	return protowire.AppendFixed64(protowire.AppendTag(b, num, protowire.Fixed64Type), v)
}

func appendFixed32(b []byte, num protowire.Number, v uint32) []byte {
	return protowire.AppendFixed32(protowire.AppendTag(b, num, protowire.Fixed32Type), v)
}

// appendRequest appends an ExportTraceServiceRequest of spans, all in one
// ResourceSpans of resource (an encoded Resource), a ScopeSpans per
// scope, in the order the spans came.
func appendRequest(b, resource []byte, spans []*span) []byte {
	b, rs := openField(b, fRequestResourceSpans)
	b = appendBytes(b, fResource, resource)
	var done []scope
	for i, s := range spans {
		t := s.tracer
		if slices.Contains(done, t.scope) {
			continue
		}
		done = append(done, t.scope)
		var ss, sc int
		b, ss = openField(b, fScopeSpans)
		b, sc = openField(b, fScope)
		b = appendString(b, fScopeName, t.scope.name)
		if t.scope.version != "" {
			b = appendString(b, fScopeVersion, t.scope.version)
		}
		b = closeField(b, sc)
		for _, s := range spans[i:] {
			if s.tracer.scope == t.scope {
				b = appendSpan(b, s)
			}
		}
		b = closeField(b, ss)
	}
	return closeField(b, rs)
}

// appendSpan appends s, ended, as a Span field.
func appendSpan(b []byte, s *span) []byte {
	b, start := openField(b, fSpans)
	tid, sid := s.sc.TraceID(), s.sc.SpanID()
	b = appendBytes(b, fTraceID, tid[:])
	b = appendBytes(b, fSpanID, sid[:])
	if ts := s.sc.TraceState(); ts.Len() > 0 {
		b = appendString(b, fTraceState, ts.String())
	}
	flags := uint32(s.sc.TraceFlags()) | flagHasIsRemote
	if s.parent.IsValid() {
		psid := s.parent.SpanID()
		b = appendBytes(b, fParentSpanID, psid[:])
		if s.parent.IsRemote() {
			flags |= flagIsRemote
		}
	}
	b = appendString(b, fName, s.name)
	b = appendVarint(b, fKind, uint64(s.kind))
	b = appendFixed64(b, fStart, unixNano(s.start.UnixNano()))
	b = appendFixed64(b, fEnd, unixNano(s.end.UnixNano()))
	b = appendAttributes(b, fAttributes, s.attrs)
	if s.droppedAttrs > 0 {
		b = appendVarint(b, fDroppedAttributes, uint64(s.droppedAttrs))
	}
	if s.droppedEvs > 0 {
		b = appendVarint(b, fDroppedEvents, uint64(s.droppedEvs))
	}
	if s.droppedLinks > 0 {
		b = appendVarint(b, fDroppedLinks, uint64(s.droppedLinks))
	}
	switch s.status {
	case codes.Error:
		var st int
		b, st = openField(b, fStatus)
		if s.desc != "" {
			b = appendString(b, fStatusMessage, s.desc)
		}
		b = appendVarint(b, fStatusCode, statusError)
		b = closeField(b, st)
	case codes.Ok:
		var st int
		b, st = openField(b, fStatus)
		b = appendVarint(b, fStatusCode, statusOK)
		b = closeField(b, st)
	}
	b = appendFixed32(b, fFlags, flags)
	return closeField(b, start)
}

func unixNano(n int64) uint64 { return uint64(max(n, 0)) }

// appendAttributes appends kvs as KeyValue fields num; of a key set more
// than once, the last value is kept.
func appendAttributes(b []byte, num protowire.Number, kvs []attribute.KeyValue) []byte {
	for i, kv := range kvs {
		if !kv.Valid() || setLater(kvs[i+1:], kv.Key) {
			continue
		}
		b = appendKeyValue(b, num, string(kv.Key), kv.Value)
	}
	return b
}

func setLater(kvs []attribute.KeyValue, k attribute.Key) bool {
	for _, kv := range kvs {
		if kv.Key == k {
			return true
		}
	}
	return false
}

func appendKeyValue(b []byte, num protowire.Number, k string, v attribute.Value) []byte {
	b, start := openField(b, num)
	b = appendString(b, fKey, k)
	b = appendValue(b, fValue, v)
	return closeField(b, start)
}

// appendValue appends v as an AnyValue field num: the kinds guard sets,
// others as their text.
func appendValue(b []byte, num protowire.Number, v attribute.Value) []byte {
	b, start := openField(b, num)
	switch v.Type() {
	case attribute.BOOL:
		b = appendVarint(b, fBool, protowire.EncodeBool(v.AsBool()))
	case attribute.INT64:
		b = appendVarint(b, fInt, uint64(v.AsInt64()))
	case attribute.FLOAT64:
		b = appendFixed64(b, fDouble, math.Float64bits(v.AsFloat64()))
	case attribute.STRING:
		b = appendString(b, fString, v.AsString())
	case attribute.STRINGSLICE:
		var a int
		b, a = openField(b, fArray)
		for _, s := range v.AsStringSlice() {
			var e int
			b, e = openField(b, fValues)
			b = appendString(b, fString, s)
			b = closeField(b, e)
		}
		b = closeField(b, a)
	default:
		b = appendString(b, fString, v.String())
	}
	return closeField(b, start)
}
