package stream

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
	"syscall"
	"testing"
	"time"

	"github.com/guard-mcp/guard/policy"
)

// testOutage streams to a receiver that is stopped while records flow and
// started again: every record arrives, in order, at least once.
func testOutage(t *testing.T, recv policy.Stream, stop, start func(), wait func(int), seqs func() []int64) {
	db := openDB(t, filepath.Join(t.TempDir(), "g.db"))
	mustAppend(t, db, 0, 50)
	startStreamer(t, db, "A", recv)
	wait(100)
	app := startAppender(t, db, 50)
	wait(200) // records flowing
	stop()
	before := len(committed(t, db))
	waitFor(t, "records appended while the receiver is down", func() bool { return len(committed(t, db)) >= before+200 })
	start()
	wait(before + 300)
	n := app.end()
	recs := committed(t, db)
	if len(recs) != 2*n {
		t.Fatalf("%d records for %d calls", len(recs), n)
	}
	wait(len(recs))
	checkDelivery(t, seqs(), int64(len(recs)), false)
	waitFor(t, "the cursor to reach the end", func() bool {
		n, _, err := db.StreamLag(t.Context(), recv.Name())
		return err == nil && n == 0
	})
}

// testRestart stops the streamer and the database, appends while guard is
// stopped, and starts both again: the new streamer resumes after the
// cursor, and a clean stop leaves nothing to send twice.
func testRestart(t *testing.T, recv policy.Stream, wait func(int), seqs func() []int64) {
	path := filepath.Join(t.TempDir(), "g.db")
	db := openDB(t, path)
	mustAppend(t, db, 0, 100)
	r := startStreamer(t, db, "first", recv)
	wait(200)
	r.stop()
	if n, err := db.StreamCursor(t.Context(), recv.Name()); err != nil || n != 200 {
		t.Fatalf("cursor %d after a clean stop (%v), want 200", n, err)
	}
	mustAppend(t, db, 100, 100)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openDB(t, path)
	mustAppend(t, db, 200, 50)
	recs := committed(t, db)
	startStreamer(t, db, "second", recv)
	wait(len(recs))
	checkDelivery(t, seqs(), int64(len(recs)), true)
}

// testCerts is a CA and a certificate for 127.0.0.1 it signed, in files.
type testCerts struct {
	pool                      *x509.CertPool
	caFile, certFile, keyFile string
}

func newTestCerts(t *testing.T) *testCerts {
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
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c := &testCerts{pool: x509.NewCertPool(), caFile: filepath.Join(dir, "ca.pem"),
		certFile: filepath.Join(dir, "cert.pem"), keyFile: filepath.Join(dir, "key.pem")}
	c.pool.AddCert(ca)
	for _, f := range []struct {
		path, typ string
		der       []byte
	}{{c.caFile, "CERTIFICATE", caDER}, {c.certFile, "CERTIFICATE", der}, {c.keyFile, "PRIVATE KEY", keyDER}} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// daemon is a receiver's process that a test starts, stops (SIGTERM) and
// starts again on the same address.
type daemon struct {
	t      *testing.T
	name   string
	argv   []string
	addr   string
	cmd    *exec.Cmd
	exited chan struct{}
}

// start starts it and waits until it accepts connections.
func (d *daemon) start() {
	d.t.Helper()
	d.cmd = exec.Command(d.argv[0], d.argv[1:]...)
	d.cmd.Stdout, d.cmd.Stderr = testWriter{d.t}, testWriter{d.t}
	if err := d.cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = d.cmd.Wait(); close(exited) }()
	waitFor(d.t, d.name+" to listen", func() bool {
		select {
		case <-exited:
			d.t.Fatal(d.name + " exited")
		default:
		}
		c, err := net.Dial("tcp", d.addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	d.exited = exited
}

// stop stops it and waits until it has exited.
func (d *daemon) stop() {
	if d.cmd == nil {
		return
	}
	_ = syscall.Kill(d.cmd.Process.Pid, syscall.SIGTERM)
	<-d.exited
	d.cmd = nil
}
