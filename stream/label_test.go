package stream

import (
	"bytes"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/guard-mcp/guard/stream/streamtest"
)

// syncBuffer is a log's text, written from the streamer's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A receiver whose address holds a password and a token is named in the
// log and in Lag (the metrics' label) without them; its cursor is kept
// under its address as configured.
func TestReceiverLabelHidesCredentials(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: the receiver fails
	recv := Config{OTLP: "http://ingest:S3cretPw@" + addr + "/v1/logs?api_key=K3yValue"}
	db := openDB(t, filepath.Join(t.TempDir(), "g.db"))
	mustAppend(t, db, 0, 5)
	var logs syncBuffer
	_, s := startWith(t, Options{Log: db.Streams(), Receivers: []Config{recv}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	streamtest.WaitFor(t, "the receiver to be said failing", func() bool { return strings.Contains(logs.String(), "stream receiver failing") })
	out := logs.String()
	for _, secret := range []string{"S3cretPw", "K3yValue"} {
		if strings.Contains(out, secret) {
			t.Errorf("the log holds %q: %s", secret, out)
		}
	}
	label := "otlp http://ingest@" + addr + "/v1/logs"
	if !strings.Contains(out, label) {
		t.Errorf("the log does not name the receiver %q: %s", label, out)
	}
	lags, err := s.Lag(t.Context())
	if err != nil || len(lags) != 1 || lags[0].Receiver != label || lags[0].Records != 10 {
		t.Fatalf("Lag: %+v %v; want %q behind by 10", lags, err, label)
	}
	if n, _, err := db.Streams().StreamLag(t.Context(), recv.Name()); err != nil || n != 10 {
		t.Fatalf("lag under the receiver's name: %d %v", n, err)
	}
}
