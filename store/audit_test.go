package store

import (
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
)

// The hash of a record's canonical form never changes: every chain
// already written depends on it.
func TestHashRecordIsStable(t *testing.T) {
	for i, tc := range []struct {
		r    *guard.Record
		want string
	}{
		{&guard.Record{}, "9e326d3fb7bad4524c91cf04cfcb610733011304346867603a5f1a14ce0fed9c"},
		{&guard.Record{Seq: 7, ID: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", CallID: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c",
			Kind: guard.KindRequest, Time: time.Date(2026, 7, 28, 12, 34, 56, 789e6, time.UTC), Session: "s1",
			Client: "claude/1.0", Protocol: "2025-06-18", Server: "files", Direction: "client", Method: "tools/call",
			Tool: "write_file", Arguments: `{"path":"/tmp/x","content":"a\"b\\c"}`, Pin: "sha256:ab", Decision: "allowed",
			DecidedBy: "rule-1", Reason: "ok", RequestSize: 123, PrevHash: "00ff"},
			"5fd6a433ea8d657841adacf1942d2a4bab83819e526c44beb6b86f4c6768fb72"},
		{&guard.Record{Kind: guard.KindOutcome, Outcome: "ok", Result: "\x00\x01\x1f\b\f\n\r\t\"\\ é \xff\xfe",
			ResponseSize: -5, DurationMS: 1 << 40, Detail: `{"code":-32000}`, Time: time.UnixMilli(1).UTC()},
			"d660af2e680fa8821254fd1ab198b1f8526c85bb1f405a00087c6ce27c0c839f"},
	} {
		if got := HashRecord(tc.r); got != tc.want {
			t.Errorf("record %d: hash %s, want %s", i, got, tc.want)
		}
		// The writer's form, which reuses its buffer, agrees.
		buf := []byte("left over from a longer record")
		if got, _ := hashRecord(buf, tc.r); got != tc.want {
			t.Errorf("record %d: hash with a used buffer %s, want %s", i, got, tc.want)
		}
	}
}
