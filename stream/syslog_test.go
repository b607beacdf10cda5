package stream

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/guard-mcp/guard/stream/streamtest"
)

// Records arrive complete, in order, each once, as RFC 5424 messages
// with guard's structured data (the user, where the front authenticated
// one) and the record as JSON.
func TestSyslogRecordsArriveInOrder(t *testing.T) {
	rs := streamtest.NewRsyslog(t, nil)
	db := openDB(t, filepath.Join(t.TempDir(), "g.db"))
	mustAppend(t, db, 0, 400) // 800 records: more than one batch
	recs := committed(t, db)
	startStreamer(t, db, "A", entry(rs))
	rs.WaitRecords(len(recs))
	streamtest.CheckDelivery(t, rs.Seqs(), int64(len(recs)), true)
	for i, m := range rs.Received() {
		r := recs[i]
		wantSev := map[Severity]string{Info: "6", Notice: "5", Warning: "4"}[severity(r)]
		if m.Severity != wantSev || m.MsgID != r.Kind {
			t.Errorf("record %d: severity %s msgid %s, want %s %s", r.Seq, m.Severity, m.MsgID, wantSev, r.Kind)
		}
		user := ""
		if r.User != "" {
			user = ` user="user-7f3a" user_email="alice@example.com" user_group="sre" user_group="on-call \"eu\" [a\\b\]"`
		}
		if want := fmt.Sprintf(`[guard@32473 seq="%d" id="%s" kind="%s"%s]`, r.Seq, r.ID, r.Kind, user); m.SD != want {
			t.Errorf("structured data %s, want %s", m.SD, want)
		}
		checkBody(t, m.Msg, r)
	}
	// The cursor says the receiver has them all.
	streamtest.WaitFor(t, "the cursor to reach the end", func() bool {
		n, _, err := db.Streams().StreamLag(t.Context(), entry(rs).Name())
		return err == nil && n == 0
	})
}

// rsyslog stopped while records are streamed, records appended while it
// is down, then started again: nothing is lost and the order is kept
// (what was in flight arrives again).
func TestSyslogReceiverOutage(t *testing.T) {
	testOutage(t, streamtest.NewRsyslog(t, nil))
}

// guard stopped and started again (a new handle on the database, a new
// streamer): it resumes after the cursor, sending nothing twice.
func TestSyslogResumesAfterRestart(t *testing.T) {
	testRestart(t, streamtest.NewRsyslog(t, nil))
}

// The same over TLS (RFC 5425), rsyslog's GnuTLS driver holding a
// certificate the streamer checks against a test CA.
func TestSyslogTLS(t *testing.T) {
	certs := streamtest.NewCerts(t)
	rs := streamtest.NewRsyslog(t, certs)
	recs := testDelivery(t, rs, certs.Pool, 50)
	for i, m := range rs.Received() {
		checkBody(t, m.Msg, recs[i])
	}
}

// logLines keeps the messages a streamer logs.
type logLines struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logLines) WithGroup(string) slog.Handler      { return l }

func (l *logLines) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.HasPrefix(m, msg) {
			n++
		}
	}
	return n
}

// A receiver that is down is said to be failing once, however long it
// stays down and however many records wait; the stream falling behind and
// catching up are said once each; when it is back, once.
func TestSyslogLagIsLogged(t *testing.T) {
	rs := streamtest.NewRsyslog(t, nil)
	db := openDB(t, filepath.Join(t.TempDir(), "g.db"))
	rs.Stop()
	mustAppend(t, db, 0, 20)
	logs := &logLines{}
	_, s := startWith(t, Options{Log: db.Streams(), Receivers: []Config{entry(rs)}, Behind: 100 * time.Millisecond, Logger: slog.New(logs)})
	streamtest.WaitFor(t, "the stream to be said behind", func() bool { return logs.count("the audit stream is behind") > 0 })
	mustAppend(t, db, 20, 20)
	rs.Start()
	rs.WaitRecords(len(committed(t, db)))
	streamtest.WaitFor(t, "the stream to be said caught up", func() bool { return logs.count("the audit stream has caught up") > 0 })
	for msg, want := range map[string]int{"stream receiver failing": 1, "stream receiver recovered after": 1,
		"the audit stream is behind": 1, "the audit stream has caught up": 1} {
		if n := logs.count(msg); n != want {
			t.Errorf("%q logged %d times, want %d", msg, n, want)
		}
	}
	lags, err := s.Lag(t.Context())
	if err != nil || len(lags) != 1 || lags[0].Records != 0 || lags[0].Age != 0 {
		t.Fatalf("lag once caught up: %+v %v", lags, err)
	}
}

// A TLS receiver whose certificate the streamer cannot verify gets
// nothing, and the cursor stays.
func TestSyslogTLSUntrusted(t *testing.T) {
	rs := streamtest.NewRsyslog(t, streamtest.NewCerts(t))
	db := openDB(t, filepath.Join(t.TempDir(), "g.db"))
	mustAppend(t, db, 0, 5)
	logs := &logLines{}
	startWith(t, Options{Log: db.Streams(), Receivers: []Config{entry(rs)}, Logger: slog.New(logs)})
	streamtest.WaitFor(t, "the receiver to be said failing", func() bool { return logs.count("stream receiver failing") > 0 })
	if got := rs.Seqs(); len(got) != 0 {
		t.Fatalf("an unverified receiver got records %v", got)
	}
	if n, _, err := db.Streams().StreamLag(t.Context(), entry(rs).Name()); err != nil || n != 10 {
		t.Fatalf("lag %d (%v), want all 10 records", n, err)
	}
}

// Catching up with a backlog goes no faster than MaxRate.
func TestCatchUpIsPaced(t *testing.T) {
	rs := streamtest.NewRsyslog(t, nil)
	db := openDB(t, filepath.Join(t.TempDir(), "g.db"))
	mustAppend(t, db, 0, 1000)
	recs := committed(t, db)
	began := time.Now()
	startWith(t, Options{Log: db.Streams(), Receivers: []Config{entry(rs)}, MaxRate: 4000})
	rs.WaitRecords(len(recs))
	// Three full batches of 500 at 4000 a second before the last one.
	if took, least := time.Since(began), 3*batchRecords*time.Second/4000; took < least {
		t.Fatalf("2000 records in %v: faster than 4000 a second allows (%v)", took, least)
	}
	streamtest.CheckDelivery(t, rs.Seqs(), int64(len(recs)), true)
}
