package httplimit

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// serve serves h within lim on a loopback port.
func serve(t *testing.T, h http.Handler, lim Limits) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := Server(h, lim)
	go srv.Serve(Listener(l, lim))
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

// untilClosed reads conn until the server closes it, and fails the test
// if it has not after a long while (a failure's bound, not a clock the
// test waits on).
func untilClosed(t *testing.T, conn net.Conn) string {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	got, err := io.ReadAll(conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection stayed open (the server answered %q)", got)
	}
	return string(got)
}

// A body that trickles in is cut: the connection is closed, whether the
// handler reads the body (a form) or answers without it (a login page
// for a client without a session), in which case the server reads the
// rest itself. The UI used to bound only the headers.
func TestASlowBodyIsCut(t *testing.T) {
	for _, reads := range []bool{true, false} {
		addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if reads {
				if _, err := io.ReadAll(r.Body); err != nil {
					http.Error(w, "too slow", http.StatusRequestTimeout)
					return
				}
			}
			http.Error(w, "log in first", http.StatusUnauthorized)
		}), Limits{Header: 100 * time.Millisecond, Body: 100 * time.Millisecond})
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.Write([]byte("POST /approvals/x/approve HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\ncsrf=")); err != nil {
			t.Fatal(err)
		}
		got := untilClosed(t, conn)
		want := "HTTP/1.1 401"
		if reads {
			want = "HTTP/1.1 408"
		}
		if !strings.HasPrefix(got, want) {
			t.Fatalf("reads %v: the server answered %q, want %s", reads, got, want)
		}
	}
}

// Headers that trickle in, and a kept-alive connection with no next
// request, are cut too.
func TestSlowHeadersAndIdleConnectionsAreCut(t *testing.T) {
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}),
		Limits{Header: 100 * time.Millisecond, Idle: 100 * time.Millisecond})
	for _, sent := range []string{"GET / HTTP/1.1\r\nHost: x\r\n", "GET / HTTP/1.1\r\nHost: x\r\n\r\n"} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.Write([]byte(sent)); err != nil {
			t.Fatal(err)
		}
		untilClosed(t, conn)
	}
}

// A response stream that follows its request's body is not bounded:
// it goes on past the bound, while a body trickling in after it is cut
// (a bound that cut streams would have cut this one first). So with the
// server's bound alone, and with Bound too.
func TestAStreamIsNotBounded(t *testing.T) {
	for _, bound := range []bool{false, true} {
		release, slowCut := make(chan struct{}), make(chan struct{})
		var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, err := io.ReadAll(r.Body); err != nil {
				close(slowCut)
				return
			}
			w.Write([]byte("first\n"))
			w.(http.Flusher).Flush()
			select {
			case <-release:
				w.Write([]byte("second\n"))
			case <-r.Context().Done():
			}
		})
		if bound {
			h = Bound(50*time.Millisecond, h)
		}
		addr := serve(t, h, Limits{Header: 50 * time.Millisecond, Body: 50 * time.Millisecond})
		resp, err := http.Post("http://"+addr+"/", "text/plain", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		buf := make([]byte, len("first\n"))
		if _, err := io.ReadFull(resp.Body, buf); err != nil {
			t.Fatal(err)
		}
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.Write([]byte("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nx")); err != nil {
			t.Fatal(err)
		}
		<-slowCut
		close(release)
		if rest, _ := io.ReadAll(resp.Body); string(rest) != "second\n" {
			t.Fatalf("bound %v: the stream was cut: %q", bound, rest)
		}
	}
}

// countingListener counts the connections its listener has accepted and
// not yet closed. It sits under Listener's bound: the bound takes its
// slot before Accept and gives it back after Close, so the count is what
// the bound holds, exactly. (The server's ConnState hook would not do:
// net/http closes a connection, freeing its slot, before it reports it
// closed, so another may be reported new in between.)
type countingListener struct {
	net.Listener
	mu                 sync.Mutex
	open, most, closed int
	closedAll          chan struct{}
	clients            int
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.open++
	l.most = max(l.most, l.open)
	l.mu.Unlock()
	return &countedConn{Conn: c, l: l}, nil
}

type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.open--
		if c.l.closed++; c.l.closed == c.l.clients {
			close(c.l.closedAll)
		}
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// No more than Conns connections are open at once: the others wait to be
// accepted, holding no descriptor of the server's, and are served once
// earlier ones close.
func TestConnectionsAreBounded(t *testing.T) {
	const limit, clients = 3, 9
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	counted := &countingListener{Listener: inner, closedAll: make(chan struct{}), clients: clients}
	lim := Limits{Header: 50 * time.Millisecond, Conns: limit}
	srv := Server(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), lim)
	go srv.Serve(Listener(counted, lim))
	t.Cleanup(func() { srv.Close() })
	for range clients {
		conn, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// Headers that never end: each connection is held until the
		// header bound cuts it.
		if _, err := conn.Write([]byte("GET / HTTP/1.1\r\n")); err != nil {
			t.Fatal(err)
		}
	}
	<-counted.closedAll
	counted.mu.Lock()
	most := counted.most
	counted.mu.Unlock()
	if most != limit {
		t.Fatalf("%d connections open at once, want at most (and here exactly) %d", most, limit)
	}
}

// Conns gives a server its share of the process's descriptors, never
// fewer than 16.
func TestConns(t *testing.T) {
	n := descriptors()
	if n == 0 {
		t.Skip("the descriptor limit is not known here")
	}
	if got := Conns(4); got != max(n/4, 16) {
		t.Fatalf("Conns(4) = %d with %d descriptors", got, n)
	}
	if got := Conns(1 << 30); got != 16 {
		t.Fatalf("Conns of a tiny share = %d, want 16", got)
	}
}
