package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The replicas hear of each other's changes to held calls,
// tool reviews and configuration changes as they commit: a trigger
// (migration 0013) notifies NotifyChannel in the transaction of each
// change, with the table and the row's key as the payload. Each of
// store's DBs listens on a connection of its own (Listener). A wait for a
// held call's decision (Await) waits for the notification that names its
// approval, and Subscribe wakes the UI. While that connection is down
// notifications are missed: Await then reads the database every
// PollEvery, as on SQLite, and once more when the listener is back.

// NotifyChannel is the channel migration 0013's triggers notify.
const NotifyChannel = "guard_changes"

const (
	// recheckEvery is how often Await reads the approval while the
	// listener is up, in case a notification was lost on the way.
	recheckEvery = time.Second
	// listenIdle is how long the listener waits for a notification
	// before it checks that its connection still answers: a connection
	// cut without a word (a firewall's idle timeout, a failover) would
	// otherwise look like a quiet one.
	listenIdle = 30 * time.Second
	// listenPingWait bounds that check.
	listenPingWait = 5 * time.Second
	// listenBackoff and listenBackoffMax bound the waits between two
	// attempts to connect again: the first comes at once after a
	// connection that lasted, the next after listenBackoff, doubling.
	listenBackoff    = 100 * time.Millisecond
	listenBackoffMax = 5 * time.Second
)

// Listener keeps one connection that LISTENs on the changes' channel,
// connecting again after a loss, and hands each notification to the
// waits it concerns. Its lock is never held across I/O: sends to waiters
// do not block.
type Listener struct {
	log  *slog.Logger
	stop context.CancelFunc
	done chan struct{} // closed when run has returned

	// PollEvery and RecheckEvery are how often a wait reads its approval
	// while the listener is down and up; Waiting, when set, is called as
	// a wait starts waiting for a notification (tests set these before
	// they wait).
	PollEvery, RecheckEvery time.Duration
	Waiting                 func(id string)
	// loggedPoll is PollEvery as Listen was given it, which the logs name
	// (run reads it while tests change PollEvery).
	loggedPoll time.Duration

	mu      sync.Mutex
	dial    func(ctx context.Context) (*pgx.Conn, error)
	idle    time.Duration                         // listenIdle (tests shorten it)
	up      bool                                  // LISTEN is in force
	pid     uint32                                // the server process that listens, while up
	turned  chan struct{}                         // closed and replaced whenever up changes
	waiters map[string]map[chan struct{}]struct{} // by approval id
	subs    map[chan struct{}]struct{}            // Changes' channels
}

// Listen starts listening with a connection of cfg's, named "guard
// listener" in pg_stat_activity unless the URL names its connections; a
// wait reads its approval every pollEvery while the listener is down.
func Listen(cfg *pgx.ConnConfig, log *slog.Logger, pollEvery time.Duration) *Listener {
	cfg = cfg.Copy()
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = "guard listener"
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &Listener{
		log:          log,
		stop:         cancel,
		done:         make(chan struct{}),
		PollEvery:    pollEvery,
		RecheckEvery: recheckEvery,
		loggedPoll:   pollEvery,
		dial:         func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, cfg) },
		idle:         listenIdle,
		turned:       make(chan struct{}),
		waiters:      map[string]map[chan struct{}]struct{}{},
		subs:         map[chan struct{}]struct{}{},
	}
	go l.run(ctx)
	return l
}

// Close stops listening and closes the connection.
func (l *Listener) Close() {
	l.stop()
	<-l.done
}

// run connects and listens until ctx ends, connecting again after a loss.
func (l *Listener) run(ctx context.Context) {
	defer close(l.done)
	var wait time.Duration // before the next attempt
	lost := false          // since the last connection that listened
	for {
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		conn, err := l.connect(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if !lost {
				l.log.Warn("store: cannot listen for changes from other replicas; held calls wait by reading the database until it can",
					"err", err, "poll", l.loggedPoll)
			} else {
				l.log.Debug("store: listening for changes: connecting again failed", "err", err, "next_in", nextBackoff(wait))
			}
			lost = true
			wait = nextBackoff(wait)
			continue
		}
		if lost {
			l.log.Info("store: listening for changes from other replicas again", "backend_pid", conn.PgConn().PID())
			lost = false
		} else {
			l.log.Debug("store: listening for changes from other replicas", "backend_pid", conn.PgConn().PID())
		}
		began := time.Now()
		err = l.receive(ctx, conn)
		l.turn(false, 0)
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = conn.Close(closeCtx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		l.log.Warn("store: lost the connection that listens for changes from other replicas; held calls wait by reading the database until it is back",
			"err", err, "poll", l.loggedPoll)
		lost = true
		if time.Since(began) >= listenBackoffMax {
			wait = 0
		} else {
			wait = nextBackoff(wait)
		}
	}
}

// nextBackoff is the wait after one of wait.
func nextBackoff(wait time.Duration) time.Duration {
	return min(max(2*wait, listenBackoff), listenBackoffMax)
}

// connect opens the listening connection, LISTENs, and marks the
// listener up.
func (l *Listener) connect(ctx context.Context) (*pgx.Conn, error) {
	l.mu.Lock()
	dial := l.dial
	l.mu.Unlock()
	conn, err := dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
		return nil, fmt.Errorf("listen: %w", err)
	}
	l.turn(true, conn.PgConn().PID())
	return conn, nil
}

// receive hands on notifications until the connection fails or ctx ends.
func (l *Listener) receive(ctx context.Context, conn *pgx.Conn) error {
	for {
		l.mu.Lock()
		idle := l.idle
		l.mu.Unlock()
		wctx, cancel := context.WithTimeout(ctx, idle)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if err == nil {
			l.dispatch(n.Payload)
			continue
		}
		if ctx.Err() != nil || !pgconn.Timeout(err) {
			return fmt.Errorf("wait for notifications: %w", err)
		}
		// Quiet for idle: the connection must still answer. Notifications
		// that come meanwhile are kept by pgx for the next wait.
		pctx, cancel := context.WithTimeout(ctx, listenPingWait)
		err = conn.Ping(pctx)
		cancel()
		if err != nil {
			return fmt.Errorf("ping: %w", err)
		}
	}
}

// dispatch wakes the waits for the approval a notification names, and
// every Changes channel.
func (l *Listener) dispatch(payload string) {
	table, key, _ := strings.Cut(payload, ":")
	l.mu.Lock()
	defer l.mu.Unlock()
	if table == "approvals" {
		for ch := range l.waiters[key] {
			signal(ch)
		}
	}
	for ch := range l.subs {
		signal(ch)
	}
}

// turn records that the listener is up (LISTEN in force on the server
// process pid) or down. Coming up wakes every Changes channel: what
// changed while no one listened is not known.
func (l *Listener) turn(up bool, pid uint32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.up, l.pid = up, pid
	close(l.turned)
	l.turned = make(chan struct{})
	if up {
		for ch := range l.subs {
			signal(ch)
		}
	}
}

// State reports whether the listener is up, and gives a channel closed
// when that changes.
func (l *Listener) State() (up bool, turned <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.up, l.turned
}

// watch registers a wait for approval id: the channel receives after a
// notification about it. stop unregisters it.
func (l *Listener) watch(id string) (woken <-chan struct{}, stop func()) {
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	defer l.mu.Unlock()
	set := l.waiters[id]
	if set == nil {
		set = map[chan struct{}]struct{}{}
		l.waiters[id] = set
	}
	set[ch] = struct{}{}
	return ch, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(set, ch)
		if len(set) == 0 {
			delete(l.waiters, id)
		}
	}
}

// Subscribe returns a channel that receives a value after each
// notification, and when the notifications resume after an interruption
// (what changed meanwhile is not known), until ctx ends. Notifications
// close together may come as one value.
func (l *Listener) Subscribe(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	l.subs[ch] = struct{}{}
	l.mu.Unlock()
	context.AfterFunc(ctx, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.subs, ch)
	})
	return ch
}

// Await waits for a decision on held call id: it reads the approval with
// read, and again after each notification about it, after each turn of
// the listener, every RecheckEvery while it is up and every PollEvery
// while it is down, until it is no longer pending.
func (l *Listener) Await(ctx context.Context, id string, read func(context.Context, string) (*guard.Approval, error)) (*guard.Approval, error) {
	woken, stop := l.watch(id)
	defer stop()
	poll := time.NewTicker(l.PollEvery)
	defer poll.Stop()
	recheck := time.NewTicker(l.RecheckEvery)
	defer recheck.Stop()
	for {
		// The listener's state is taken before the read: a decision
		// committed before LISTEN took effect is seen by the read, one
		// committed after is notified, and should the listener turn
		// meanwhile, turned is closed and the approval read again.
		up, turned := l.State()
		a, err := read(ctx, id)
		if err != nil {
			return nil, err
		}
		if a.State != guard.ApprovalPending {
			return a, nil
		}
		tick := poll.C
		if up {
			tick = recheck.C
			if l.Waiting != nil {
				l.Waiting(id)
			}
		}
		select {
		case <-ctx.Done():
			return a, ctx.Err()
		case <-woken:
		case <-turned:
		case <-tick:
		}
	}
}

// Backend is the server process that listens, 0 while none does.
func (l *Listener) Backend() uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pid
}

// WrapDial replaces the function that opens the listening connection
// with wrap's result, given the one in use (tests hold a connection back
// with it).
func (l *Listener) WrapDial(wrap func(dial func(context.Context) (*pgx.Conn, error)) func(context.Context) (*pgx.Conn, error)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dial = wrap(l.dial)
}

// SetIdle sets how long the listener waits for a notification before it
// checks that its connection still answers (listenIdle unless set).
func (l *Listener) SetIdle(idle time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.idle = idle
}

// signal wakes whoever waits on c, if no wake-up is pending already.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
