package telemetry_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/guard-mcp/guard/stream/streamtest"
	"github.com/guard-mcp/guard/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// A span whose parent came from a client arrives at a real collector in
// the client's trace, under its parent, with its kind, attributes, status
// and the resource guard names; a child follows under it.
func TestSpansReachCollector(t *testing.T) {
	oc := streamtest.NewOtelcol(t, nil)
	tr, err := telemetry.New(telemetry.Config{OTLP: oc.TracesURL(), Sample: 1, Headers: map[string]string{"X-Api-Key": "k"}},
		telemetry.Options{Getenv: env(nil), Hostname: "h1", Version: "v9", BatchTimeout: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	remote := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
	ctx, root := tr.Tracer().Start(trace.ContextWithRemoteSpanContext(context.Background(), remote), "tools/call echo",
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("mcp.method.name", "tools/call"), attribute.Int64("n", 3), attribute.Bool("b", true)))
	_, child := tr.Tracer().Start(ctx, "decide")
	child.End()
	root.SetStatus(codes.Error, "denied")
	root.End()
	spans := oc.WaitSpans(2, func(s *streamtest.Span) bool { return s.TraceID == tid.String() })
	byName := map[string]streamtest.Span{}
	for _, s := range spans {
		byName[s.Name] = s
	}
	r, c := byName["tools/call echo"], byName["decide"]
	switch {
	case r.ParentSpanID != sid.String() || r.Kind != 2 || r.Attr("mcp.method.name") != "tools/call" || r.Attr("n") != "3" || r.Attr("b") != "true":
		t.Errorf("root span: %+v", r)
	case r.Status.Code != 2 || r.Status.Message != "denied":
		t.Errorf("root status: %+v", r.Status)
	case r.Resource["service.name"] != "guard" || r.Resource["host.name"] != "h1" || r.Resource["service.version"] != "v9":
		t.Errorf("resource: %v", r.Resource)
	case c.ParentSpanID != r.SpanID || c.Kind != 1:
		t.Errorf("child span: %+v under %s", c, r.SpanID)
	}
	if st := tr.Stats(); st.Exported != 2 || st.Failed != 0 || st.Ended != 2 {
		t.Errorf("stats %+v", st)
	}
}

// A receiver that is down: spans end as ever, the failure is counted and
// logged once (without the headers' secrets), and when the receiver is
// back, its recovery is logged and spans are delivered.
func TestReceiverDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	var mu sync.Mutex
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	tr, err := telemetry.New(telemetry.Config{OTLP: "http://" + addr, Sample: 1, Headers: map[string]string{"Authorization": "Bearer s3cret"}},
		telemetry.Options{Getenv: env(nil), Logger: logger, BatchTimeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	for range 5 {
		_, s := tr.Tracer().Start(context.Background(), "call")
		s.End()
	}
	streamtest.WaitFor(t, "the failures to be counted", func() bool { return tr.Stats().Failed == 5 })
	var got []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.URL.Path+" "+r.Header.Get("Authorization"))
		mu.Unlock()
	}))
	if srv.Listener, err = net.Listen("tcp", addr); err != nil {
		t.Skip("the port was taken meanwhile:", err)
	}
	srv.Start()
	defer srv.Close()
	_, s := tr.Tracer().Start(context.Background(), "call")
	s.End()
	streamtest.WaitFor(t, "the span to be delivered", func() bool { return tr.Stats().Exported == 1 })
	mu.Lock()
	defer mu.Unlock()
	text := logs.String()
	if strings.Count(text, "traces are not delivered") != 1 || !strings.Contains(text, "traces delivery recovered after") || strings.Contains(text, "s3cret") {
		t.Errorf("logged:\n%s", text)
	}
	if len(got) != 1 || got[0] != "/v1/traces Bearer s3cret" {
		t.Errorf("the receiver got %q", got)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// The configuration is checked: the receiver's URL, the share sampled,
// headers without a receiver.
func TestValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  telemetry.Config
		want string
	}{
		{telemetry.Config{}, ""},
		{telemetry.Config{OTLP: "http://h:4318", Sample: 0.5}, ""},
		{telemetry.Config{OTLP: "h:4318", Sample: 1}, "use http(s)://HOST:PORT"},
		{telemetry.Config{OTLP: "http://h:4318", Sample: 1.5}, "from 0 to 1"},
		{telemetry.Config{Headers: map[string]string{"a": "b"}}, "headers without otlp"},
	} {
		err := c.cfg.Validate()
		if (err == nil) != (c.want == "") || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
}

// receiver is an OTLP/HTTP receiver that decodes every export request it
// takes (an ExportTraceServiceRequest has TracesData's fields), or holds
// its answers while block is set.
type receiver struct {
	*httptest.Server
	mu    sync.Mutex
	got   []*tracepb.TracesData
	block chan struct{}
}

func newReceiver(t *testing.T, block bool) *receiver {
	r := &receiver{}
	if block {
		r.block = make(chan struct{})
	}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		if r.block != nil {
			select {
			case <-r.block:
			case <-req.Context().Done():
				return
			}
		}
		var td tracepb.TracesData
		if err := proto.Unmarshal(body, &td); err != nil {
			t.Errorf("the request does not decode: %v", err)
		}
		r.mu.Lock()
		r.got = append(r.got, &td)
		r.mu.Unlock()
	}))
	t.Cleanup(r.Close)
	return r
}

// spans are the spans received so far, in order.
func (r *receiver) spans() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, td := range r.got {
		for _, rs := range td.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				out = append(out, ss.Spans...)
			}
		}
	}
	return out
}

func newTracing(t *testing.T, url string, sample float64, batch time.Duration) *telemetry.Tracing {
	t.Helper()
	tr, err := telemetry.New(telemetry.Config{OTLP: url, Sample: sample}, telemetry.Options{Getenv: env(nil), Hostname: "h", Version: "v1", BatchTimeout: batch})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// Everything a span holds reaches the receiver as OTLP has it: ids,
// parent, trace state, kind, times, attributes (a key set twice keeps its
// last value; a kind guard does not set, as its text), status and flags,
// under the resource and the scope. Events and links are counted as
// dropped.
func TestSpanEncoding(t *testing.T) {
	rcv := newReceiver(t, false)
	tr := newTracing(t, rcv.URL, 1, time.Hour)
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ts, _ := trace.ParseTraceState("vendor=x")
	remote := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true})
	start := time.Unix(1700000000, 5)
	ctx, s := tr.Tracer().Start(trace.ContextWithRemoteSpanContext(context.Background(), remote), "root",
		trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start),
		trace.WithLinks(trace.Link{SpanContext: remote, Attributes: []attribute.KeyValue{attribute.String("l", "1")}}),
		trace.WithAttributes(attribute.String("s", "v"), attribute.Int64("i", -3), attribute.Float64("f", 1.5), attribute.Bool("b", true),
			attribute.StringSlice("ss", []string{"a", "b"}), attribute.Int64Slice("is", []int64{1, 2}), attribute.String("dup", "first")))
	s.SetAttributes(attribute.String("dup", "last"))
	s.AddEvent("ev", trace.WithTimestamp(start.Add(time.Second)), trace.WithAttributes(attribute.Int("n", 7)))
	s.RecordError(errors.New("e"))
	s.SetStatus(codes.Error, "bad")
	_, child := tr.Tracer().Start(ctx, "child")
	child.SetStatus(codes.Ok, "ignored")
	child.End()
	s.End(trace.WithTimestamp(start.Add(2 * time.Second)))
	s.SetAttributes(attribute.String("after", "end")) // ignored
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	rcv.mu.Lock()
	if len(rcv.got) != 1 || len(rcv.got[0].ResourceSpans) != 1 || len(rcv.got[0].ResourceSpans[0].ScopeSpans) != 1 {
		t.Fatalf("got %v", rcv.got)
	}
	rs := rcv.got[0].ResourceSpans[0]
	rcv.mu.Unlock()
	res := map[string]string{}
	for _, kv := range rs.Resource.Attributes {
		res[kv.Key] = kv.Value.GetStringValue()
	}
	if res["service.name"] != "guard" || res["host.name"] != "h" || res["service.version"] != "v1" {
		t.Errorf("resource %v", res)
	}
	if sc := rs.ScopeSpans[0].Scope; sc.Name != telemetry.Scope || sc.Version != "v1" {
		t.Errorf("scope %v", sc)
	}
	spans := rs.ScopeSpans[0].Spans
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	c, r := spans[0], spans[1]
	attrs := map[string]string{}
	for _, kv := range r.Attributes {
		attrs[kv.Key] = kv.Value.String()
	}
	want := map[string]string{"s": `string_value:"v"`, "i": "int_value:-3", "f": "double_value:1.5", "b": "bool_value:true",
		"ss": `array_value:{values:{string_value:"a"} values:{string_value:"b"}}`, "is": `string_value:"[1,2]"`,
		"dup": `string_value:"last"`}
	for k, v := range want {
		if strings.Join(strings.Fields(attrs[k]), " ") != v {
			t.Errorf("attribute %s: %s, want %s", k, attrs[k], v)
		}
	}
	switch {
	case len(attrs) != len(want):
		t.Errorf("attributes %v", attrs)
	case string(r.TraceId) != string(tid[:]) || string(r.ParentSpanId) != string(sid[:]) || r.TraceState != "vendor=x" || r.Name != "root":
		t.Errorf("root %v", r)
	case r.Kind != tracepb.Span_SPAN_KIND_SERVER || r.StartTimeUnixNano != uint64(start.UnixNano()) || r.EndTimeUnixNano != uint64(start.Add(2*time.Second).UnixNano()):
		t.Errorf("root's kind or times %v", r)
	case r.Flags != 0x301 || r.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || r.Status.GetMessage() != "bad":
		t.Errorf("root's flags or status %v", r)
	case len(r.Events) != 0 || r.DroppedEventsCount != 2 || len(r.Links) != 0 || r.DroppedLinksCount != 1:
		t.Errorf("events and links %v", r)
	case string(c.ParentSpanId) != string(r.SpanId) || string(c.TraceId) != string(tid[:]) || c.Kind != tracepb.Span_SPAN_KIND_INTERNAL || c.Flags != 0x101:
		t.Errorf("child %v under %x", c, r.SpanId)
	case c.Status.GetCode() != tracepb.Status_STATUS_CODE_OK || c.Status.GetMessage() != "" || len(c.Attributes) != 0:
		t.Errorf("child's status %v", c.Status)
	}
	if st := tr.Stats(); st != (telemetry.Stats{Ended: 2, Exported: 2}) {
		t.Errorf("stats %+v", st)
	}
}

// Sampling is ParentBased(TraceIDRatioBased): a parent's decision is
// followed, remote or local; a trace guard starts is sampled when its id's
// last 8 bytes, shifted right once, fall under the share of 2^63. A span
// not sampled still has its own span id, its flags without sampled.
func TestSampling(t *testing.T) {
	rcv := newReceiver(t, false)
	tr := newTracing(t, rcv.URL, 0.25, time.Hour)
	defer tr.Shutdown(context.Background())
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	for _, flags := range []trace.TraceFlags{0, trace.FlagsSampled} {
		remote := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags, Remote: true})
		ctx, s := tr.Tracer().Start(trace.ContextWithRemoteSpanContext(context.Background(), remote), "call")
		_, child := tr.Tracer().Start(ctx, "stage")
		for _, sp := range []trace.Span{s, child} {
			sc := sp.SpanContext()
			if sp.IsRecording() != (flags == trace.FlagsSampled) || sc.TraceFlags() != flags || sc.TraceID() != tid || !sc.SpanID().IsValid() || sc.SpanID() == sid {
				t.Errorf("parent flags %v: recording %v, %v", flags, sp.IsRecording(), sc)
			}
		}
	}
	sampled := 0
	for range 4000 {
		_, s := tr.Tracer().Start(context.Background(), "call")
		id := s.SpanContext().TraceID()
		want := binary.BigEndian.Uint64(id[8:])>>1 < uint64(0.25*(1<<63))
		if s.IsRecording() != want || s.SpanContext().IsSampled() != want {
			t.Fatalf("trace %v: recording %v", id, s.IsRecording())
		}
		if want {
			sampled++
		}
	}
	if sampled < 800 || sampled > 1200 {
		t.Errorf("%d of 4000 sampled at 0.25", sampled)
	}
	for _, share := range []float64{0, 1} {
		tr := newTracing(t, rcv.URL, share, time.Hour)
		_, s := tr.Tracer().Start(context.Background(), "call")
		if s.IsRecording() != (share == 1) {
			t.Errorf("sample %v: recording %v", share, s.IsRecording())
		}
		tr.Shutdown(context.Background())
	}
}

// A receiver that does not answer never holds up a span's end: the spans
// the queue has no room for are dropped and counted, and Shutdown gives
// up on the rest when its time is over, saying so.
func TestQueueFull(t *testing.T) {
	rcv := newReceiver(t, true)
	defer close(rcv.block)
	tr := newTracing(t, rcv.URL, 1, time.Millisecond)
	_, s := tr.Tracer().Start(context.Background(), "first")
	s.End()
	time.Sleep(50 * time.Millisecond) // the first batch is being sent, and waits
	for range 3000 {
		_, s := tr.Tracer().Start(context.Background(), "call")
		s.End()
	}
	if st := tr.Stats(); st.Ended != 3001 || st.Dropped != 3000-2048 || st.Exported != 0 {
		t.Errorf("stats %+v", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := tr.Shutdown(ctx)
	if err == nil || !strings.Contains(err.Error(), "2048 spans not sent") {
		t.Errorf("shutdown: %v", err)
	}
	if st := tr.Stats(); st.Failed != 1 || st.Dropped != 3000 {
		t.Errorf("stats after shutdown %+v", st)
	}
}

// Shutdown sends what is queued without waiting for the batch's time,
// in batches of at most 512; a span that ends afterwards is dropped.
func TestShutdownSendsQueued(t *testing.T) {
	rcv := newReceiver(t, false)
	tr := newTracing(t, rcv.URL, 1, time.Hour)
	for range 1000 {
		_, s := tr.Tracer().Start(context.Background(), "call")
		s.End()
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, s := tr.Tracer().Start(context.Background(), "late")
	s.End()
	if n := len(rcv.spans()); n != 1000 || len(rcv.got) != 2 {
		t.Errorf("%d spans in %d requests", n, len(rcv.got))
	}
	if st := tr.Stats(); st != (telemetry.Stats{Ended: 1001, Exported: 1000, Dropped: 1}) {
		t.Errorf("stats %+v", st)
	}
}
