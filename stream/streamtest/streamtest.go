// Package streamtest runs the real receivers the audit stream's tests
// send to: rsyslogd from Debian's packages and an OpenTelemetry Collector
// built by scripts/otelcol.sh, each started by the test with its own
// configuration on a free loopback port, stopped and started again at
// will; and it reads what they received.
package streamtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Daemon is a receiver's process that a test starts, stops (SIGTERM) and
// starts again on the same address.
type Daemon struct {
	T    *testing.T
	Name string
	Argv []string
	// Addr is the loopback address it listens on.
	Addr   string
	cmd    *exec.Cmd
	exited chan struct{}
}

// Start starts it and waits until it accepts connections.
func (d *Daemon) Start() {
	d.T.Helper()
	d.cmd = exec.Command(d.Argv[0], d.Argv[1:]...)
	d.cmd.Stdout, d.cmd.Stderr = LogWriter{d.T}, LogWriter{d.T}
	if err := d.cmd.Start(); err != nil {
		d.T.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = d.cmd.Wait(); close(exited) }()
	WaitFor(d.T, d.Name+" to listen", func() bool {
		select {
		case <-exited:
			d.T.Fatal(d.Name + " exited")
		default:
		}
		c, err := net.Dial("tcp", d.Addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	d.exited = exited
}

// Stop stops it and waits until it has exited.
func (d *Daemon) Stop() {
	if d.cmd == nil {
		return
	}
	if d.cmd.Process.Signal(syscall.SIGTERM) != nil {
		_ = d.cmd.Process.Kill() // Windows has no SIGTERM
	}
	<-d.exited
	d.cmd = nil
}

// LogWriter sends what is written to it to the test's log.
type LogWriter struct{ T *testing.T }

func (w LogWriter) Write(b []byte) (int, error) {
	w.T.Log(string(b))
	return len(b), nil
}

// WaitFor polls cond until it holds, failing the test after a minute.
func WaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freeAddr returns a loopback address no one listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// lines reads a file's complete lines (none when it does not exist yet).
func lines(t *testing.T, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out [][]byte
	for len(b) > 0 {
		i := 0
		for i < len(b) && b[i] != '\n' {
			i++
		}
		if i == len(b) {
			break // a line being written
		}
		out = append(out, b[:i])
		b = b[i+1:]
	}
	return out
}

// unique is the number of distinct seqs.
func unique(seqs []int64) int {
	seen := map[int64]bool{}
	for _, s := range seqs {
		seen[s] = true
	}
	return len(seen)
}

// CheckDelivery checks what a receiver got, the seqs in the order
// received, against a log of n records: every record at least once, each
// for the first time only after every record before it; with exact, each
// once.
func CheckDelivery(t *testing.T, got []int64, n int64, exact bool) {
	t.Helper()
	var next int64 = 1
	dups := 0
	for i, s := range got {
		switch {
		case s == next:
			next++
		case s < next:
			dups++
		default:
			t.Fatalf("record %d arrived (at %d) before record %d: a gap or a reorder", s, i, next)
		}
	}
	if next != n+1 {
		t.Fatalf("received records 1 to %d of %d", next-1, n)
	}
	if exact && dups > 0 {
		t.Fatalf("%d duplicates where none were expected: %v", dups, got)
	}
	t.Logf("%d records received in order, %d duplicates", n, dups)
}

// Certs are a CA and a certificate for 127.0.0.1 it signed, in files; the
// certificate serves a receiver, or identifies a client to one.
type Certs struct {
	Pool                      *x509.CertPool
	CAFile, CertFile, KeyFile string
}

// NewCerts makes them in a temporary directory.
func NewCerts(t *testing.T) *Certs {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "guard test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c := &Certs{Pool: x509.NewCertPool(), CAFile: filepath.Join(dir, "ca.pem"),
		CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem")}
	c.Pool.AddCert(ca)
	for _, f := range []struct {
		path, typ string
		der       []byte
	}{{c.CAFile, "CERTIFICATE", caDER}, {c.CertFile, "CERTIFICATE", der}, {c.KeyFile, "PRIVATE KEY", keyDER}} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return c
}
