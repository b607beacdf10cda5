// Command tracetree renders one trace of an OpenTelemetry Collector's
// file exporter output (OTLP JSON, one export request a line) as an HTML
// page: the span tree, each span's timing as a bar, and its attributes.
// The README's picture of a trace is this page, captured by a browser:
//
//	GUARD_TRACE_OUT=/tmp/traces.jsonl GUARD_TEST_OTELCOL=... go test -run TraceContinues ./proxy/
//	go run ./docs/tracetree -in /tmp/traces.jsonl -span guard.hold -out /tmp/trace.html
//	chromium --headless --screenshot=docs/screenshots/trace.png --window-size=1200,560 /tmp/trace.html
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"html"
	"os"
	"slices"
	"strconv"
	"strings"
)

type keyValue struct {
	Key   string `json:"key"`
	Value struct {
		StringValue string `json:"stringValue"`
		IntValue    string `json:"intValue"`
		ArrayValue  *struct {
			Values []struct {
				StringValue string `json:"stringValue"`
			} `json:"values"`
		} `json:"arrayValue"`
	} `json:"value"`
}

func (kv keyValue) text() string {
	if a := kv.Value.ArrayValue; a != nil {
		var vs []string
		for _, v := range a.Values {
			vs = append(vs, v.StringValue)
		}
		return "[" + strings.Join(vs, ", ") + "]"
	}
	return kv.Value.StringValue + kv.Value.IntValue
}

type span struct {
	TraceID      string     `json:"traceId"`
	SpanID       string     `json:"spanId"`
	ParentSpanID string     `json:"parentSpanId"`
	Name         string     `json:"name"`
	Kind         int        `json:"kind"`
	Start        string     `json:"startTimeUnixNano"`
	End          string     `json:"endTimeUnixNano"`
	Attributes   []keyValue `json:"attributes"`
	Status       struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"status"`
	start, end int64
}

var kinds = map[int]string{1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}

func main() {
	in := flag.String("in", "", "the collector's traces `file`")
	out := flag.String("out", "trace.html", "the HTML `file` to write")
	pick := flag.String("span", "", "render the trace holding a span of this `name` (default: the last trace)")
	flag.Parse()
	if err := run(*in, *out, *pick); err != nil {
		fmt.Fprintln(os.Stderr, "tracetree:", err)
		os.Exit(1)
	}
}

func run(in, out, pick string) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	var spans []*span
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var req struct {
			ResourceSpans []struct {
				ScopeSpans []struct {
					Spans []*span `json:"spans"`
				} `json:"scopeSpans"`
			} `json:"resourceSpans"`
		}
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			return fmt.Errorf("%s: %w", in, err)
		}
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				spans = append(spans, ss.Spans...)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(spans) == 0 {
		return fmt.Errorf("%s holds no spans", in)
	}
	trace := spans[len(spans)-1].TraceID
	for _, s := range spans {
		if s.Name == pick {
			trace = s.TraceID
		}
	}
	var mine []*span
	ids := map[string]bool{}
	for _, s := range spans {
		if s.TraceID == trace {
			s.start, _ = strconv.ParseInt(s.Start, 10, 64)
			s.end, _ = strconv.ParseInt(s.End, 10, 64)
			mine = append(mine, s)
			ids[s.SpanID] = true
		}
	}
	slices.SortFunc(mine, func(a, b *span) int { return cmp.Compare(a.start, b.start) })
	first, last := mine[0].start, mine[0].end
	for _, s := range mine {
		first, last = min(first, s.start), max(last, s.end)
	}
	children := map[string][]*span{}
	var roots []*span
	for _, s := range mine {
		if ids[s.ParentSpanID] {
			children[s.ParentSpanID] = append(children[s.ParentSpanID], s)
		} else {
			roots = append(roots, s)
		}
	}
	var b strings.Builder
	b.WriteString(`<!doctype html><meta charset="utf-8"><title>trace</title><style>
body{font:13px system-ui,sans-serif;margin:16px;color:#222}
h1{font-size:15px;margin:0 0 10px}
table{border-collapse:collapse;width:100%}
td{padding:3px 6px;vertical-align:top;border-bottom:1px solid #eee}
.name{white-space:nowrap;font-weight:600}.kind{color:#777;font-weight:400}
.bar{position:relative;height:14px;background:#f3f3f3;width:360px}
.bar div{position:absolute;top:0;height:14px;background:#4a7fd4;min-width:2px}
.err .bar div{background:#d44a4a}
.attrs{font:11px ui-monospace,monospace;color:#444}
.dur{white-space:nowrap;text-align:right}
</style>`)
	fmt.Fprintf(&b, "<h1>trace %s &middot; %d spans &middot; %s</h1><table>", html.EscapeString(trace), len(mine), dur(last-first))
	var walk func(s *span, depth int)
	walk = func(s *span, depth int) {
		class := ""
		if s.Status.Code == 2 {
			class = ` class="err"`
		}
		left := float64(s.start-first) / float64(max(last-first, 1)) * 100
		width := float64(s.end-s.start) / float64(max(last-first, 1)) * 100
		var attrs []string
		for _, a := range s.Attributes {
			attrs = append(attrs, html.EscapeString(a.Key+"="+a.text()))
		}
		fmt.Fprintf(&b, `<tr%s><td class="name" style="padding-left:%dpx">%s <span class="kind">%s</span></td>`+
			`<td><div class="bar"><div style="left:%.2f%%;width:%.2f%%"></div></div></td><td class="dur">%s</td><td class="attrs">%s</td></tr>`,
			class, 6+depth*18, html.EscapeString(s.Name), kinds[s.Kind], left, width, dur(s.end-s.start), strings.Join(attrs, "<br>"))
		for _, c := range children[s.SpanID] {
			walk(c, depth+1)
		}
	}
	for _, r := range roots {
		if r.ParentSpanID != "" {
			fmt.Fprintf(&b, `<tr><td class="name kind" colspan="4">parent %s (the client's span)</td></tr>`, html.EscapeString(r.ParentSpanID))
		}
		walk(r, 1)
	}
	b.WriteString("</table>")
	return os.WriteFile(out, []byte(b.String()), 0o644)
}

func dur(ns int64) string {
	switch {
	case ns >= 1e6:
		return fmt.Sprintf("%.1f ms", float64(ns)/1e6)
	default:
		return fmt.Sprintf("%d µs", ns/1000)
	}
}
