package stream_test

import (
	"testing"

	"github.com/guard-mcp/guard/stream"
)

// A receiver's Label, what logs and metrics show, holds neither the
// password nor the query string of its address; its Name, the key of its
// cursor in the database, stays the address as configured.
func TestStreamLabel(t *testing.T) {
	for _, c := range []struct {
		s           stream.Config
		name, label string
	}{
		{stream.Config{OTLP: "https://otel:4318"}, "otlp https://otel:4318", "otlp https://otel:4318"},
		{stream.Config{OTLP: "https://ingest:S3cret@otel:4318/v1/logs?api_key=K3y"},
			"otlp https://ingest:S3cret@otel:4318/v1/logs?api_key=K3y", "otlp https://ingest@otel:4318/v1/logs"},
		{stream.Config{Syslog: "tcp://logs:6514", TLS: true}, "syslog tcp://logs:6514", "syslog tcp://logs:6514"},
		{stream.Config{Syslog: "tcp://u:pw@logs:6514?token=T"}, "syslog tcp://u:pw@logs:6514?token=T", "syslog tcp://u@logs:6514"},
	} {
		if got := c.s.Name(); got != c.name {
			t.Errorf("%+v: Name() = %q, want %q", c.s, got, c.name)
		}
		if got := c.s.Label(); got != c.label {
			t.Errorf("%+v: Label() = %q, want %q", c.s, got, c.label)
		}
	}
}
