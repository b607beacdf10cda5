package guardtest

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// Serve is a guard serve process of a test.
type Serve struct {
	// Addr is its --listen address.
	Addr string
	cmd  *exec.Cmd
	// exited receives Wait's error once; done is closed after.
	exited chan error
	done   chan struct{}
	once   sync.Once
	err    error
}

// StartServe runs bin with args (a guard serve command line, without
// --listen) and --listen addr, or a free loopback port when addr is "";
// environ, when not nil, is added to the environment, and the process's
// stderr goes to stderr. It returns once /healthz answers from that
// process (failing the test if the process exits first or does not answer
// within 10s), and stops the process with an interrupt at the test's end.
// A port it picked that another process takes before guard serve binds it
// (tests run in parallel, and so do test binaries) is picked again.
func StartServe(t testing.TB, addr, bin string, environ []string, stderr io.Writer, args ...string) *Serve {
	t.Helper()
	for attempt := 1; ; attempt++ {
		listen := addr
		if listen == "" {
			listen = FreePort(t)
		}
		cmd := exec.Command(bin, append(args, "--listen", listen)...)
		cmd.Stderr = stderr
		if environ != nil {
			cmd.Env = append(os.Environ(), environ...)
		}
		s, err := startServe(t, listen, cmd)
		if err == nil {
			return s
		}
		if addr != "" || attempt == 3 || !errors.Is(err, errExited) {
			t.Fatalf("guard serve at %s: %v", listen, err)
		}
		t.Logf("guard serve at %s: %v; trying another port", listen, err)
	}
}

// StartServeCmd is StartServe for a command made by the caller (one that
// runs guard serve --listen addr under a wrapper, say).
func StartServeCmd(t testing.TB, addr string, cmd *exec.Cmd) *Serve {
	t.Helper()
	s, err := startServe(t, addr, cmd)
	if err != nil {
		t.Fatalf("guard serve at %s: %v", addr, err)
	}
	return s
}

// errExited is a guard serve that exited before it answered: a bad
// configuration, or its port taken meanwhile.
var errExited = errors.New("guard serve exited before it answered")

// startServe starts cmd and waits until its process (or one it started)
// answers /healthz at addr. An answer from another process listening there
// does not count.
func startServe(t testing.TB, addr string, cmd *exec.Cmd) (*Serve, error) {
	s := &Serve{Addr: addr, cmd: cmd, exited: make(chan error, 1), done: make(chan struct{})}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { s.exited <- s.cmd.Wait() }()
	t.Cleanup(func() { s.Stop() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		req, _ := http.NewRequest("GET", "http://"+s.Addr+"/healthz", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if listensAt(s.cmd.Process.Pid, s.Addr) {
				return s, nil
			}
		}
		select {
		case err := <-s.exited:
			s.exited <- err
			return nil, fmt.Errorf("%w: %v", errExited, err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, errors.New("it never answered")
		}
	}
}

// Pid is the process's id.
func (s *Serve) Pid() int { return s.cmd.Process.Pid }

// wait waits for the process to exit and returns how it ended.
func (s *Serve) wait() error {
	s.once.Do(func() { s.err = <-s.exited; close(s.done) })
	<-s.done
	return s.err
}

// Ended reports whether the process was seen to end (by Stop or Kill).
func (s *Serve) Ended() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Stop interrupts the process, as a person would, and waits for it; after
// 15s it is killed.
func (s *Serve) Stop() error {
	_ = s.cmd.Process.Signal(os.Interrupt)
	t := time.AfterFunc(15*time.Second, func() { _ = s.cmd.Process.Kill() })
	defer t.Stop()
	return s.wait()
}

// Kill ends the process with SIGKILL, which it cannot catch, and waits
// for it.
func (s *Serve) Kill() error {
	_ = s.cmd.Process.Kill()
	return s.wait()
}
