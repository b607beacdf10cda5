// Package stream sends guard's audit log, record by record, to the systems
// where security teams already look: syslog receivers (RFC 5424 over TCP,
// optionally TLS) and OpenTelemetry collectors (logs over OTLP/HTTP).
//
// It is a durable outbox: the records are the ones in the database, and
// for each receiver the database keeps a cursor, the last record the
// receiver is known to have. A streamer reads the committed records after
// the cursor in order, in batches, sends them, and moves the cursor only
// once the receiver has them (what that means depends on the transport:
// see syslog and otlp). Delivery is at least once and in order: after a
// restart of guard or a failure of the receiver, what was sent since the
// cursor last moved is sent again (duplicates, never a gap). It reads from
// SQLite beside the calls, never in their way: a receiver that is down
// delays only its own stream.
//
// Of the processes that share a database, one streams at a time: it holds
// the lease "stream" in the database, and another takes over when it
// stops renewing it.
package stream

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/internal/repeated"
)

// Log is what the streamer needs of the database (store.Streams).
type Log interface {
	// RecordsAfter returns up to limit committed records after seq, in order.
	RecordsAfter(ctx context.Context, seq int64, limit int) ([]*guard.Record, error)
	// Committed returns a channel closed when this process next commits
	// records.
	Committed() <-chan struct{}
	StreamCursor(ctx context.Context, receiver string) (int64, error)
	// SetStreamCursor moves the cursor forward, for the lease's holder only.
	SetStreamCursor(ctx context.Context, lease, holder, receiver string, seq int64) error
	StreamLag(ctx context.Context, receiver string) (records int64, oldest time.Time, err error)
	// WithLease runs fn while holder holds the lease.
	WithLease(ctx context.Context, name, holder string, ttl time.Duration, fn func(context.Context))
	// CaughtUp waits until what was appended is committed.
	CaughtUp(ctx context.Context)
}

// LeaseName is the lease the streaming process holds.
const LeaseName = "stream"

// Options configure a Streamer.
type Options struct {
	Log       Log
	Receivers []Config
	Logger    *slog.Logger
	// Holder names this process in the lease (default: host, pid and a
	// random suffix).
	Holder string
	// RootCAs verify TLS receivers (default: the system's).
	RootCAs *x509.CertPool
	// Hostname is the HOSTNAME of syslog messages and the host.name of
	// OTLP's resource (default: os.Hostname).
	Hostname string
	// Poll is how often the streamer looks for records that other
	// processes committed (this process's commits wake it at once).
	// Default 1s.
	Poll time.Duration
	// LeaseTTL is how long the lease lasts unless renewed (renewed every
	// third of it); another process takes over within it when this one
	// stops. Default 15s.
	LeaseTTL time.Duration
	// Behind is the age of the oldest record not yet delivered past which
	// the stream is said to be behind (logged once, until it catches up).
	// Default 1m.
	Behind time.Duration
	// Stopping bounds how long Run goes on, once its context ends,
	// delivering what is committed. Default 2s.
	Stopping time.Duration
	// MaxRate bounds the records sent per second to each receiver, so
	// that catching up with a long backlog (a new receiver, a long
	// outage) takes a share of a processor and not all of it, beside the
	// calls. Default 10000, about three times what guard appended at its
	// busiest in guard-bench on two processors.
	MaxRate int
}

// Streamer streams the audit log to the configured receivers.
type Streamer struct {
	opts Options
}

// New checks the receivers' addresses and returns a streamer.
func New(opts Options) (*Streamer, error) {
	if opts.Log == nil {
		return nil, errors.New("stream: no log")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Hostname == "" {
		opts.Hostname, _ = os.Hostname()
	}
	if opts.Holder == "" {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		opts.Holder = fmt.Sprintf("%s/%d/%s", opts.Hostname, os.Getpid(), hex.EncodeToString(b))
	}
	if opts.Poll <= 0 {
		opts.Poll = time.Second
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = 15 * time.Second
	}
	if opts.Behind <= 0 {
		opts.Behind = time.Minute
	}
	if opts.MaxRate <= 0 {
		opts.MaxRate = 10000
	}
	if opts.Stopping <= 0 {
		opts.Stopping = 2 * time.Second
	}
	for _, r := range opts.Receivers {
		s, err := opts.sender(r)
		if err != nil {
			return nil, fmt.Errorf("stream: %w", err)
		}
		s.close()
	}
	return &Streamer{opts: opts}, nil
}

// Holder is this streamer's name in the lease.
func (s *Streamer) Holder() string { return s.opts.Holder }

// sender sends records to one receiver.
type sender interface {
	// send sends recs, in order, after what was sent since the last
	// confirm.
	send(ctx context.Context, recs []*guard.Record) error
	// confirm returns once the receiver has everything sent; after an
	// error, everything sent since the last confirm is to be sent again.
	confirm(ctx context.Context) error
	// reset drops what was sent since the last confirm (a connection).
	reset()
	close()
}

func (o *Options) sender(r Config) (sender, error) {
	if r.Syslog != "" {
		return newSyslog(r.Syslog, r.TLS, o.RootCAs, o.Hostname)
	}
	return newOTLP(r.OTLP, o.RootCAs, o.Hostname, func(msg string, args ...any) {
		o.Logger.Warn(msg, append([]any{"receiver", r.Label()}, args...)...)
	})
}

// Run streams while this process holds the lease, until ctx ends; then it
// goes on for up to Options.Stopping delivering what is committed,
// records the receivers' cursors and releases the lease.
func (s *Streamer) Run(ctx context.Context) {
	if len(s.opts.Receivers) == 0 {
		return
	}
	s.opts.Log.WithLease(ctx, LeaseName, s.opts.Holder, s.opts.LeaseTTL, func(lctx context.Context) {
		s.opts.Logger.Info("streaming the audit log", "receivers", len(s.opts.Receivers), "holder", s.opts.Holder)
		var wg sync.WaitGroup
		for _, r := range s.opts.Receivers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				log := s.opts.Logger.With("receiver", r.Label())
				f := &follower{s: s, name: r.Name(), log: log, down: &repeated.Condition{Logger: log, Level: slog.LevelWarn,
					Msg: "stream receiver failing; the records wait in the database and are sent once it is back, retrying", What: "stream receiver"}}
				f.run(ctx, lctx, r)
			}()
		}
		wg.Wait()
	})
}

// Lag is how far one receiver's stream is behind the log.
type Lag struct {
	// Receiver names the receiver (Config.Label: without a
	// credential its address may hold).
	Receiver string
	Records  int64
	// Age is the age of the oldest record the receiver is not known to
	// have (0 when none).
	Age time.Duration
}

// Lag says how far each receiver is behind, from the cursors in the
// database (whichever process streams).
func (s *Streamer) Lag(ctx context.Context) ([]Lag, error) {
	var out []Lag
	for _, r := range s.opts.Receivers {
		n, oldest, err := s.opts.Log.StreamLag(ctx, r.Name())
		if err != nil {
			return nil, err
		}
		l := Lag{Receiver: r.Label(), Records: n}
		if n > 0 && !oldest.IsZero() {
			l.Age = max(0, time.Since(oldest))
		}
		out = append(out, l)
	}
	return out, nil
}

// Batch sizes, and when a window of records sent is confirmed.
const (
	// batchRecords is the most records read and sent at once.
	batchRecords = 500
	// confirmIdle is how long a window stays open once the stream has
	// caught up, for records that follow soon to share it.
	confirmIdle = time.Second
	// confirmEvery and confirmRecords bound a window under load.
	confirmEvery   = 2 * time.Second
	confirmRecords = 20000
	// gather is how long the streamer lets commits gather once woken by
	// one, so that a stream under load reads and sends in batches.
	gather = 50 * time.Millisecond
	// cursorEvery is the least time between two writes of a cursor while
	// records keep coming (duplicates after a crash are bounded by it).
	cursorEvery = time.Second
	// Backoff after a failure: doubled each time, up to backoffMax.
	backoffMin = 250 * time.Millisecond
	backoffMax = 30 * time.Second
)

// follower streams to one receiver.
type follower struct {
	s    *Streamer
	name string
	log  *slog.Logger

	cursor  int64     // in the database
	sent    int64     // sent since, not yet confirmed
	acked   int64     // confirmed, maybe not yet written as the cursor
	opened  time.Time // when the window of unconfirmed records opened
	pending int       // records in it
	wrote   time.Time // when the cursor was last written

	down    *repeated.Condition // the receiver failing
	behind  bool                // said to be behind
	checked time.Time           // when the lag was last looked at
}

// run follows the log until lctx ends (the lease lost, or ctx ended);
// when ctx itself ended, it delivers what it can for a short while.
func (f *follower) run(ctx, lctx context.Context, r Config) {
	o := &f.s.opts
	snd, err := o.sender(r)
	if err != nil {
		f.log.Error("stream receiver", "err", err)
		return
	}
	defer snd.close()
	backoff := backoffMin
	reading := &repeated.Condition{Logger: f.log, Level: slog.LevelWarn, Msg: "stream cursor: cannot read it; trying again", What: "stream cursor"}
	for {
		if f.cursor, err = o.Log.StreamCursor(lctx, f.name); err == nil {
			reading.Ok()
			break
		}
		reading.Failed("err", err)
		select {
		case <-lctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, backoffMax)
	}
	f.sent, f.acked = f.cursor, f.cursor
	backoff = backoffMin
	poll := time.NewTicker(o.Poll)
	defer poll.Stop()
	var timer <-chan time.Time
	for lctx.Err() == nil {
		wake := o.Log.Committed()
		began := time.Now()
		n, err := f.step(lctx, snd, false)
		if err != nil {
			if lctx.Err() != nil {
				break
			}
			f.failed(err)
			f.checkLag(lctx)
			select {
			case <-lctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, backoffMax)
			continue
		}
		f.down.Ok()
		backoff = backoffMin
		f.checkLag(lctx)
		if n == batchRecords {
			// More to read, at no more than MaxRate.
			select {
			case <-lctx.Done():
			case <-time.After(time.Duration(n)*time.Second/time.Duration(o.MaxRate) - time.Since(began)):
			}
			continue
		}
		timer = nil
		if f.pending > 0 {
			timer = time.After(max(0, confirmIdle-time.Since(f.opened)))
		}
		select {
		case <-lctx.Done():
		case <-wake:
			// More commits follow under load: one read takes them all.
			select {
			case <-lctx.Done():
			case <-time.After(gather):
			}
		case <-poll.C:
		case <-timer:
		}
	}
	if ctx.Err() != nil {
		f.stop(snd)
	}
}

// step sends the next batch, confirms the window when it is due (or when
// final), and writes the cursor when due; it returns the number of
// records sent.
func (f *follower) step(ctx context.Context, snd sender, final bool) (int, error) {
	o := &f.s.opts
	recs, err := o.Log.RecordsAfter(ctx, f.sent, batchRecords)
	if err != nil {
		return 0, err
	}
	if len(recs) > 0 {
		if err := snd.send(ctx, recs); err != nil {
			f.rewind(snd)
			return 0, err
		}
		if f.pending == 0 {
			f.opened = time.Now()
		}
		f.pending += len(recs)
		f.sent = recs[len(recs)-1].Seq
	}
	caughtUp := len(recs) < batchRecords
	if f.pending > 0 && (final || f.pending >= confirmRecords || time.Since(f.opened) >= confirmEvery ||
		caughtUp && time.Since(f.opened) >= confirmIdle || f.s.confirmsAtOnce(snd)) {
		if err := snd.confirm(ctx); err != nil {
			f.rewind(snd)
			return 0, err
		}
		f.acked, f.pending = f.sent, 0
	}
	if f.acked > f.cursor && (final || caughtUp || time.Since(f.wrote) >= cursorEvery) {
		if err := o.Log.SetStreamCursor(ctx, LeaseName, o.Holder, f.name, f.acked); err != nil {
			return len(recs), err
		}
		f.cursor, f.wrote = f.acked, time.Now()
	}
	return len(recs), nil
}

// confirmsAtOnce reports whether a sender's receiver has the records as
// soon as send returns (OTLP): its window is confirmed with every batch.
func (s *Streamer) confirmsAtOnce(snd sender) bool {
	_, ok := snd.(*otlpSender)
	return ok
}

// rewind drops the window that failed: what was sent since the last
// confirm is sent again.
func (f *follower) rewind(snd sender) {
	snd.reset()
	f.sent, f.pending = f.acked, 0
}

// failed notes a failure: logged as the outage starts, then at most
// every 30 s with how many failed meanwhile.
func (f *follower) failed(err error) { f.down.Failed("err", err) }

// checkLag logs when the stream falls behind, and when it has caught up.
func (f *follower) checkLag(ctx context.Context) {
	if time.Since(f.checked) < time.Second {
		return
	}
	f.checked = time.Now()
	n, oldest, err := f.s.opts.Log.StreamLag(ctx, f.name)
	if err != nil {
		return
	}
	age := time.Duration(0)
	if n > 0 && !oldest.IsZero() {
		age = time.Since(oldest)
	}
	switch {
	case !f.behind && age > f.s.opts.Behind:
		f.behind = true
		f.log.Warn("the audit stream is behind", "records", n, "oldest", age.Round(time.Second))
	case f.behind && n == 0:
		f.behind = false
		f.log.Info("the audit stream has caught up")
	}
}

// stop delivers, for up to Options.Stopping, what is committed, and
// writes the cursor of what the receiver has.
func (f *follower) stop(snd sender) {
	ctx, cancel := context.WithTimeout(context.Background(), f.s.opts.Stopping)
	defer cancel()
	// The last records appended (that guard stopped) go too.
	f.s.opts.Log.CaughtUp(ctx)
	for ctx.Err() == nil {
		n, err := f.step(ctx, snd, true)
		if err != nil {
			if ctx.Err() == nil {
				f.log.Warn("stream: not everything was delivered before stopping; the rest goes at the next start", "err", err)
			}
			return
		}
		if n < batchRecords {
			return
		}
	}
}
