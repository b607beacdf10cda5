package proxy

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"strconv"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/wire"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Tracing follows the OpenTelemetry semantic conventions for MCP
// (open-telemetry/semantic-conventions-genai, docs/gen-ai/mcp.md, status
// Development): a relayed request is a span of kind server named
// "{mcp.method.name} {target}", and what guard does for it are its
// children: decide, hold, record (each durable append) and the request
// at the server, a span of kind client named as the call. The trace
// context comes from the request's params._meta (traceparent,
// tracestate), where the HTTP front also puts the W3C headers it got, and
// goes on to the server in the forwarded request's _meta (and headers,
// over HTTP). Without Options.Tracer none of this runs: a call's trace is
// nil, and a nil check is all it costs.

// Attribute names: the conventions', then guard's own.
const (
	attrMethod      = "mcp.method.name"
	attrSession     = "mcp.session.id"
	attrProtocol    = "mcp.protocol.version"
	attrRequestID   = "jsonrpc.request.id"
	attrTool        = "gen_ai.tool.name"
	attrPrompt      = "gen_ai.prompt.name"
	attrOperation   = "gen_ai.operation.name"
	attrErrorType   = "error.type"
	attrStatusCode  = "rpc.response.status_code"
	attrServer      = "guard.server"
	attrCallID      = "guard.call_id"
	attrDecision    = "guard.decision"
	attrDecidedBy   = "guard.decided_by"
	attrRule        = "guard.rule"
	attrOutcome     = "guard.outcome"
	attrRecordID    = "guard.record.id"
	attrRecordKind  = "guard.record.kind"
	attrRecordHash  = "guard.record.hash"
	attrApproval    = "guard.approval.id"
	attrApprovalEnd = "guard.approval.state"
	attrDirection   = "guard.direction"
)

// The _meta members of the trace context (W3C Trace Context's header
// names).
const (
	metaTraceparent = "traceparent"
	metaTracestate  = "tracestate"
)

// callTrace is a call's span and its open stages.
type callTrace struct {
	ctx  context.Context // holds span
	span trace.Span
	name string // span's
	// fwd is the request at the server, from forward until its answer;
	// hold the wait for a person.
	fwd, hold trace.Span
	// errCode is the JSON-RPC error code of the server's answer, if any.
	errCode int
	// attrs are the span's from its start, set when it ends.
	attrs []attribute.KeyValue
}

// remoteParent is the span context a request's traceparent and
// tracestate name, as W3C Trace Context reads them (the zero one when
// traceparent is absent or malformed; a malformed tracestate is left
// out): version 00 is exactly version-traceid-parentid-flags in lower-case
// hex, neither id all zeros, flags of sampled (01) and random (02) only; a
// later version may have more fields after a dash, version ff is invalid.
// Only the sampled and random flags are kept.
func remoteParent(parent, state string) trace.SpanContext {
	const size = 55 // 00-{32}-{16}-01
	if len(parent) < size || (len(parent) > size && (parent[0:2] == "00" || parent[size] != '-')) || parent[0:2] == "ff" {
		return trace.SpanContext{}
	}
	var ver, flags [1]byte
	var c trace.SpanContextConfig
	for _, f := range [...]struct {
		at  int
		dst []byte
	}{{0, ver[:]}, {3, c.TraceID[:]}, {36, c.SpanID[:]}, {53, flags[:]}} {
		end := f.at + 2*len(f.dst)
		if !lowerHex(parent[f.at:end]) || (end < size && parent[end] != '-') {
			return trace.SpanContext{}
		}
		_, _ = hex.Decode(f.dst, []byte(parent[f.at:end]))
	}
	if ver[0] == 0 && flags[0] > 3 {
		return trace.SpanContext{}
	}
	c.TraceFlags = trace.TraceFlags(flags[0]) & (trace.FlagsSampled | trace.FlagsRandom)
	c.TraceState, _ = trace.ParseTraceState(state)
	c.Remote = true
	sc := trace.NewSpanContext(c)
	if !sc.IsValid() {
		return trace.SpanContext{}
	}
	return sc
}

func lowerHex(s string) bool {
	for i := range len(s) {
		if !('0' <= s[i] && s[i] <= '9' || 'a' <= s[i] && s[i] <= 'f') {
			return false
		}
	}
	return true
}

// traceparent is sc as W3C Trace Context's traceparent (version 00, the
// sampled and random flags), and its tracestate ("" when it has none).
func traceparent(sc trace.SpanContext) (parent, state string) {
	tid, sid := sc.TraceID(), sc.SpanID()
	b := make([]byte, 0, 55)
	b = append(b, "00-"...)
	b = hex.AppendEncode(b, tid[:])
	b = append(b, '-')
	b = hex.AppendEncode(b, sid[:])
	b = append(b, '-')
	b = hex.AppendEncode(b, []byte{byte(sc.TraceFlags() & (trace.FlagsSampled | trace.FlagsRandom))})
	if sc.TraceState().Len() > 0 {
		state = sc.TraceState().String()
	}
	return string(b), state
}

// TraceMeta returns a request's trace context from its params._meta.
func TraceMeta(params []byte) (traceparent, tracestate string) {
	var m [2][]byte
	wire.Members(wire.ParamsMember(params, "_meta"), []string{metaTraceparent, metaTracestate}, m[:])
	traceparent, _ = wire.String(m[0])
	tracestate, _ = wire.String(m[1])
	return traceparent, tracestate
}

// WithTraceMeta returns the request with traceparent (and tracestate,
// when not "") set in its params._meta, every other byte kept. A request
// whose params or _meta are not objects is returned as it is.
func WithTraceMeta(msg wire.Message, traceparent, tracestate string) wire.Message {
	if msg.Params == nil {
		if msg.Kind != wire.KindRequest {
			return msg
		}
		p, _ := json.Marshal(map[string]map[string]string{"_meta": {metaTraceparent: traceparent}})
		if tracestate != "" {
			p, _ = json.Marshal(map[string]map[string]string{"_meta": {metaTraceparent: traceparent, metaTracestate: tracestate}})
		}
		m := built(wire.SetMember(msg.Raw, "params", p))
		m.Checked = msg.Checked
		return m
	}
	if p := wire.ParamsMember(msg.Params, "_meta"); (p != nil && p[0] != '{') || msg.Params[0] != '{' {
		return msg
	}
	meta := wire.ParamsMember(msg.Params, "_meta")
	if meta == nil {
		meta = []byte("{}")
	}
	q, _ := json.Marshal(traceparent)
	meta = wire.SetMember(meta, metaTraceparent, q)
	if tracestate != "" {
		q, _ = json.Marshal(tracestate)
		meta = wire.SetMember(meta, metaTracestate, q)
	}
	return wire.WithParams(msg, wire.SetMember(msg.Params, "_meta", meta))
}

// startTrace starts the span of a request c that msg carries, in the
// trace its _meta names (else a new one).
func (s *Session) startTrace(msg wire.Message, c *call, tool string) {
	ctx := s.ctx
	if parent := remoteParent(TraceMeta(msg.Params)); parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	}
	name := msg.Method
	if tool != "" {
		name += " " + tool
	}
	s.mu.Lock()
	proto := s.protocol
	s.mu.Unlock()
	// Set with finish's, in one copy: the span is exported once ended.
	attrs := make([]attribute.KeyValue, 0, 18)
	attrs = append(attrs, attribute.String(attrMethod, msg.Method), attribute.String(attrServer, s.opts.Server),
		attribute.String(attrDirection, c.dir), attribute.String(attrRequestID, requestID(msg.ID)))
	if proto != "" {
		attrs = append(attrs, attribute.String(attrProtocol, proto))
	}
	if proto < guard.Rev20260728 {
		// The conventions: no session id where the revision has none.
		attrs = append(attrs, attribute.String(attrSession, s.id))
	}
	switch {
	case msg.Method == "tools/call" && tool != "":
		attrs = append(attrs, attribute.String(attrTool, tool), attribute.String(attrOperation, "execute_tool"))
	case msg.Method == "prompts/get" && tool != "":
		attrs = append(attrs, attribute.String(attrPrompt, tool))
	}
	ctx, span := s.opts.Tracer.Start(ctx, name, serverKind)
	c.tr = &callTrace{ctx: ctx, span: span, name: name, attrs: attrs}
}

// traceTarget is the low-cardinality target of a request's span name: the
// tool or prompt it names.
func traceTarget(msg wire.Message, name []byte) string {
	if name == nil && msg.Method == "prompts/get" {
		name = wire.ParamsMember(msg.Params, "name")
	}
	t, _ := wire.String(name)
	return t
}

// requestID is a JSON-RPC id as the conventions write it: a string's
// value, a number's digits.
func requestID(id []byte) string {
	if v, ok := wire.String(id); ok {
		return v
	}
	return string(id)
}

// stage starts a child span of the call's, of kind internal (nil when the
// call's span is not sampled: its stages are not either). Attributes are
// set on the span rather than passed as an option, which would copy them
// once more.
func (t *callTrace) stage(s *Session, name string, attrs ...attribute.KeyValue) trace.Span {
	if !t.span.IsRecording() {
		return nil
	}
	_, sp := s.opts.Tracer.Start(t.ctx, name)
	if len(attrs) > 0 {
		sp.SetAttributes(attrs...)
	}
	return sp
}

// The span kinds of a call and of its request at the server, as options
// made once.
var (
	serverKind = trace.WithSpanKind(trace.SpanKindServer)
	clientKind = trace.WithSpanKind(trace.SpanKindClient)
)

// forwarded starts the span of the request at the server and returns the
// request carrying its context in _meta.
func (t *callTrace) forwarded(s *Session, msg wire.Message) wire.Message {
	ctx, fwd := s.opts.Tracer.Start(t.ctx, t.name, clientKind)
	fwd.SetAttributes(attribute.String(attrMethod, msg.Method), attribute.String(attrServer, s.opts.Server))
	t.fwd = fwd
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return msg
	}
	parent, state := traceparent(sc)
	return WithTraceMeta(msg, parent, state)
}

// answered ends the span at the server with the server's answer.
func (t *callTrace) answered(msg wire.Message) {
	if msg.Error != nil {
		t.errCode = wire.ErrorCode(msg.Error)
	}
	if t.fwd == nil {
		return
	}
	if msg.Error != nil {
		// Every error code is an error on the client's side.
		code := strconv.Itoa(t.errCode)
		t.fwd.SetAttributes(attribute.Int(attrStatusCode, t.errCode), attribute.String(attrErrorType, code))
		t.fwd.SetStatus(codes.Error, errorMessage(msg.Error))
	}
	t.fwd.End()
}

// errorMessage is a JSON-RPC error's message.
func errorMessage(errObj []byte) string {
	m, _ := wire.String(wire.ParamsMember(errObj, "message"))
	return m
}

// appending is an append's result on its way (Recorder.AppendAsync's
// channel) and, with tracing, the spans that end with it: whoever takes
// the result passes it through done (wait does both), so that no
// goroutine waits for a record only to end its span.
type appending struct {
	ch <-chan error
	tr *recordTrace // nil without tracing
}

// wait waits for the result.
func (a appending) wait() error { return a.done(<-a.ch) }

// done ends the spans of the append whose result is err, and returns it.
func (a appending) done(err error) error {
	if a.tr != nil {
		a.tr.end(err)
	}
	return err
}

// recordTrace is the span of a call's append, and what ends the call's
// span with it when the call's outcome is among recs.
type recordTrace struct {
	s      *Session
	c      *call
	sp     trace.Span // nil when the call's span is not sampled
	final  bool
	answer []byte
	recs   []*guard.Record
}

// appendRecords makes a call's records durable (Recorder.AppendAsync).
// With tracing, a record span covers the append, and final (the call's
// outcome is among recs) ends the call's span once it is durable, with
// answer, what the client reads (nil: nothing).
func (s *Session) appendRecords(c *call, final bool, answer []byte, recs ...*guard.Record) appending {
	if c.tr == nil {
		return appending{ch: s.opts.Recorder.AppendAsync(recs...)}
	}
	t := c.tr
	var sp trace.Span
	if t.span.IsRecording() {
		ids, kinds := make([]string, len(recs)), make([]string, len(recs))
		for i, r := range recs {
			ids[i], kinds[i] = r.ID, r.Kind
		}
		sp = t.stage(s, "guard.record", attribute.StringSlice(attrRecordID, ids), attribute.StringSlice(attrRecordKind, kinds))
	}
	var ch <-chan error
	if cr, ok := s.opts.Recorder.(ContextRecorder); ok {
		ch = cr.AppendContext(t.ctx, recs...)
	} else {
		ch = s.opts.Recorder.AppendAsync(recs...)
	}
	return appending{ch: ch, tr: &recordTrace{s: s, c: c, sp: sp, final: final, answer: answer, recs: recs}}
}

// end ends the record's span, and the call's when final, once the
// records are durable (err nil) or could not be.
func (r *recordTrace) end(err error) {
	var hash string
	if err == nil && r.s.opts.HashAtCommit {
		hash = r.recs[len(r.recs)-1].Hash
	}
	if r.sp != nil {
		if err != nil {
			r.sp.SetStatus(codes.Error, err.Error())
		} else if hash != "" {
			r.sp.SetAttributes(attribute.String(attrRecordHash, hash))
		}
		r.sp.End()
	}
	if r.final {
		r.c.tr.finish(r.c, r.recs[len(r.recs)-1], r.answer, hash, err)
	}
}

// finish ends the call's span (and a stage left open) with how the call
// ended: out, its outcome record (nil when there is none), answer, what
// the client reads, hash, out's chain hash where known at commit, err, the
// record's failure.
func (t *callTrace) finish(c *call, out *guard.Record, answer []byte, hash string, err error) {
	for _, sp := range []trace.Span{t.fwd, t.hold} {
		if sp != nil {
			sp.End()
		}
	}
	sp := t.span
	if !sp.IsRecording() {
		sp.End()
		return
	}
	attrs := append(t.attrs, attribute.String(attrCallID, c.id))
	for _, kv := range [...]struct{ k, v string }{{attrDecision, c.st.Decision}, {attrDecidedBy, c.st.DecidedBy}, {attrApproval, c.st.Approval}} {
		if kv.v != "" {
			attrs = append(attrs, attribute.String(kv.k, kv.v))
		}
	}
	if out != nil {
		attrs = append(attrs, attribute.String(attrOutcome, out.Outcome), attribute.String(attrRecordID, out.ID))
	}
	if hash != "" {
		attrs = append(attrs, attribute.String(attrRecordHash, hash))
	}
	switch {
	case err != nil:
		attrs = append(attrs, attribute.String(attrErrorType, "audit_write_failed"))
		sp.SetStatus(codes.Error, guard.AuditFailedText)
	case answer != nil:
		var m [2][]byte
		wire.Members(answer, []string{"error", "result"}, m[:])
		if m[0] != nil {
			code := wire.ErrorCode(m[0])
			attrs = append(attrs, attribute.Int(attrStatusCode, code))
			// The conventions: a request the caller got wrong is not
			// the server's error.
			if !callerError(code) {
				attrs = append(attrs, attribute.String(attrErrorType, strconv.Itoa(code)))
				sp.SetStatus(codes.Error, errorMessage(m[0]))
			}
		} else if v := wire.ParamsMember(m[1], "isError"); string(v) == "true" {
			attrs = append(attrs, attribute.String(attrErrorType, "tool_error"))
			sp.SetStatus(codes.Error, "")
		}
	}
	sp.SetAttributes(attrs...)
	sp.End()
}

// callerError reports whether a JSON-RPC error code says the caller sent
// a request the receiver could not serve (not an error of the server's
// span, per the conventions).
func callerError(code int) bool {
	switch code {
	case wire.CodeParseError, wire.CodeInvalidRequest, wire.CodeMethodNotFound, wire.CodeInvalidParams, -32002:
		return true
	}
	return false
}

// endTrace ends a call's span when the call ends without an outcome
// record (its request could not be recorded).
func (c *call) endTrace(err error) {
	if c.tr != nil {
		c.tr.finish(c, nil, nil, "", err)
	}
}

// decideSpan starts the span of the rules' decision on c (nil without
// tracing); decided ends it with the verdict.
func (c *call) decideSpan(s *Session) trace.Span {
	if c.tr == nil {
		return nil
	}
	return c.tr.stage(s, "guard.decide")
}

func decidedSpan(sp trace.Span, v guard.Verdict) {
	if sp == nil {
		return
	}
	sp.SetAttributes(attribute.String("guard.action", v.Action), attribute.String(attrRule, v.Rule))
	sp.End()
}
