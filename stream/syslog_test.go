package stream

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/guard-mcp/guard/policy"
	"github.com/guard-mcp/guard/stream/streamtest"
)

// Records arrive complete, in order, each once, as RFC 5424 messages
// with guard's structured data and the record as JSON.
func TestSyslogRecordsArriveInOrder(t *testing.T) {
	rs := streamtest.NewRsyslog(t, nil)
	db := openDB(t, filepath.Join(t.TempDir(), "g.db"))
	mustAppend(t, db, 0, 400) // 800 records: more than one batch
	recs := committed(t, db)
	startStreamer(t, db, "A", rs.Receiver())
	rs.WaitRecords(len(recs))
	streamtest.CheckDelivery(t, rs.Seqs(), int64(len(recs)), true)
	for i, m := range rs.Received() {
		r := recs[i]
		wantSev := map[Severity]string{Info: "6", Notice: "5", Warning: "4"}[severity(r)]
		if m.Severity != wantSev || m.MsgID != r.Kind {
			t.Errorf("record %d: severity %s msgid %s, want %s %s", r.Seq, m.Severity, m.MsgID, wantSev, r.Kind)
		}
		if want := fmt.Sprintf(`[guard@32473 seq="%d" id="%s" kind="%s"]`, r.Seq, r.ID, r.Kind); m.SD != want {
			t.Errorf("structured data %s, want %s", m.SD, want)
		}
		checkBody(t, m.Msg, r)
	}
	// The cursor says the receiver has them all.
	streamtest.WaitFor(t, "the cursor to reach the end", func() bool {
		n, _, err := db.StreamLag(t.Context(), rs.Receiver().Name())
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
	db := openDB(t, filepath.Join(t.TempDir(), "g.db"))
	mustAppend(t, db, 0, 50)
	recs := committed(t, db)
	s, err := New(Options{Log: db, Receivers: []policy.Stream{rs.Receiver()}, RootCAs: certs.Pool, Poll: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	rs.WaitRecords(len(recs))
	streamtest.CheckDelivery(t, rs.Seqs(), int64(len(recs)), true)
	for i, m := range rs.Received() {
		checkBody(t, m.Msg, recs[i])
	}
}
