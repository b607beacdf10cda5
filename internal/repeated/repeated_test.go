package repeated

import (
	"bytes"
	"log/slog"
	"testing"
	"time"
)

// A failure every second for 95 s logs the first, then one line every
// 30 s with the repeats since the last, and the end once, with the count
// and the time it lasted; a failure after that starts it again.
func TestCondition(t *testing.T) {
	var out bytes.Buffer
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := &Condition{
		Logger: slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}})),
		Level: slog.LevelWarn,
		Msg:   "stream receiver failing; retrying",
		What:  "stream receiver",
		Now:   func() time.Time { return now },
	}
	if c.Ok() || c.Holds() {
		t.Fatal("ended or holding before any failure")
	}
	for i := range 96 {
		if first := c.Failed("err", "connection refused"); first != (i == 0) {
			t.Fatalf("failure %d: first %v", i, first)
		}
		now = now.Add(time.Second)
	}
	if !c.Holds() || !c.Ok("receiver", "syslog") || c.Ok() {
		t.Fatal("Ok did not end it once")
	}
	c.Failed("err", "again")
	want := `level=WARN msg="stream receiver failing; retrying" err="connection refused"
level=WARN msg="stream receiver failing; retrying" repeats=29 for=30s err="connection refused"
level=WARN msg="stream receiver failing; retrying" repeats=29 for=1m0s err="connection refused"
level=WARN msg="stream receiver failing; retrying" repeats=29 for=1m30s err="connection refused"
level=INFO msg="stream receiver recovered after 96 failures in 1m36s" failures=96 down=1m36s receiver=syslog
level=WARN msg="stream receiver failing; retrying" err=again
`
	if got := out.String(); got != want {
		t.Errorf("log:\n%s\nwant:\n%s", got, want)
	}
}
