package streamtest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// OtelcolEnv names the collector binary the OTLP tests run
// (scripts/otelcol.sh builds one and prints its path).
const OtelcolEnv = "GUARD_TEST_OTELCOL"

// Otelcol is a real OpenTelemetry Collector, built with the collector's
// builder (an OTLP receiver, a file exporter), run with its own
// configuration: OTLP/HTTP on a loopback port, what it receives appended
// to a file as OTLP JSON, one export request a line (logs and traces each
// to a file of their own).
type Otelcol struct {
	*Daemon
	out, traces string
	certs       *Certs
}

// NewOtelcol starts one (over TLS with certs' certificate when certs is
// not nil), stopped when the test ends; it skips the test when
// GUARD_TEST_OTELCOL is not set.
func NewOtelcol(t *testing.T, certs *Certs) *Otelcol {
	t.Helper()
	bin := os.Getenv(OtelcolEnv)
	if bin == "" {
		t.Skip(OtelcolEnv + " is not set: the OTLP stream is not tested against a real collector (scripts/otelcol.sh builds one and prints its path)")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s=%s: %v", OtelcolEnv, bin, err)
	}
	dir := t.TempDir()
	addr := freeAddr(t)
	c := &Otelcol{out: filepath.Join(dir, "logs.jsonl"), traces: filepath.Join(dir, "traces.jsonl"), certs: certs, Daemon: &Daemon{T: t, Name: "the collector", Addr: addr,
		Argv: []string{bin, "--config", filepath.Join(dir, "otelcol.yaml")}}}
	tls := ""
	if certs != nil {
		tls = fmt.Sprintf("\n        tls: {cert_file: %q, key_file: %q}", certs.CertFile, certs.KeyFile)
	}
	conf := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      http:
        endpoint: %s%s
exporters:
  file:
    path: %s
    flush_interval: 10ms
    append: true
  file/traces:
    path: %s
    flush_interval: 10ms
    append: true
service:
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
  pipelines:
    logs:
      receivers: [otlp]
      exporters: [file]
    traces:
      receivers: [otlp]
      exporters: [file/traces]
`, addr, tls, c.out, c.traces)
	if err := os.WriteFile(filepath.Join(dir, "otelcol.yaml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	c.Start()
	t.Cleanup(c.Stop)
	return c
}

// Receiver is the receiver's entry in audit.stream.
func (c *Otelcol) Receiver() Entry {
	if c.certs != nil {
		return Entry{OTLP: "https://" + c.Addr}
	}
	return Entry{OTLP: "http://" + c.Addr}
}

// LogRecord is one log record as the file exporter writes it.
type LogRecord struct {
	TimeUnixNano   string `json:"timeUnixNano"`
	SeverityNumber int    `json:"severityNumber"`
	SeverityText   string `json:"severityText"`
	EventName      string `json:"eventName"`
	Body           struct {
		StringValue string `json:"stringValue"`
	} `json:"body"`
	Attributes []keyValue `json:"attributes"`
	// Resource holds the attributes of the record's resource.
	Resource map[string]string `json:"-"`
}

type keyValue struct {
	Key   string `json:"key"`
	Value struct {
		StringValue string `json:"stringValue"`
		IntValue    string `json:"intValue"`
		BoolValue   bool   `json:"boolValue"`
		ArrayValue  struct {
			Values []struct {
				StringValue string `json:"stringValue"`
			} `json:"values"`
		} `json:"arrayValue"`
	} `json:"value"`
}

// Attr returns an attribute's value as text ("" when absent).
func (l *LogRecord) Attr(k string) string {
	for _, a := range l.Attributes {
		if a.Key == k {
			return a.Value.StringValue + a.Value.IntValue
		}
	}
	return ""
}

// Strings returns an attribute's array of strings (nil when absent).
func (l *LogRecord) Strings(k string) []string {
	var out []string
	for _, a := range l.Attributes {
		if a.Key == k {
			for _, v := range a.Value.ArrayValue.Values {
				out = append(out, v.StringValue)
			}
		}
	}
	return out
}

// Received are the log records received, in order.
func (c *Otelcol) Received() []LogRecord {
	var recs []LogRecord
	for _, l := range lines(c.T, c.out) {
		var req struct {
			ResourceLogs []struct {
				Resource struct {
					Attributes []keyValue `json:"attributes"`
				} `json:"resource"`
				ScopeLogs []struct {
					LogRecords []LogRecord `json:"logRecords"`
				} `json:"scopeLogs"`
			} `json:"resourceLogs"`
		}
		if err := json.Unmarshal(l, &req); err != nil {
			c.T.Fatalf("the collector wrote %s: %v", l, err)
		}
		for _, rl := range req.ResourceLogs {
			res := map[string]string{}
			for _, a := range rl.Resource.Attributes {
				res[a.Key] = a.Value.StringValue
			}
			for _, sl := range rl.ScopeLogs {
				for _, lr := range sl.LogRecords {
					lr.Resource = res
					recs = append(recs, lr)
				}
			}
		}
	}
	return recs
}

// Seqs are the seqs (attribute guard.seq) of the records received, in
// order.
func (c *Otelcol) Seqs() []int64 {
	recs := c.Received()
	out := make([]int64, 0, len(recs))
	for _, r := range recs {
		n, err := strconv.ParseInt(r.Attr("guard.seq"), 10, 64)
		if err != nil {
			c.T.Fatalf("guard.seq %q: %v", r.Attr("guard.seq"), err)
		}
		out = append(out, n)
	}
	return out
}

// WaitRecords waits until n distinct records have arrived.
func (c *Otelcol) WaitRecords(n int) {
	c.T.Helper()
	WaitFor(c.T, fmt.Sprintf("the collector to receive %d records", n), func() bool { return unique(c.Seqs()) >= n })
}

// TracesURL is the base URL of the collector's OTLP receiver, for
// telemetry.otlp.
func (c *Otelcol) TracesURL() string { return c.Receiver().OTLP }

// TracesFile is the file the collector writes the spans it receives to,
// one export request (OTLP JSON) a line.
func (c *Otelcol) TracesFile() string { return c.traces }

// Span is one span as the file exporter writes it.
type Span struct {
	TraceID           string     `json:"traceId"`
	SpanID            string     `json:"spanId"`
	ParentSpanID      string     `json:"parentSpanId"`
	TraceState        string     `json:"traceState"`
	Name              string     `json:"name"`
	Kind              int        `json:"kind"`
	StartTimeUnixNano string     `json:"startTimeUnixNano"`
	EndTimeUnixNano   string     `json:"endTimeUnixNano"`
	Attributes        []keyValue `json:"attributes"`
	Status            struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"status"`
	// Resource holds the attributes of the span's resource.
	Resource map[string]string `json:"-"`
}

// Attr returns an attribute's value as text ("" when absent; a bool as
// true or false).
func (s *Span) Attr(k string) string {
	for _, a := range s.Attributes {
		if a.Key == k {
			if a.Value.StringValue == "" && a.Value.IntValue == "" {
				return strconv.FormatBool(a.Value.BoolValue)
			}
			return a.Value.StringValue + a.Value.IntValue
		}
	}
	return ""
}

// Spans are the spans received, in order.
func (c *Otelcol) Spans() []Span {
	var spans []Span
	for _, l := range lines(c.T, c.traces) {
		var req struct {
			ResourceSpans []struct {
				Resource struct {
					Attributes []keyValue `json:"attributes"`
				} `json:"resource"`
				ScopeSpans []struct {
					Spans []Span `json:"spans"`
				} `json:"scopeSpans"`
			} `json:"resourceSpans"`
		}
		if err := json.Unmarshal(l, &req); err != nil {
			c.T.Fatalf("the collector wrote %s: %v", l, err)
		}
		for _, rs := range req.ResourceSpans {
			res := map[string]string{}
			for _, a := range rs.Resource.Attributes {
				res[a.Key] = a.Value.StringValue
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					s.Resource = res
					spans = append(spans, s)
				}
			}
		}
	}
	return spans
}

// WaitSpans waits until the spans received include n that match, and
// returns those.
func (c *Otelcol) WaitSpans(n int, match func(*Span) bool) []Span {
	c.T.Helper()
	var got []Span
	WaitFor(c.T, fmt.Sprintf("the collector to receive %d spans", n), func() bool {
		got = got[:0]
		for _, s := range c.Spans() {
			if match(&s) {
				got = append(got, s)
			}
		}
		return len(got) >= n
	})
	return got
}
