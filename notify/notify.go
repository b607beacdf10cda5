// Package notify announces new holds to the people who decide them: when
// policy holds a call for a person's approval, a webhook is posted to each
// configured receiver (notify:), in Slack's incoming-webhook format or as
// guard's own JSON signed with HMAC-SHA256, with a link to the approval
// page of the UI.
//
// It follows the audit log as package stream does: a held call's request
// record (committed before the call waits) is what announces it, and for
// each receiver the database keeps a cursor past the records dealt with.
// Of the processes sharing a database, the one holding the lease "notify"
// announces, so that a hold is announced once however many replicas run,
// and a restart resumes where the cursor stands: delivery survives one,
// at least once (a receiver tells a repeated announcement by its approval
// id). Each announcement is delivered on its own, beside the calls and
// never in their way: retried with exponential backoff and jitter while
// the hold is still pending, for a bounded time, each attempt with a
// timeout, so that a slow or dead receiver delays only its own messages.
// A receiver that starts failing, one that recovers, and an announcement
// given up are recorded in the audit log (events "guard/notify"), where
// every process's UI reads them.
package notify

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/internal/repeated"
	"github.com/guard-mcp/guard/store"
)

// Store is what the notifier needs of the database (store.DB).
type Store interface {
	// Streams returns the leases, the receivers' cursors and the log as
	// one that follows it reads it.
	Streams() store.Streams
	// Holds returns the held calls as they stand.
	Holds() store.Holds
	// AppendAsync appends records to the audit log.
	AppendAsync(recs ...*guard.Record) <-chan error
	// Reader reads the audit log back: the delivery events (History).
	Reader() store.Reader
}

// LeaseName is the lease the announcing process holds.
const LeaseName = "notify"

// Options configure a Notifier.
type Options struct {
	Store     Store
	Receivers []Config
	// BaseURL is the UI's address that announcements link to: public_url
	// when configured, else the address the UI listens on.
	BaseURL string
	Logger  *slog.Logger
	// Holder names this process in the lease (default: host, pid and a
	// random suffix).
	Holder string
	// Client posts the webhooks (default: one that follows no redirect).
	Client *http.Client
	// Timeout bounds one attempt to deliver (default 10s).
	Timeout time.Duration
	// RetryFor bounds how long one announcement is retried (default
	// 15m); never past the hold's expiry, nor once someone decided it.
	RetryFor time.Duration
	// BackoffMin and BackoffMax bound the wait between two attempts,
	// doubled after each failure, with jitter (defaults 1s and 1m).
	BackoffMin, BackoffMax time.Duration
	// Poll is how often the log is read for holds other processes
	// recorded (this process's commits wake it at once). Default 1s.
	Poll time.Duration
	// LeaseTTL is how long the lease lasts unless renewed (default 15s).
	LeaseTTL time.Duration
	Now      func() time.Time
}

// Notifier announces new holds to the configured receivers.
type Notifier struct {
	opts      Options
	receivers []*receiver
	// start is the last record when the notifier was made: a receiver
	// new to the database announces the holds that follow it, not the
	// whole log's.
	start int64
}

// Event records' method and the states of their delivery.
const (
	// Method is the method of the event records the notifier appends.
	Method = "guard/notify"
	// Failing: an attempt failed while the receiver was thought fine.
	Failing = "failing"
	// Recovered: an attempt succeeded after the receiver was failing.
	Recovered = "recovered"
	// GivenUp: an announcement was not delivered and will not be.
	GivenUp = "given_up"
)

// New checks the receivers and returns a notifier; it reads where the log
// ends now, which a receiver new to the database starts after.
func New(ctx context.Context, opts Options) (*Notifier, error) {
	if opts.Store == nil {
		return nil, errors.New("notify: no store")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Holder == "" {
		host, _ := os.Hostname()
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		opts.Holder = fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b))
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.Client == nil {
		opts.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if opts.RetryFor <= 0 {
		opts.RetryFor = 15 * time.Minute
	}
	if opts.BackoffMin <= 0 {
		opts.BackoffMin = time.Second
	}
	if opts.BackoffMax < opts.BackoffMin {
		opts.BackoffMax = max(time.Minute, opts.BackoffMin)
	}
	if opts.Poll <= 0 {
		opts.Poll = time.Second
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = 15 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	n := &Notifier{opts: opts}
	for _, r := range opts.Receivers {
		switch {
		case r.Format != FormatSlack && r.Format != FormatJSON:
			return nil, fmt.Errorf("notify: %s: unknown format %q", r.Label(), r.Format)
		case r.Format == FormatJSON && r.Secret == "":
			// Its variable is not set here: nothing unsigned is sent.
			return nil, fmt.Errorf("notify: %s: the secret is empty (is its variable set in guard's environment?)", r.Label())
		}
		log := opts.Logger.With("receiver", r.Label())
		n.receivers = append(n.receivers, &receiver{n: n, cfg: r, log: log,
			failing: &repeated.Condition{Logger: log, Level: slog.LevelWarn, Msg: "notify: receiver failing; retrying with backoff", What: "notify: receiver"},
			reading: &repeated.Condition{Logger: log, Level: slog.LevelWarn, Msg: "notify: cannot read the log; trying again", What: "notify: reading the log"}})
	}
	if len(n.receivers) > 0 {
		opts.Store.Streams().CaughtUp(ctx)
		seq, err := opts.Store.Streams().LastSeq(ctx)
		if err != nil {
			return nil, fmt.Errorf("notify: %w", err)
		}
		n.start = seq
	}
	return n, nil
}

// Holder is this notifier's name in the lease.
func (n *Notifier) Holder() string { return n.opts.Holder }

// Run announces while this process holds the lease, until ctx ends.
// Announcements in flight then stop; the next holder sends them again.
func (n *Notifier) Run(ctx context.Context) {
	if len(n.receivers) == 0 {
		return
	}
	n.opts.Store.Streams().WithLease(ctx, LeaseName, n.opts.Holder, n.opts.LeaseTTL, func(lctx context.Context) {
		n.opts.Logger.Info("announcing new holds", "receivers", len(n.receivers), "holder", n.opts.Holder)
		var wg sync.WaitGroup
		for _, r := range n.receivers {
			wg.Go(func() { r.follow(lctx) })
		}
		wg.Wait()
	})
}

// Stat is what this process delivered to one receiver.
type Stat struct {
	// Receiver is Config.Label: no credential.
	Receiver string
	// Sent counts announcements delivered; Failures, attempts that
	// failed; GivenUp, announcements not delivered.
	Sent, Failures, GivenUp uint64
}

// Stats returns what this process delivered, by receiver, in the
// configuration's order.
func (n *Notifier) Stats() []Stat {
	out := make([]Stat, len(n.receivers))
	for i, r := range n.receivers {
		out[i] = Stat{Receiver: r.cfg.Label(), Sent: r.sent.Load(), Failures: r.failures.Load(), GivenUp: r.givenUp.Load()}
	}
	return out
}

// How the log is followed.
const (
	// batchRecords is the most records read at once.
	batchRecords = 500
	// maxInFlight bounds the announcements of one receiver being
	// delivered at once; the log is read on once one ends.
	maxInFlight = 64
	// cursorEvery is the least time between two writes of a cursor.
	cursorEvery = time.Second
	// gather lets commits gather once woken by one.
	gather = 20 * time.Millisecond
	// recentApprovals is how many approvals a receiver's follower
	// remembers having announced, so that another round of a held call
	// naming the same approval is not announced twice.
	recentApprovals = 4096
)

// recent is a set of the last ids added, up to a bound.
type recent struct {
	ids  map[string]bool
	ring []string
	next int
}

func newRecent(n int) *recent { return &recent{ids: map[string]bool{}, ring: make([]string, n)} }

// add adds id and reports whether it was not in the set.
func (r *recent) add(id string) bool {
	if r.ids[id] {
		return false
	}
	delete(r.ids, r.ring[r.next])
	r.ring[r.next] = id
	r.next = (r.next + 1) % len(r.ring)
	r.ids[id] = true
	return true
}

// receiver delivers to one webhook.
type receiver struct {
	n   *Notifier
	cfg Config
	log *slog.Logger

	sent, failures, givenUp atomic.Uint64

	mu   sync.Mutex
	down bool // the last attempt failed
	// failing is the receiver failing, reading the log failing: each
	// logged as it starts, lasts and ends.
	failing, reading *repeated.Condition
}

// follow reads the log after the receiver's cursor and delivers each hold
// in it, until ctx ends. The cursor stays before the oldest announcement
// still in flight, so that a restart sends it again rather than lose it.
func (r *receiver) follow(ctx context.Context) {
	o := &r.n.opts
	cursor, err := r.cursor(ctx)
	if err != nil {
		return
	}
	r.resume(ctx)
	read, wrote := cursor, time.Time{}
	// inFlight holds the announcements being delivered, by seq; one
	// leaves it once dealt with (delivered, given up, no longer
	// pending), not when interrupted.
	var mu sync.Mutex
	inFlight := map[int64]bool{}
	ended := make(chan struct{}, 1)
	seen := newRecent(recentApprovals)
	var wg sync.WaitGroup
	// low is how far the receiver is done with: before the oldest
	// announcement in flight, else what was read.
	low := func() int64 {
		mu.Lock()
		defer mu.Unlock()
		l := read
		for seq := range inFlight {
			l = min(l, seq-1)
		}
		return l
	}
	move := func(ctx context.Context, to int64) {
		if err := o.Store.Streams().SetStreamCursor(ctx, LeaseName, o.Holder, r.cfg.Name(), to); err == nil {
			cursor, wrote = to, time.Now()
		} else if ctx.Err() == nil {
			r.log.Warn("notify: cannot move the cursor", "err", err)
		}
	}
	defer func() {
		// Stopping: once the deliveries in flight end, what was dealt
		// with is not sent again by the next holder (the lease is still
		// this process's until follow returns).
		wg.Wait()
		if l := low(); l > cursor {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			move(sctx, l)
			cancel()
		}
	}()
	poll := time.NewTicker(o.Poll)
	defer poll.Stop()
	for ctx.Err() == nil {
		wake := o.Store.Streams().Committed()
		mu.Lock()
		room := maxInFlight - len(inFlight)
		mu.Unlock()
		full := false
		if room > 0 {
			recs, err := o.Store.Streams().RecordsAfter(ctx, read, batchRecords)
			switch {
			case err == nil:
				r.reading.Ok()
			case ctx.Err() == nil:
				r.reading.Failed("err", err)
			}
			for _, rec := range recs {
				if room == 0 {
					break
				}
				if IsHold(rec) && seen.add(rec.Approval) {
					room--
					mu.Lock()
					inFlight[rec.Seq] = true
					mu.Unlock()
					wg.Go(func() {
						if !r.deliver(ctx, rec) {
							return
						}
						mu.Lock()
						delete(inFlight, rec.Seq)
						mu.Unlock()
						select {
						case ended <- struct{}{}:
						default:
						}
					})
				}
				read = rec.Seq
			}
			full = len(recs) == batchRecords
		}
		if l := low(); l > cursor && time.Since(wrote) >= cursorEvery {
			move(ctx, l)
		}
		if full && room > 0 {
			continue
		}
		select {
		case <-ctx.Done():
		case <-ended:
		case <-wake:
			select {
			case <-ctx.Done():
			case <-time.After(gather):
			}
		case <-poll.C:
		}
	}
}

// resume takes up the receiver's state as the log last recorded it: a
// receiver another process (or this one before a restart) recorded as
// failing is said to have recovered at its next delivery.
func (r *receiver) resume(ctx context.Context) {
	ps, err := Undelivered(ctx, r.n.opts.Store.Reader(), r.n.opts.Now().Add(-ProblemsFor), []Config{r.cfg})
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("notify: cannot read the receiver's last deliveries", "err", err)
		}
		return
	}
	r.mu.Lock()
	r.down = len(ps) > 0
	r.mu.Unlock()
}

// ProblemsFor is how far back the delivery events are read: a failure
// older than that is no longer shown.
const ProblemsFor = 24 * time.Hour

// cursor reads the receiver's cursor, trying again until ctx ends; a
// receiver new to the database starts where the log ended when the
// notifier was made.
func (r *receiver) cursor(ctx context.Context) (int64, error) {
	o := &r.n.opts
	backoff := o.BackoffMin
	for {
		c, err := o.Store.Streams().StreamCursor(ctx, r.cfg.Name())
		if err == nil && c == 0 && r.n.start > 0 {
			// Kept at once: the next holder starts there too.
			c = r.n.start
			err = o.Store.Streams().SetStreamCursor(ctx, LeaseName, o.Holder, r.cfg.Name(), c)
		}
		if err == nil {
			return c, nil
		}
		r.log.Warn("notify: cannot read the cursor; trying again", "err", err)
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, o.BackoffMax)
	}
}

// IsHold reports whether a record announces a new hold: the request of a
// tool call that policy held, naming its approval.
func IsHold(rec *guard.Record) bool {
	return rec.Kind == guard.KindRequest && rec.Decision == guard.DecisionHeld && rec.Approval != "" && !rec.Pruned
}

// deliver delivers the announcement of one hold: while it is still
// pending, for up to RetryFor, with backoff between the attempts. It
// reports whether it dealt with it (false: ctx ended first).
func (r *receiver) deliver(ctx context.Context, rec *guard.Record) bool {
	o := &r.n.opts
	giveUp := o.Now().Add(o.RetryFor)
	backoff := o.BackoffMin
	for attempt := 1; ; attempt++ {
		a, err := o.Store.Holds().Approval(ctx, rec.Approval)
		switch {
		case errors.Is(err, guard.ErrNotFound):
			return true
		case err != nil:
			// The database's trouble, not the receiver's.
			if ctx.Err() == nil {
				r.log.Warn("notify: cannot read the held call; trying again", "approval", rec.Approval, "err", err)
			}
		case a.State != guard.ApprovalPending || !o.Now().Before(a.ExpiresAt):
			return true // decided, withdrawn or expired: nothing to ask for
		case a.CallID != "" && a.CallID != rec.CallID:
			// A retry of the held call, told that it waits on the
			// approval the first call made: announced with that one.
			return true
		default:
			giveUp = minTime(giveUp, a.ExpiresAt)
			err = r.post(ctx, announcement(rec, a, o.BaseURL))
			if ctx.Err() != nil {
				return false
			}
			if err == nil {
				r.sent.Add(1)
				r.delivered(rec)
				return true
			}
			r.failures.Add(1)
			r.failed(rec, err, attempt)
		}
		wait := jitter(backoff)
		backoff = min(2*backoff, o.BackoffMax)
		if !o.Now().Add(wait).Before(giveUp) {
			r.givenUp.Add(1)
			r.gaveUp(rec, err, attempt)
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
	}
}

// jitter returns a wait between half of d and d ("equal jitter"), so
// that receivers failing together are not retried in step.
func jitter(d time.Duration) time.Duration {
	return d/2 + mrand.N(d/2+1)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// failed notes a failed attempt: logged, and recorded when the receiver
// was thought fine until then.
func (r *receiver) failed(rec *guard.Record, err error, attempt int) {
	r.mu.Lock()
	was := r.down
	r.down = true
	r.mu.Unlock()
	r.failing.Failed("approval", rec.Approval, "attempt", attempt, "err", err)
	if !was {
		r.record(rec, Failing, err, attempt)
	}
}

// delivered notes a delivery, recorded when the receiver was failing.
func (r *receiver) delivered(rec *guard.Record) {
	r.mu.Lock()
	was := r.down
	r.down = false
	r.mu.Unlock()
	r.failing.Ok("approval", rec.Approval)
	if was {
		r.record(rec, Recovered, nil, 0)
	}
}

// gaveUp notes an announcement that will not be delivered.
func (r *receiver) gaveUp(rec *guard.Record, err error, attempts int) {
	r.log.Error("notify: announcement not delivered; giving up", "approval", rec.Approval, "attempts", attempts, "err", err)
	r.record(rec, GivenUp, err, attempts)
}
