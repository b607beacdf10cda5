package stream

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/guard-mcp/guard/policy"
)

// otelcol is a real OpenTelemetry Collector, built by scripts/otelcol.sh
// with the collector's builder (an OTLP receiver, a file exporter), that
// the test starts with its own configuration.
type otelcol struct {
	*daemon
	out string
}

// otelcolEnv names the collector binary the OTLP tests run.
const otelcolEnv = "GUARD_TEST_OTELCOL"

func newOtelcol(t *testing.T) *otelcol {
	t.Helper()
	bin := os.Getenv(otelcolEnv)
	if bin == "" {
		t.Skip(otelcolEnv + " is not set: the OTLP stream is not tested against a real collector (scripts/otelcol.sh builds one and prints its path)")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s=%s: %v", otelcolEnv, bin, err)
	}
	dir := t.TempDir()
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	c := &otelcol{out: filepath.Join(dir, "logs.jsonl"), daemon: &daemon{t: t, name: "the collector", addr: addr,
		argv: []string{bin, "--config", filepath.Join(dir, "otelcol.yaml")}}}
	conf := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      http:
        endpoint: %s
exporters:
  file:
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
`, addr, c.out)
	if err := os.WriteFile(filepath.Join(dir, "otelcol.yaml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	c.start()
	t.Cleanup(c.stop)
	return c
}

func (c *otelcol) receiver() policy.Stream { return policy.Stream{OTLP: "http://" + c.addr} }

// logRecord is one log record as the file exporter writes it (OTLP JSON).
type logRecord struct {
	TimeUnixNano   string `json:"timeUnixNano"`
	SeverityNumber int    `json:"severityNumber"`
	SeverityText   string `json:"severityText"`
	EventName      string `json:"eventName"`
	Body           struct {
		StringValue string `json:"stringValue"`
	} `json:"body"`
	Attributes []struct {
		Key   string `json:"key"`
		Value struct {
			StringValue string `json:"stringValue"`
			IntValue    string `json:"intValue"`
		} `json:"value"`
	} `json:"attributes"`
}

func (l *logRecord) attr(k string) string {
	for _, a := range l.Attributes {
		if a.Key == k {
			return a.Value.StringValue + a.Value.IntValue
		}
	}
	return ""
}

// received are the log records the collector wrote, in order, with the
// resource attributes of each.
func (c *otelcol) received() ([]logRecord, []map[string]string) {
	var recs []logRecord
	var res []map[string]string
	for _, l := range lines(c.t, c.out) {
		var req struct {
			ResourceLogs []struct {
				Resource struct {
					Attributes []struct {
						Key   string `json:"key"`
						Value struct {
							StringValue string `json:"stringValue"`
						} `json:"value"`
					} `json:"attributes"`
				} `json:"resource"`
				ScopeLogs []struct {
					LogRecords []logRecord `json:"logRecords"`
				} `json:"scopeLogs"`
			} `json:"resourceLogs"`
		}
		if err := json.Unmarshal(l, &req); err != nil {
			c.t.Fatalf("the collector wrote %s: %v", l, err)
		}
		for _, rl := range req.ResourceLogs {
			attrs := map[string]string{}
			for _, a := range rl.Resource.Attributes {
				attrs[a.Key] = a.Value.StringValue
			}
			for _, sl := range rl.ScopeLogs {
				for _, lr := range sl.LogRecords {
					recs = append(recs, lr)
					res = append(res, attrs)
				}
			}
		}
	}
	return recs, res
}

func (c *otelcol) seqs() []int64 {
	recs, _ := c.received()
	out := make([]int64, 0, len(recs))
	for _, r := range recs {
		n, err := strconv.ParseInt(r.attr("guard.seq"), 10, 64)
		if err != nil {
			c.t.Fatalf("guard.seq %q: %v", r.attr("guard.seq"), err)
		}
		out = append(out, n)
	}
	return out
}

func (c *otelcol) waitRecords(n int) {
	c.t.Helper()
	waitFor(c.t, fmt.Sprintf("the collector to receive %d records", n), func() bool {
		seen := map[int64]bool{}
		for _, s := range c.seqs() {
			seen[s] = true
		}
		return len(seen) >= n
	})
}

// Records arrive complete, in order, each once, as log records: the
// record as JSON in the body, its fields as attributes, a severity by its
// kind and decision, guard as the resource's service.
func TestOTLPRecordsArriveInOrder(t *testing.T) {
	oc := newOtelcol(t)
	db := openDB(t, filepath.Join(t.TempDir(), "g.db"))
	mustAppend(t, db, 0, 400)
	recs := committed(t, db)
	startStreamer(t, db, "A", oc.receiver())
	oc.waitRecords(len(recs))
	checkDelivery(t, oc.seqs(), int64(len(recs)), true)
	got, res := oc.received()
	for i, lr := range got {
		r := recs[i]
		checkBody(t, []byte(lr.Body.StringValue), r)
		wantSev := map[Severity]int{Info: 9, Notice: 10, Warning: 13}[severity(r)]
		if lr.SeverityNumber != wantSev || lr.EventName != "guard.audit."+r.Kind {
			t.Errorf("record %d: severity %d event %q, want %d guard.audit.%s", r.Seq, lr.SeverityNumber, lr.EventName, wantSev, r.Kind)
		}
		for k, want := range map[string]string{"guard.id": r.ID, "guard.kind": r.Kind, "guard.call_id": r.CallID,
			"guard.server": r.Server, "guard.tool": r.Tool, "guard.decision": r.Decision, "guard.outcome": r.Outcome, "guard.hash": r.Hash} {
			if lr.attr(k) != want {
				t.Errorf("record %d: %s = %q, want %q", r.Seq, k, lr.attr(k), want)
			}
		}
		if lr.TimeUnixNano != strconv.FormatInt(r.Time.UnixNano(), 10) {
			t.Errorf("record %d: time %s, want %d", r.Seq, lr.TimeUnixNano, r.Time.UnixNano())
		}
		if res[i]["service.name"] != "guard" || res[i]["host.name"] != "test-host" {
			t.Errorf("resource %v", res[i])
		}
	}
}

// The collector stopped while records are streamed, records appended
// while it is down, then started again: nothing is lost, the order is
// kept.
func TestOTLPReceiverOutage(t *testing.T) {
	oc := newOtelcol(t)
	testOutage(t, oc.receiver(), oc.stop, oc.start, oc.waitRecords, oc.seqs)
}

// guard stopped and started again: it resumes after the cursor.
func TestOTLPResumesAfterRestart(t *testing.T) {
	oc := newOtelcol(t)
	testRestart(t, oc.receiver(), oc.waitRecords, oc.seqs)
}
