package policy_test

import (
	"testing"

	"github.com/guard-mcp/guard/policy"
)

// A receiver's Label, what logs and metrics show, holds neither the
// password nor the query string of its address; its Name, the key of its
// cursor in the database, stays the address as configured.
func TestStreamLabel(t *testing.T) {
	for _, c := range []struct {
		s           policy.Stream
		name, label string
	}{
		{policy.Stream{OTLP: "https://otel:4318"}, "otlp https://otel:4318", "otlp https://otel:4318"},
		{policy.Stream{OTLP: "https://ingest:S3cret@otel:4318/v1/logs?api_key=K3y"},
			"otlp https://ingest:S3cret@otel:4318/v1/logs?api_key=K3y", "otlp https://ingest@otel:4318/v1/logs"},
		{policy.Stream{Syslog: "tcp://logs:6514", TLS: true}, "syslog tcp://logs:6514", "syslog tcp://logs:6514"},
		{policy.Stream{Syslog: "tcp://u:pw@logs:6514?token=T"}, "syslog tcp://u:pw@logs:6514?token=T", "syslog tcp://u@logs:6514"},
	} {
		if got := c.s.Name(); got != c.name {
			t.Errorf("%+v: Name() = %q, want %q", c.s, got, c.name)
		}
		if got := c.s.Label(); got != c.label {
			t.Errorf("%+v: Label() = %q, want %q", c.s, got, c.label)
		}
	}
}
