// Package stdio runs an MCP server as a child process of guard and relays
// between it and a client through proxy.Run: the child's pipes, the
// processes it starts (a process group on Unix, a job object on Windows),
// the signals forwarded to them, the grace before they are ended, and the
// server's exit status, which is guard run's. It also reads and writes
// guard's own standard streams with blocking system calls (Blocking).
package stdio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/guard-mcp/guard/proxy"
	"github.com/guard-mcp/guard/wire"
)

// Stdio describes a server that guard runs as a child process and the
// client's side of the session, on guard's own stdin and stdout.
type Stdio struct {
	// Argv is the server's command line. The child inherits guard's
	// working directory.
	Argv []string
	// Env is the child's environment (KEY=VALUE); nil inherits guard's.
	Env []string
	// Stderr receives the server's stderr unchanged (guard's stderr).
	Stderr io.Writer
	// Signals are forwarded to the server and the processes it started
	// (SIGINT, SIGTERM; on Windows, which has no signals, SIGTERM ends
	// them and SIGINT is left to the console).
	Signals <-chan os.Signal
	// Grace is how long shutdown waits after closing the server's stdin
	// before SIGTERM, and again before SIGKILL (default 5s). On Windows
	// the server and the processes it started end at the first (their job
	// object is terminated).
	Grace time.Duration
	// Start, when set, starts the server's process in place of
	// cmd.Start: it is given the command made of Argv (Stdin, Stdout and
	// Stderr set) and returns the started command whose process is the
	// server for Run: signals go to it, and its exit status is the
	// server's. That may be cmd itself, or another command on cmd's
	// standard streams (one that runs Argv in a sandbox). nil: cmd.Start().
	Start func(cmd *exec.Cmd) (*exec.Cmd, error)
	// started, when set, receives whether the server could be started
	// (Serve's).
	started chan<- error
}

// ErrStart wraps a failure to start the server: nothing has run yet.
var ErrStart = errors.New("the server could not be started")

// startRefusal is what a client reads of err, a failure to start its
// server (ErrStart): "The server could not be started: " and the cause.
func startRefusal(err error) string {
	return "The server could not be started: " + strings.TrimPrefix(err.Error(), ErrStart.Error()+": ")
}

// RefuseStart answers each request the client sends with a JSON-RPC error
// (-32603) saying that its server could not be started, and why (err, as
// Run returned it), until the client's input ends: guard has nothing
// to relay, and a client that saw guard's output end instead would be
// left to guess.
func RefuseStart(client proxy.Conn, err error) error {
	text := startRefusal(err)
	ctx := context.Background()
	for {
		m, rerr := client.Read(ctx)
		switch {
		case aboutOne(rerr):
			continue // not a request guard can answer by its id
		case rerr != nil:
			return nil
		}
		var answers [][]byte
		parts := [][]byte{m.Raw}
		if m.Kind == wire.KindBatch {
			parts, _ = wire.SplitBatch(m.Raw)
		}
		for _, p := range parts {
			if r, err := wire.Parse(p); err == nil && r.Kind == wire.KindRequest {
				answers = append(answers, wire.Internal(text).Answer(r.ID))
			}
		}
		if len(answers) == 0 {
			continue
		}
		answer := answers[0]
		if m.Kind == wire.KindBatch {
			answer = joinBatch(answers)
		}
		if err := client.Write(ctx, wire.Message{Raw: answer}); err != nil {
			return err
		}
		if f, ok := client.(Flusher); ok {
			if err := f.Flush(); err != nil {
				return err
			}
		}
	}
}

// Run relays between the client and the server it starts, through a relay
// session (proxy.NewSession) with options opts, until the server exits.
// It returns the server's exit status (128+N when signal N ended it), or
// an error that wraps ErrStart when the server could not be started.
func Run(ctx context.Context, opts proxy.Options, sc Stdio, client proxy.Conn) (int, error) {
	opts = opts.WithDefaults()
	if len(sc.Argv) == 0 {
		return 0, fmt.Errorf("%w: no command", ErrStart)
	}
	if sc.Grace <= 0 {
		sc.Grace = 5 * time.Second
	}
	cmd := exec.Command(sc.Argv[0], sc.Argv[1:]...)
	cmd.Stderr = sc.Stderr
	cmd.Env = sc.Env
	childIn, serverIn, err := blockingPipe()
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrStart, err)
	}
	serverOut, childOut, err := blockingPipe()
	if err != nil {
		childIn.Close()
		serverIn.Close()
		return 0, fmt.Errorf("%w: %w", ErrStart, err)
	}
	cmd.Stdin, cmd.Stdout = childIn, childOut
	ownGroup(cmd)
	if sc.Start != nil {
		var started *exec.Cmd
		if started, err = sc.Start(cmd); err == nil {
			cmd = started
		}
	} else {
		err = cmd.Start()
	}
	childIn.Close()
	childOut.Close()
	if sc.started != nil {
		sc.started <- err
	}
	if err != nil {
		serverIn.Close()
		serverOut.Close()
		return 0, fmt.Errorf("%w: %s: %w", ErrStart, sc.Argv[0], err)
	}
	defer serverOut.Close()
	procs, err := newTree(cmd)
	if err != nil {
		opts.Logger.Warn("the processes the server starts may outlive it", "err", err)
	}
	defer procs.close()
	server := &childConn{Conn: proxy.NewStreamConn(serverOut, serverIn, opts.MaxMessage),
		eof: make(chan struct{}), written: make(chan struct{}), ended: make(chan struct{})}
	ic := &stdioInterceptor{Interceptor: proxy.NewSession(ctx, opts), clientDone: make(chan struct{})}

	exited := make(chan struct{})
	go func() {
		select {
		case <-ic.clientDone:
		case <-exited:
			return
		}
		<-server.written
		t := time.NewTimer(sc.Grace)
		defer t.Stop()
		select {
		case <-exited:
			return
		case <-t.C:
			_ = procs.terminate()
		}
		t.Reset(sc.Grace)
		select {
		case <-exited:
		case <-t.C:
			_ = procs.kill()
		}
	}()
	go func() {
		for {
			select {
			case sig := <-sc.Signals:
				_ = procs.signal(sig)
			case <-exited:
				return
			}
		}
	}()
	go func() {
		werr := cmd.Wait()
		close(exited)
		// The server's output ends when it exits, unless a process it
		// started still holds it open: then guard stops reading after a
		// moment rather than wait for that process.
		select {
		case <-server.eof:
		case <-time.After(time.Second):
			opts.Logger.Warn("the server exited but its output is still open (held by a process it started); no longer reading it")
		}
		server.code, server.status = exitStatus(cmd, werr)
		close(server.ended)
	}()
	_ = proxy.Run(ctx, client, server, ic)
	return server.code, nil
}

// Serve runs sc's server for one session of the HTTP front
// (streamable.Options.Child), as Run does, and sends on started, once,
// nil when the server runs or the error that kept it from starting.
func (sc Stdio) Serve(ctx context.Context, opts proxy.Options, client proxy.Conn, started chan<- error) (int, error) {
	sc.started = started
	return Run(ctx, opts, sc, client)
}

// flusher is a Conn that buffers what is written to it until flushed.
type Flusher interface {
	Flush() error
}

// aboutOne says whether a Conn's read error is about one message alone
// (one that did not parse, or was too long): the Conn reads on.
func aboutOne(err error) bool {
	var bad *proxy.BadMessage
	var tl *wire.TooLongError
	return errors.As(err, &bad) || errors.As(err, &tl)
}

// joinBatch makes one batch of the answers to a batch's requests.
func joinBatch(parts [][]byte) []byte {
	out := []byte{'['}
	for i, p := range parts {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, p...)
	}
	return append(out, ']')
}

// childConn is the Conn of a server run as a child process: it ends when
// the process does (Run waits for that, not for its output, which a
// process it started may hold open).
type childConn struct {
	proxy.Conn
	eofOnce sync.Once
	eof     chan struct{} // its output ended
	written chan struct{} // everything for it is written and its input closed
	ended   chan struct{} // it exited, and its output ended or was given up on
	code    int           // set before ended is closed
	status  string
}

func (c *childConn) Read(ctx context.Context) (wire.Message, error) {
	m, err := c.Conn.Read(ctx)
	if err != nil && !aboutOne(err) {
		c.eofOnce.Do(func() { close(c.eof) })
	}
	return m, err
}

// Flush flushes what is buffered for the server (the relay writes a run of
// messages, then flushes).
func (c *childConn) Flush() error {
	if f, ok := c.Conn.(Flusher); ok {
		return f.Flush()
	}
	return nil
}

func (c *childConn) Close() error {
	err := c.Conn.Close()
	close(c.written)
	return err
}

func (c *childConn) Ended() <-chan struct{} { return c.ended }
func (c *childConn) Status() (int, string)  { return c.code, c.status }

// stdioInterceptor tells Run when the client is done, which starts
// the grace the server has to exit once its input is closed.
type stdioInterceptor struct {
	proxy.Interceptor
	clientDone chan struct{}
}

func (i *stdioInterceptor) ClientEnded(client proxy.Conn) {
	i.Interceptor.ClientEnded(client)
	close(i.clientDone)
}

// exitStatus turns how a process ended into guard's exit status and words
// for people.
func exitStatus(cmd *exec.Cmd, err error) (int, string) {
	ps := cmd.ProcessState
	if ps == nil {
		return 1, fmt.Sprintf("unknown: %v", err)
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		sig := ws.Signal()
		return 128 + int(sig), fmt.Sprintf("signal %d, %s", int(sig), sig)
	}
	return ps.ExitCode(), fmt.Sprintf("status %d", ps.ExitCode())
}
