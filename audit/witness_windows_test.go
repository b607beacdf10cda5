package audit

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"sync/atomic"
	"testing"
)

// A syslog witness on Windows says, at each checkpoint, that there is no
// local syslog there; a file URL names a drive's path or a share.
func TestWitnessesOnWindows(t *testing.T) {
	var failures atomic.Int64
	w, err := NewWitnesses([]string{"syslog"}, "", slog.New(slog.DiscardHandler), &failures)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.targets[0].write(context.Background(), &Checkpoint{Size: 1}); !errors.Is(err, errNoSyslog) {
		t.Fatalf("the syslog witness on Windows: %v", err)
	}
	for raw, want := range map[string]string{
		"file:///C:/guard/witness":          "C:/guard/witness",
		"file://localhost/d:/witness":       "d:/witness",
		"file://backup/share/guard/witness": "//backup/share/guard/witness",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := fileURLPath(u); got != want {
			t.Errorf("%s: %q, want %q", raw, got, want)
		}
	}
}
