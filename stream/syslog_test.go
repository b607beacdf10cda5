package stream

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/guard-mcp/guard/policy"
)

// rsyslog is a real rsyslogd (Debian's package) that the test starts in
// the foreground with its own configuration: imtcp on a loopback port,
// guard's messages written to a file one a line, as
// SEVERITY|MSGID|STRUCTURED-DATA|MSG.
type rsyslog struct {
	*daemon
	out string
	tls *testCerts
}

func newRsyslog(t *testing.T, certs *testCerts) *rsyslog {
	t.Helper()
	bin, err := exec.LookPath("rsyslogd")
	if err != nil {
		for _, p := range []string{"/usr/sbin/rsyslogd", "/sbin/rsyslogd"} {
			if _, err := os.Stat(p); err == nil {
				bin = p
			}
		}
	}
	if bin == "" {
		t.Skip("rsyslogd is not installed (Debian: apt-get install rsyslog rsyslog-gnutls): the syslog stream is not tested against a real receiver")
	}
	if certs != nil {
		if _, err := os.Stat("/usr/lib/x86_64-linux-gnu/rsyslog/lmnsd_gtls.so"); err != nil {
			if m, _ := filepath.Glob("/usr/lib/*/rsyslog/lmnsd_gtls.so"); len(m) == 0 {
				t.Skip("rsyslog's TLS driver is not installed (Debian: apt-get install rsyslog-gnutls)")
			}
		}
	}
	dir := t.TempDir()
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	r := &rsyslog{out: filepath.Join(dir, "out.log"), tls: certs, daemon: &daemon{t: t, name: "rsyslogd", addr: addr,
		argv: []string{bin, "-n", "-f", filepath.Join(dir, "rsyslog.conf"), "-i", filepath.Join(dir, "rsyslog.pid")}}}
	if err := os.Mkdir(filepath.Join(dir, "work"), 0o700); err != nil {
		t.Fatal(err)
	}
	var conf bytes.Buffer
	fmt.Fprintf(&conf, "global(workDirectory=%q maxMessageSize=\"1m\"", filepath.Join(dir, "work"))
	if certs != nil {
		fmt.Fprintf(&conf, " defaultNetstreamDriverCAFile=%q defaultNetstreamDriverCertFile=%q defaultNetstreamDriverKeyFile=%q",
			certs.caFile, certs.certFile, certs.keyFile)
	}
	conf.WriteString(")\n")
	if certs != nil {
		conf.WriteString("module(load=\"imtcp\" streamDriver.name=\"gtls\" streamDriver.mode=\"1\" streamDriver.authMode=\"anon\")\n")
	} else {
		conf.WriteString("module(load=\"imtcp\")\n")
	}
	fmt.Fprintf(&conf, "input(type=\"imtcp\" address=\"127.0.0.1\" port=\"%s\")\n", addr[len("127.0.0.1:"):])
	conf.WriteString("template(name=\"guard\" type=\"string\" string=\"%syslogseverity%|%msgid%|%structured-data%|%msg%\\n\")\n")
	fmt.Fprintf(&conf, "if $app-name == \"guard\" then action(type=\"omfile\" file=%q template=\"guard\")\n", r.out)
	if err := os.WriteFile(filepath.Join(dir, "rsyslog.conf"), conf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	r.start()
	t.Cleanup(r.stop)
	return r
}

// received is one line of rsyslog's output.
type received struct {
	severity string
	msgid    string
	sd       string
	msg      []byte
}

func (r *rsyslog) received() []received {
	var out []received
	for _, l := range lines(r.t, r.out) {
		parts := bytes.SplitN(l, []byte("|"), 4)
		if len(parts) != 4 {
			r.t.Fatalf("rsyslog wrote %q", l)
		}
		out = append(out, received{string(parts[0]), string(parts[1]), string(parts[2]), bytes.TrimSpace(parts[3])})
	}
	return out
}

// seqs are the seqs of the records received, in order.
func (r *rsyslog) seqs() []int64 {
	var out []int64
	for _, m := range r.received() {
		var seq int64
		if _, err := fmt.Sscanf(m.sd[bytes.Index([]byte(m.sd), []byte(`seq="`))+5:], "%d", &seq); err != nil {
			r.t.Fatalf("structured data %q: %v", m.sd, err)
		}
		out = append(out, seq)
	}
	return out
}

func (r *rsyslog) waitRecords(n int) {
	r.t.Helper()
	waitFor(r.t, fmt.Sprintf("rsyslog to receive %d records", n), func() bool {
		seen := map[int64]bool{}
		for _, s := range r.seqs() {
			seen[s] = true
		}
		return len(seen) >= n
	})
}

func (r *rsyslog) receiver() policy.Stream {
	return policy.Stream{Syslog: "tcp://" + r.addr, TLS: r.tls != nil}
}

// Records arrive complete, in order, each once, as RFC 5424 messages
// with guard's structured data and the record as JSON.
func TestSyslogRecordsArriveInOrder(t *testing.T) {
	rs := newRsyslog(t, nil)
	db := openDB(t, filepath.Join(t.TempDir(), "g.db"))
	mustAppend(t, db, 0, 400) // 800 records: more than one batch
	recs := committed(t, db)
	startStreamer(t, db, "A", rs.receiver())
	rs.waitRecords(len(recs))
	got := rs.received()
	checkDelivery(t, rs.seqs(), int64(len(recs)), true)
	for i, m := range got {
		r := recs[i]
		wantSev := map[Severity]string{Info: "6", Notice: "5", Warning: "4"}[severity(r)]
		if m.severity != wantSev || m.msgid != r.Kind {
			t.Errorf("record %d: severity %s msgid %s, want %s %s", r.Seq, m.severity, m.msgid, wantSev, r.Kind)
		}
		if want := fmt.Sprintf(`[guard@32473 seq="%d" id="%s" kind="%s"]`, r.Seq, r.ID, r.Kind); m.sd != want {
			t.Errorf("structured data %s, want %s", m.sd, want)
		}
		checkBody(t, m.msg, r)
	}
	// The cursor says the receiver has them all.
	waitFor(t, "the cursor to reach the end", func() bool {
		n, _, err := db.StreamLag(t.Context(), rs.receiver().Name())
		return err == nil && n == 0
	})
}

// rsyslog stopped while records are streamed, records appended while it
// is down, then started again: nothing is lost and the order is kept
// (what was in flight arrives again).
func TestSyslogReceiverOutage(t *testing.T) {
	rs := newRsyslog(t, nil)
	testOutage(t, rs.receiver(), rs.stop, rs.start, rs.waitRecords, rs.seqs)
}

// guard stopped and started again (a new handle on the database, a new
// streamer): it resumes after the cursor, sending nothing twice.
func TestSyslogResumesAfterRestart(t *testing.T) {
	rs := newRsyslog(t, nil)
	testRestart(t, rs.receiver(), rs.waitRecords, rs.seqs)
}

// The same over TLS (RFC 5425), rsyslog's GnuTLS driver holding a
// certificate the streamer checks against a test CA.
func TestSyslogTLS(t *testing.T) {
	certs := newTestCerts(t)
	rs := newRsyslog(t, certs)
	db := openDB(t, filepath.Join(t.TempDir(), "g.db"))
	mustAppend(t, db, 0, 50)
	recs := committed(t, db)
	s, err := New(Options{Log: db, Receivers: []policy.Stream{rs.receiver()}, RootCAs: certs.pool, Poll: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	rs.waitRecords(len(recs))
	checkDelivery(t, rs.seqs(), int64(len(recs)), true)
	for i, m := range rs.received() {
		checkBody(t, m.msg, recs[i])
	}
}
