package telemetry_test

import (
	"bytes"
	"context"
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
	if strings.Count(text, "traces are not delivered") != 1 || !strings.Contains(text, "traces are delivered again") || strings.Contains(text, "s3cret") {
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
