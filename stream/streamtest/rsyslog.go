package streamtest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Rsyslog is a real rsyslogd (Debian's package rsyslog, and
// rsyslog-gnutls for TLS) run in the foreground with its own
// configuration: imtcp on a loopback port, guard's messages written to a
// file one a line, as SEVERITY|MSGID|STRUCTURED-DATA|MSG.
type Rsyslog struct {
	*Daemon
	out   string
	certs *Certs
}

// NewRsyslog starts one (over TLS with certs' certificate when certs is
// not nil), stopped when the test ends; it skips the test when rsyslogd is
// not installed.
func NewRsyslog(t *testing.T, certs *Certs) *Rsyslog {
	t.Helper()
	bin, err := exec.LookPath("rsyslogd")
	if err != nil && runtime.GOOS != "windows" { // Debian's place is Unix's
		if _, err := os.Stat("/usr/sbin/rsyslogd"); err == nil {
			bin = "/usr/sbin/rsyslogd"
		}
	}
	if bin == "" {
		t.Skip("rsyslogd is not installed (Debian: apt-get install rsyslog rsyslog-gnutls): the syslog stream is not tested against a real receiver")
	}
	if m, _ := filepath.Glob("/usr/lib/*/rsyslog/lmnsd_gtls.so"); certs != nil && len(m) == 0 {
		t.Skip("rsyslog's TLS driver is not installed (Debian: apt-get install rsyslog-gnutls)")
	}
	dir := t.TempDir()
	addr := freeAddr(t)
	r := &Rsyslog{out: filepath.Join(dir, "out.log"), certs: certs, Daemon: &Daemon{T: t, Name: "rsyslogd", Addr: addr,
		Argv: []string{bin, "-n", "-f", filepath.Join(dir, "rsyslog.conf"), "-i", filepath.Join(dir, "rsyslog.pid")}}}
	if err := os.Mkdir(filepath.Join(dir, "work"), 0o700); err != nil {
		t.Fatal(err)
	}
	var conf bytes.Buffer
	fmt.Fprintf(&conf, "global(workDirectory=%q maxMessageSize=\"1m\"", filepath.Join(dir, "work"))
	if certs != nil {
		fmt.Fprintf(&conf, " defaultNetstreamDriverCAFile=%q defaultNetstreamDriverCertFile=%q defaultNetstreamDriverKeyFile=%q",
			certs.CAFile, certs.CertFile, certs.KeyFile)
	}
	conf.WriteString(")\n")
	if certs != nil {
		conf.WriteString("module(load=\"imtcp\" streamDriver.name=\"gtls\" streamDriver.mode=\"1\" streamDriver.authMode=\"anon\")\n")
	} else {
		conf.WriteString("module(load=\"imtcp\")\n")
	}
	fmt.Fprintf(&conf, "input(type=\"imtcp\" address=\"127.0.0.1\" port=\"%s\")\n", strings.TrimPrefix(addr, "127.0.0.1:"))
	conf.WriteString("template(name=\"guard\" type=\"string\" string=\"%syslogseverity%|%msgid%|%structured-data%|%msg%\\n\")\n")
	fmt.Fprintf(&conf, "if $app-name == \"guard\" then action(type=\"omfile\" file=%q template=\"guard\")\n", r.out)
	if err := os.WriteFile(filepath.Join(dir, "rsyslog.conf"), conf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	r.Start()
	t.Cleanup(r.Stop)
	return r
}

// Message is one message rsyslog received.
type Message struct {
	Severity string
	MsgID    string
	SD       string // the structured data
	Msg      []byte
}

// Received are the messages received, in order.
func (r *Rsyslog) Received() []Message {
	var out []Message
	for _, l := range lines(r.T, r.out) {
		parts := bytes.SplitN(l, []byte("|"), 4)
		if len(parts) != 4 {
			r.T.Fatalf("rsyslog wrote %q", l)
		}
		out = append(out, Message{string(parts[0]), string(parts[1]), string(parts[2]), bytes.TrimSpace(parts[3])})
	}
	return out
}

// Seqs are the seqs of the records received, in order.
func (r *Rsyslog) Seqs() []int64 {
	var out []int64
	for _, m := range r.Received() {
		var seq int64
		i := strings.Index(m.SD, `seq="`)
		if i < 0 {
			r.T.Fatalf("structured data without seq: %q", m.SD)
		}
		if _, err := fmt.Sscanf(m.SD[i+5:], "%d", &seq); err != nil {
			r.T.Fatalf("structured data %q: %v", m.SD, err)
		}
		out = append(out, seq)
	}
	return out
}

// WaitRecords waits until n distinct records have arrived.
func (r *Rsyslog) WaitRecords(n int) {
	r.T.Helper()
	WaitFor(r.T, fmt.Sprintf("rsyslog to receive %d records", n), func() bool { return unique(r.Seqs()) >= n })
}

// Entry is a receiver's entry in audit.stream, with stream.Config's
// fields (a stream.Config converts from it): streamtest does not import
// stream, whose own tests use it.
type Entry struct {
	Syslog string
	TLS    bool
	OTLP   string
}

// Receiver is the receiver's entry in audit.stream.
func (r *Rsyslog) Receiver() Entry {
	return Entry{Syslog: "tcp://" + r.Addr, TLS: r.certs != nil}
}
