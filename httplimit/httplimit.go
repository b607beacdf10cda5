// Package httplimit bounds what an HTTP server of guard's gives a client
// before that client has shown it is welcome: the time to send a
// request's headers and its body, the time a kept-alive connection may
// sit idle, and the number of connections open at once. A client that
// trickles its requests in would otherwise hold a connection, and so a
// file descriptor, for as long as it likes; enough of them leave guard
// without descriptors to start its servers (and their sandboxes) with.
//
// It imports nothing of guard: the approval UI and guard serve's front
// both use it.
package httplimit

import (
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// Limits bound one HTTP server. Zero fields take their defaults.
type Limits struct {
	// Header is how long a client may take to send a request's headers
	// (default 10s).
	Header time.Duration
	// Body is how long, beyond Header, a client may take to send a
	// request's body (default 30s): reading stops there, and the
	// connection is closed once the answer is written. A response stream
	// is not bounded: the server lifts the bound once the body is read.
	Body time.Duration
	// Idle is how long a kept-alive connection may wait for its next
	// request (default 2m).
	Idle time.Duration
	// Conns is how many connections may be open at once (default 64):
	// the others wait to be accepted, in the system's queue, holding no
	// descriptor of guard's. See Conns.
	Conns int
	// MaxHeaderBytes bounds a request's headers (default 64 KiB).
	MaxHeaderBytes int
}

func (l Limits) filled() Limits {
	if l.Header <= 0 {
		l.Header = 10 * time.Second
	}
	if l.Body <= 0 {
		l.Body = 30 * time.Second
	}
	if l.Idle <= 0 {
		l.Idle = 2 * time.Minute
	}
	if l.Conns <= 0 {
		l.Conns = 64
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = 64 << 10
	}
	return l
}

// Server returns a server of h within lim, to serve on Listener's
// listener. Its ReadTimeout (Header and Body) bounds the reading of a
// request whatever its handler does, the rest of a body the handler left
// unread included; net/http lifts it once a request's body is read to
// its end (or at once for a request without one), so that it never cuts
// a response stream.
func Server(h http.Handler, lim Limits) *http.Server {
	lim = lim.filled()
	return &http.Server{Handler: h, ReadHeaderTimeout: lim.Header, ReadTimeout: lim.Header + lim.Body, IdleTimeout: lim.Idle,
		MaxHeaderBytes: lim.MaxHeaderBytes}
}

// Listener returns l accepting at most lim.Conns connections at once.
func Listener(l net.Listener, lim Limits) net.Listener {
	return netutil.LimitListener(l, lim.filled().Conns)
}

// Bound serves next with the reading of a request's body bounded to d
// from when its handling starts, however the server is configured: the
// body, and the rest of it the server reads once the handler returns
// (before the connection can take another request). As with Server's
// bound, net/http lifts it once the body is read to its end; a request
// without a body has nothing to bound, and is left alone (the server
// already reads its connection, to see the client go).
func Bound(d time.Duration, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 {
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(d))
		}
		next.ServeHTTP(w, r)
	})
}

// Conns is how many connections one server may hold open: 1/share of the
// descriptors this process may have open, at least 16, or 1024/share
// where that limit is not known. guard serve gives its front a quarter
// and the UI a sixteenth, so that connections never take more than about
// a third: the rest stays for what a session needs (its server's pipes,
// the sandbox's init), the database and the logs.
func Conns(share int) int {
	n := descriptors()
	if n <= 0 {
		n = 1024
	}
	return max(n/share, 16)
}
