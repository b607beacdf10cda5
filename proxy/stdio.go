package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

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
	// server for RunStdio: signals go to it, and its exit status is the
	// server's. That may be cmd itself, or another command on cmd's
	// standard streams (one that runs Argv in a sandbox). nil: cmd.Start().
	Start func(cmd *exec.Cmd) (*exec.Cmd, error)
	// started, when set, receives whether the server could be started.
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
// RunStdio returned it), until the client's input ends: guard has nothing
// to relay, and a client that saw guard's output end instead would be
// left to guess.
func RefuseStart(client Conn, err error) error {
	text := startRefusal(err)
	ctx := context.Background()
	for {
		m, rerr := client.Read(ctx)
		var bad *BadMessage
		var tl *wire.TooLongError
		switch {
		case errors.As(rerr, &bad), errors.As(rerr, &tl):
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
				answers = append(answers, wire.ErrorResponse(r.ID, wire.CodeInternalError, text, nil))
			}
		}
		if len(answers) == 0 {
			continue
		}
		answer := answers[0]
		if m.Kind == wire.KindBatch {
			answer = joinBatch(answers)
		}
		if err := client.Write(ctx, unparsed(answer)); err != nil {
			return err
		}
		if f, ok := client.(flusher); ok {
			if err := f.Flush(); err != nil {
				return err
			}
		}
	}
}

// RunStdio relays between the client and the server it starts, until the
// server exits. It returns the server's exit status (128+N when signal N
// ended it).
func RunStdio(ctx context.Context, opts Options, sc Stdio, client Conn) (int, error) {
	opts.fill()
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
	server := NewStreamConn(serverOut, serverIn, opts.MaxMessage)
	s := NewSession(ctx, opts)
	p := s.pump(client, server)

	exited := make(chan struct{})
	go func() {
		select {
		case <-p.clientDone:
		case <-exited:
			return
		}
		<-p.serverWritten
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

	readDone := make(chan struct{})
	go func() {
		s.readServer(server)
		close(readDone)
	}()
	werr := cmd.Wait()
	close(exited)
	// The server's output ends when it exits, unless a process it started
	// still holds it open: then guard stops reading after a moment rather
	// than wait for that process.
	select {
	case <-readDone:
	case <-time.After(time.Second):
		opts.Logger.Warn("the server exited but its output is still open (held by a process it started); no longer reading it")
	}
	code, status := exitStatus(cmd, werr)
	s.ServerGone(code, status)
	s.toClient.close()
	<-p.clientWritten
	return code, nil
}

// pumps are the goroutines that move a session's messages.
type pumps struct {
	clientDone    chan struct{} // the client's input ended
	serverWritten chan struct{} // everything for the server is written and its input closed
	clientWritten chan error    // everything for the client is written
}

// pump starts relaying the client's messages to the session and the
// session's outboxes to the client and the server. The caller reads the
// server's messages with readServer. When the server's outbox is done, the
// server's Conn is closed; the client's stays open for its owner.
func (s *Session) pump(client, server Conn) *pumps {
	p := &pumps{clientDone: make(chan struct{}), serverWritten: make(chan struct{}), clientWritten: make(chan error, 1)}
	go func() {
		defer close(p.serverWritten)
		if err := s.toServer.run(server); err != nil {
			s.opts.Logger.Debug("writing to the server", "err", err)
		}
		server.Close()
	}()
	s.toClient.failed = func(error) { s.clientGone(goneWriteFailed) }
	go func() { p.clientWritten <- s.toClient.run(client) }()
	read := make(chan struct{})
	go func() {
		defer close(read)
		s.readClient(client)
	}()
	if d, ok := client.(departures); ok {
		go s.watchDepartures(d)
	}
	// When the client is gone (its input ended, or a write to it failed),
	// its holds are settled at once, and the server's input is closed
	// once the calls it sent before are decided and everything queued
	// for the server is written.
	go func() {
		defer close(p.clientDone)
		select {
		case <-read:
			if why, gone := inputEnded(client); gone {
				s.clientGone(why)
			}
		case <-s.leftCh:
		}
		s.waitDecisions(s.opts.RefreshTimeout + s.opts.ApprovalWait)
		s.toServer.close()
	}()
	return p
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
