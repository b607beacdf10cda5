package stream

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	guard "github.com/guard-mcp/guard"
)

// syslog sends records to a syslog receiver as RFC 5424 messages over
// TCP (RFC 6587's octet counting), in TLS when configured (RFC 5425).
//
// Plain syslog has no acknowledgment: a receiver's host may acknowledge
// bytes that the daemon never reads (it stopped, or crashed, with them in
// its socket's buffer). So a connection carries the records of one
// window, and the window ends with guard closing its side: the receiver
// reads to the end and closes in turn. That orderly close, with every
// byte acknowledged by the receiver's host and no reset, is the receipt
// (confirm); anything else sends the window again on a new connection.
type syslog struct {
	addr     string // host:port
	tls      *tls.Config
	hostname string
	dialer   net.Dialer
	c        *syslogConn // nil between windows
	buf      []byte
}

// syslogConn is one window's connection.
type syslogConn struct {
	conn net.Conn     // the TLS connection, or raw
	raw  *net.TCPConn // the TCP connection under it
	w    *bufio.Writer
	// finSent is set once guard has closed its side; closed carries what
	// ended the receiver's side, and early whether that came first.
	finSent atomic.Bool
	early   atomic.Bool
	closed  chan error
}

// ioTimeout bounds a write to the receiver, and the wait for its close.
const ioTimeout = 30 * time.Second

func newSyslog(raw string, useTLS bool, roots *x509.CertPool, hostname string) (*syslog, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "tcp" || u.Port() == "" {
		return nil, fmt.Errorf("syslog %q: use tcp://HOST:PORT", guard.DisplayURL(raw))
	}
	s := &syslog{addr: u.Host, hostname: headerField(hostname, 255)}
	s.dialer.Timeout = 10 * time.Second
	s.dialer.KeepAlive = 30 * time.Second
	if useTLS {
		s.tls = &tls.Config{ServerName: u.Hostname(), RootCAs: roots, MinVersion: tls.VersionTLS12}
	}
	return s, nil
}

func (s *syslog) dial(ctx context.Context) (*syslogConn, error) {
	nc, err := s.dialer.DialContext(ctx, "tcp", s.addr)
	if err != nil {
		return nil, fmt.Errorf("syslog %s: %w", s.addr, err)
	}
	c := &syslogConn{conn: nc, raw: nc.(*net.TCPConn), closed: make(chan error, 1)}
	if s.tls != nil {
		tc := tls.Client(nc, s.tls)
		hctx, cancel := context.WithTimeout(ctx, ioTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("syslog %s: TLS: %w", s.addr, err)
		}
		c.conn = tc
	}
	c.w = bufio.NewWriterSize(c.conn, 64<<10)
	// A syslog receiver sends nothing: a read returns when it closes (or
	// resets) its side.
	go func() {
		var b [512]byte
		for {
			if _, err := c.conn.Read(b[:]); err != nil {
				c.early.Store(!c.finSent.Load())
				c.closed <- err
				return
			}
		}
	}()
	return c, nil
}

func (s *syslog) send(ctx context.Context, recs []*guard.Record) error {
	if s.c == nil {
		c, err := s.dial(ctx)
		if err != nil {
			return err
		}
		s.c = c
	}
	c := s.c
	stop := context.AfterFunc(ctx, func() { c.conn.SetWriteDeadline(time.Now()) })
	defer stop()
	c.conn.SetWriteDeadline(time.Now().Add(ioTimeout))
	for _, r := range recs {
		s.buf = s.message(s.buf[:0], r)
		c.w.WriteString(strconv.Itoa(len(s.buf)))
		c.w.WriteByte(' ')
		c.w.Write(s.buf)
	}
	if err := c.w.Flush(); err != nil {
		return fmt.Errorf("syslog %s: %w", s.addr, err)
	}
	select {
	case err := <-c.closed:
		c.closed <- err
		return fmt.Errorf("syslog %s: the receiver closed the connection: %w", s.addr, err)
	default:
	}
	return nil
}

// confirm ends the window: guard closes its side and waits for the
// receiver's orderly close.
func (s *syslog) confirm(ctx context.Context) error {
	c := s.c
	if c == nil {
		return nil
	}
	s.c = nil
	defer c.conn.Close()
	c.finSent.Store(true)
	var err error
	if tc, ok := c.conn.(*tls.Conn); ok {
		// close_notify, then the TCP connection's end.
		c.conn.SetWriteDeadline(time.Now().Add(ioTimeout))
		err = tc.CloseWrite()
	}
	if err == nil {
		err = c.raw.CloseWrite()
	}
	if err != nil {
		return fmt.Errorf("syslog %s: %w", s.addr, err)
	}
	t := time.NewTimer(ioTimeout)
	defer t.Stop()
	select {
	case err = <-c.closed:
	case <-ctx.Done():
		return fmt.Errorf("syslog %s: %w", s.addr, ctx.Err())
	case <-t.C:
		return fmt.Errorf("syslog %s: the receiver did not close the connection within %s", s.addr, ioTimeout)
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("syslog %s: the connection failed: %w", s.addr, err)
	}
	if c.early.Load() {
		return fmt.Errorf("syslog %s: the receiver closed the connection before the end", s.addr)
	}
	return settled(ctx, c.raw)
}

// settled waits until the receiver's host has acknowledged every byte
// sent, and checks that the connection was not reset: a daemon that
// closes with bytes unread resets it.
func settled(ctx context.Context, c *net.TCPConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("syslog: %w", err)
	}
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		var unacked int
		var opErr error
		if err := rc.Control(func(fd uintptr) { unacked, opErr = unacknowledged(fd) }); err != nil {
			return fmt.Errorf("syslog: %w", err)
		}
		if opErr != nil {
			return fmt.Errorf("syslog: %w", opErr)
		}
		if unacked == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("syslog: %w", ctx.Err())
		case <-time.After(wait):
		}
	}
}

func (s *syslog) reset() {
	if s.c != nil {
		s.c.conn.Close()
		s.c = nil
	}
}

func (s *syslog) close() { s.reset() }

// facility is RFC 5424's "log audit".
const facility = 13

// sdID names guard's structured data element. 32473 is the private
// enterprise number RFC 5612 sets aside for documentation: guard has none
// of its own.
const sdID = "guard@32473"

// message appends a record's RFC 5424 message: the header, structured
// data with its seq, id, kind and user, and the record as JSON.
func (s *syslog) message(b []byte, r *guard.Record) []byte {
	sev := 6 // informational
	switch severity(r) {
	case Notice:
		sev = 5
	case Warning:
		sev = 4
	}
	b = append(b, '<')
	b = strconv.AppendInt(b, facility*8+int64(sev), 10)
	b = append(b, ">1 "...)
	b = r.Time.UTC().AppendFormat(b, timeLayout)
	b = append(b, ' ')
	b = append(b, s.hostname...)
	b = append(b, " guard - "...)
	b = append(b, headerField(r.Kind, 32)...)
	b = append(b, " ["+sdID+` seq="`...)
	b = strconv.AppendInt(b, r.Seq, 10)
	b = append(b, `" id="`...)
	b = appendParam(b, r.ID)
	b = append(b, `" kind="`...)
	b = appendParam(b, r.Kind)
	// The caller the front authenticated, where there is one: a
	// receiver's rules can select on it without reading the message.
	// A parameter may repeat (RFC 5424, 6.3.3): one user_group a group.
	b = param(b, "user", r.User)
	b = param(b, "user_email", r.UserEmail)
	for _, g := range r.UserGroups {
		b = param(b, "user_group", g)
	}
	b = append(b, `"] `...)
	return appendRecord(b, r)
}

// headerField makes s a header field: printable US-ASCII, no spaces, at
// most n characters, "-" when empty.
func headerField(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < 33 || r > 126 {
			return '_'
		}
		return r
	}, s)
	if len(s) > n {
		s = s[:n]
	}
	if s == "" {
		return "-"
	}
	return s
}

// param appends, to structured data whose last value is still open, the
// parameter name with the value v, unless v is empty.
func param(b []byte, name, v string) []byte {
	if v == "" {
		return b
	}
	b = append(b, `" `...)
	b = append(b, name...)
	b = append(b, `="`...)
	return appendParam(b, v)
}

// appendParam appends a structured data parameter's value, escaped.
func appendParam(b []byte, v string) []byte {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c == '"' || c == '\\' || c == ']' {
			b = append(b, '\\')
		}
		b = append(b, v[i])
	}
	return b
}
