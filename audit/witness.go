package audit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	guard "github.com/guard-mcp/guard"
	"golang.org/x/mod/sumdb/note"
)

// Each new checkpoint is also handed to witnesses (NewWitnesses), so
// that someone outside the machine holds it: a file (file:///PATH: one file
// per checkpoint, named by its size, when PATH is a directory; else
// appended to PATH, each note followed by a blank line), the local syslog
// ("syslog": one message per checkpoint, the note's lines joined by the two
// characters \n), or an HTTP endpoint (http:// or https://: a POST of the
// note, text/plain). Witnesses are written by a goroutine of their own:
// the writer never waits for them. A checkpoint a witness did not get is
// logged and counted (NewWitnesses' failures); the next one supersedes it.

// WitnessQueue bounds the checkpoints waiting for the witnesses; past it
// a checkpoint is not sent (and counted as failed).
const WitnessQueue = 64

// witnessTimeout bounds one delivery, and what Close waits for those still
// queued.
const witnessTimeout = 10 * time.Second

// witnessTarget is one witness.
type witnessTarget interface {
	name() string
	write(ctx context.Context, c *Checkpoint) error
	close() error
}

// Witnesses hand each new checkpoint to the witnesses, from a goroutine
// of their own.
type Witnesses struct {
	targets []witnessTarget
	// heldOnce reads, at the first checkpoint this process signs, the
	// latest checkpoint each file witness holds (held): a new checkpoint
	// must extend them. Later ones are the signer's own, or kept in
	// the log.
	heldOnce sync.Once
	held     []*Checkpoint
	ch       chan *Checkpoint
	done     chan struct{}
	ctx      context.Context
	cancel   context.CancelFunc
	logger   *slog.Logger
	failures *atomic.Int64
}

// NewWitnesses parses the witnesses' addresses; syslogSocket is the local
// syslog socket ("": the system's). failures counts the checkpoints a
// witness did not get.
func NewWitnesses(list []string, syslogSocket string, logger *slog.Logger, failures *atomic.Int64) (*Witnesses, error) {
	w := &Witnesses{ch: make(chan *Checkpoint, WitnessQueue), done: make(chan struct{}), logger: logger, failures: failures}
	for _, s := range list {
		switch u, err := url.Parse(s); {
		case s == "syslog":
			w.targets = append(w.targets, &syslogWitness{socket: syslogSocket})
		case err == nil && u.Scheme == "file" && u.Path != "":
			w.targets = append(w.targets, FileWitness(fileURLPath(u)))
		case err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "":
			w.targets = append(w.targets, &httpWitness{url: s, client: &http.Client{Timeout: witnessTimeout}})
		default:
			return nil, fmt.Errorf("checkpoint witness %q: use file:///PATH, syslog, or an http(s) URL", s)
		}
	}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	go w.run()
	return w, nil
}

// Send queues a checkpoint for the witnesses without waiting.
func (w *Witnesses) Send(c *Checkpoint) {
	select {
	case w.ch <- c:
	default:
		w.failures.Add(int64(len(w.targets)))
		w.logger.Error("audit checkpoint witnesses are behind: a checkpoint was not sent", "size", c.Size)
	}
}

func (w *Witnesses) run() {
	defer close(w.done)
	for c := range w.ch {
		for _, t := range w.targets {
			ctx, cancel := context.WithTimeout(w.ctx, witnessTimeout)
			err := t.write(ctx, c)
			cancel()
			if err != nil {
				w.failures.Add(1)
				w.logger.Error("audit checkpoint witness did not get a checkpoint", "witness", t.name(), "size", c.Size, "err", err)
			}
		}
	}
}

// Close delivers what is queued, waiting up to witnessTimeout, and
// closes the targets.
func (w *Witnesses) Close() {
	close(w.ch)
	t := time.NewTimer(witnessTimeout)
	defer t.Stop()
	select {
	case <-w.done:
	case <-t.C:
		w.cancel()
		<-w.done
	}
	w.cancel()
	for _, t := range w.targets {
		if err := t.close(); err != nil {
			w.logger.Warn("audit checkpoint witness", "witness", t.name(), "err", err)
		}
	}
}

// FileWitness writes a file per checkpoint into a directory, or appends
// each to one file.
type FileWitness string

func (f FileWitness) name() string { return "file://" + string(f) }
func (f FileWitness) close() error { return nil }

func (f FileWitness) write(_ context.Context, c *Checkpoint) error {
	path := string(f)
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return WriteFileAtomic(filepath.Join(path, fmt.Sprintf("%020d.checkpoint", c.Size)), c.Note)
	}
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	_, werr := fh.Write(append(append([]byte(nil), c.Note...), '\n'))
	serr := fh.Sync()
	return errors.Join(werr, serr, fh.Close())
}

// syslogWitness sends each checkpoint to the local syslog, dialled again
// after a failure.
type syslogWitness struct {
	socket string
	w      localSyslog
}

// localSyslog is a connection to the local syslog (log/syslog's Writer
// where there is one).
type localSyslog interface {
	Info(msg string) error
	Close() error
}

func (s *syslogWitness) name() string { return "syslog" }

func (s *syslogWitness) write(_ context.Context, c *Checkpoint) error {
	if s.w == nil {
		w, err := dialSyslog(s.socket)
		if err != nil {
			return err
		}
		s.w = w
	}
	msg := "audit checkpoint " + strings.ReplaceAll(strings.TrimSuffix(string(c.Note), "\n"), "\n", `\n`)
	if err := s.w.Info(msg); err != nil {
		_ = s.w.Close()
		s.w = nil
		return err
	}
	return nil
}

func (s *syslogWitness) close() error {
	if s.w == nil {
		return nil
	}
	return s.w.Close()
}

// httpWitness POSTs each checkpoint to a URL.
type httpWitness struct {
	url    string
	client *http.Client
}

// name is the witness's URL without the password and the query string,
// either of which may hold a credential.
func (h *httpWitness) name() string { return guard.DisplayURL(h.url) }
func (h *httpWitness) close() error { h.client.CloseIdleConnections(); return nil }

func (h *httpWitness) write(ctx context.Context, c *Checkpoint) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(c.Note))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	resp, err := h.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			ue.URL = h.name() // the error is logged: without a credential
		}
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s answered %s", h.name(), resp.Status)
	}
	return nil
}

// LatestHeld returns the latest checkpoint of the log (signed by v) that
// each file witness holds, read once per process.
func (w *Witnesses) LatestHeld(v note.Verifier) []*Checkpoint {
	w.heldOnce.Do(func() {
		for _, t := range w.targets {
			f, ok := t.(FileWitness)
			if !ok {
				continue
			}
			c, err := f.Latest(v)
			if err != nil {
				w.logger.Warn("audit checkpoint witness: its latest checkpoint cannot be read", "witness", f.name(), "err", err)
				continue
			}
			if c != nil {
				w.held = append(w.held, c)
			}
		}
	})
	return w.held
}

// Latest is the largest checkpoint signed by v the witness holds, or nil:
// the file of the largest size in a directory that opens, or the last
// note in an appended file that does.
func (f FileWitness) Latest(v note.Verifier) (*Checkpoint, error) {
	path := string(f)
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		notes := SplitWitnessed(b)
		for i := len(notes) - 1; i >= 0; i-- {
			if c, err := OpenCheckpoint(notes[i], v); err == nil {
				return c, nil
			}
		}
		return nil, nil
	}
	names, err := witnessFiles(path)
	if err != nil {
		return nil, err
	}
	for i := len(names) - 1; i >= 0; i-- {
		b, err := os.ReadFile(filepath.Join(path, names[i]))
		if err != nil {
			continue
		}
		if c, err := OpenCheckpoint(b, v); err == nil {
			return c, nil
		}
	}
	return nil, nil
}

// witnessFiles are the checkpoint files of a witness directory, by size.
func witnessFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".checkpoint"); ok {
			if _, err := strconv.ParseUint(n, 10, 64); err == nil && !e.IsDir() {
				names = append(names, e.Name())
			}
		}
	}
	slices.Sort(names) // zero-padded sizes sort as numbers
	return names, nil
}

// SplitWitnessed splits a file witness's appended file into its notes:
// each note is its text (no blank line), a blank line and its signature
// lines, followed by a blank line.
func SplitWitnessed(b []byte) [][]byte {
	parts := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n\n"))
	var out [][]byte
	for i := 0; i+1 < len(parts); i += 2 {
		n := append(append(append([]byte(nil), parts[i]...), "\n\n"...), parts[i+1]...)
		out = append(out, append(n, '\n'))
	}
	if len(parts)%2 == 1 && len(parts[len(parts)-1]) > 0 {
		out = append(out, append(append([]byte(nil), parts[len(parts)-1]...), '\n')) // a partial note: it does not open
	}
	return out
}

// WitnessedCheckpoints returns every checkpoint the file witnesses in
// list hold (file:///PATH: every checkpoint file of a directory, every
// note appended to a file), to check the log against. The others
// (syslog, HTTP) hold nothing guard can read.
func WitnessedCheckpoints(list []string) ([]KeptCheckpoint, error) {
	var out []KeptCheckpoint
	for _, w := range list {
		u, err := url.Parse(w)
		if err != nil || u.Scheme != "file" || u.Path == "" {
			continue
		}
		path := u.Path
		st, err := os.Stat(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return out, fmt.Errorf("witness %s: %w", w, err)
		}
		if st.IsDir() {
			names, err := witnessFiles(path)
			if err != nil {
				return out, fmt.Errorf("witness %s: %w", w, err)
			}
			for _, n := range names {
				p := filepath.Join(path, n)
				b, err := os.ReadFile(p)
				if err != nil {
					return out, fmt.Errorf("witness %s: %w", w, err)
				}
				out = append(out, KeptCheckpoint{Name: "witnessed in " + p, Note: b})
			}
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return out, fmt.Errorf("witness %s: %w", w, err)
		}
		for i, n := range SplitWitnessed(b) {
			out = append(out, KeptCheckpoint{Name: fmt.Sprintf("witnessed in %s (note %d)", path, i+1), Note: n})
		}
	}
	return out, nil
}
