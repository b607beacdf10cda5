// Package health answers the probes of a load balancer or an orchestrator:
// /healthz, the process is alive, and /readyz, it can do its work, which
// for guard is to write the audit log: every call needs its records
// written first, and a process that cannot write them refuses every call.
// A balancer that reads /readyz takes such a replica out until it can
// write again. While a process cannot write, it probes the audit log's
// write path itself, so that it turns ready again without traffic, and
// records each recovery once.
package health

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// Log is the audit log as readiness sees it (store.Writing).
type Log interface {
	// WriteFailure says why the audit log cannot be written and since
	// when, from the first write that failed until one succeeds again;
	// a nil error while it can be written.
	WriteFailure() (since time.Time, err error)
	// WritesChanged returns a channel closed when writes next fail, or
	// succeed again after failing.
	WritesChanged() <-chan struct{}
	// ProbeWrite tries the write path without writing a record; a
	// failure counts as a failed write, a success makes nothing
	// writable by itself.
	ProbeWrite(ctx context.Context) error
	// Writes is a count that moves whenever writes succeed.
	Writes() int64
}

// Alerts lists the integrity alerts no one has acknowledged yet. They are
// shown, never a reason to be unready: one forged row must not take every
// replica out of the balancer.
type Alerts interface {
	Alerts(ctx context.Context) ([]string, error)
}

// Options configure a Checker.
type Options struct {
	Log Log
	// Alerts, when set, are counted in /readyz's body.
	Alerts Alerts
	// Recovered writes the record that the audit log can be written again,
	// after it could not since since, because of cause (Cause's text).
	// It is called once for each recovery, after a probe succeeds or an
	// append of someone else's did; an error (the record could not be
	// written) has it called again after the next probe. Nil records
	// nothing.
	Recovered func(ctx context.Context, since time.Time, cause string) error
	// ProbeEvery is how often the write path is probed while it fails
	// (default 1s); IdleEvery how often while it works and nothing was
	// written since the last look (default 5s), so that a process with
	// no traffic finds out as well.
	ProbeEvery, IdleEvery time.Duration
	Logger                *slog.Logger
}

// Checker serves /healthz and /readyz, and probes the audit log (Run).
type Checker struct {
	o Options
}

// New returns a Checker; it probes once Run runs.
func New(o Options) *Checker {
	if o.ProbeEvery <= 0 {
		o.ProbeEvery = time.Second
	}
	if o.IdleEvery <= 0 {
		o.IdleEvery = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Checker{o: o}
}

// Routes adds GET /healthz and GET /readyz to mux. They answer whatever
// the Host (a balancer sends its own, or an address), since they tell
// nothing a page could use: no URL, no secret, no record.
func (c *Checker) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		answer(w, http.StatusOK, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		status, body := c.Readiness(r.Context())
		answer(w, status, body)
	})
}

func answer(w http.ResponseWriter, status int, body string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

// Ready reports whether the audit log can be written: /readyz's 200.
func (c *Checker) Ready() bool {
	_, err := c.o.Log.WriteFailure()
	return err == nil
}

// Readiness is /readyz's answer: 200 while the audit log can be written,
// 503 while it cannot, the body saying why, and how many integrity alerts
// wait.
func (c *Checker) Readiness(ctx context.Context) (status int, body string) {
	var b strings.Builder
	status = http.StatusOK
	if since, err := c.o.Log.WriteFailure(); err != nil {
		status = http.StatusServiceUnavailable
		fmt.Fprintf(&b, "not ready: the audit log could not be written: %s (since %s)\n", Cause(err), since.UTC().Format(time.RFC3339))
	} else {
		b.WriteString("ready: the audit log can be written\n")
	}
	if c.o.Alerts != nil {
		// Counted, not listed: the body is for anyone who can reach the
		// port; the alerts themselves are for guard audit verify's and
		// the log's readers.
		switch alerts, err := c.o.Alerts.Alerts(ctx); {
		case err != nil:
			b.WriteString("integrity alerts: could not be read\n")
		case len(alerts) > 0:
			fmt.Fprintf(&b, "integrity alerts: %d not acknowledged (guard audit verify names them)\n", len(alerts))
		}
	}
	return status, b.String()
}

// Run probes the audit log until ctx ends: every ProbeEvery while it
// cannot be written, until it can and its recovery is recorded, and every
// IdleEvery while it can and nothing else wrote meanwhile.
func (c *Checker) Run(ctx context.Context) {
	log := c.o.Log
	var (
		down  bool // a failure was seen and its recovery is not recorded yet
		since time.Time
		cause string
	)
	t := time.NewTimer(c.o.IdleEvery)
	defer t.Stop()
	last := log.Writes()
	for {
		changed := log.WritesChanged()
		if s, err := log.WriteFailure(); err != nil {
			if !down {
				c.o.Logger.Warn("not ready: the audit log cannot be written; probing it until it can", "err", err)
			}
			down, since, cause = true, s, Cause(err)
		} else if down && c.recovered(ctx, since, cause) {
			down = false
		}
		wait := c.o.IdleEvery
		if down {
			wait = c.o.ProbeEvery
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-changed:
			t.Stop()
			continue
		case <-t.C:
		}
		switch {
		case down:
			// A probe that passes makes nothing writable by itself: the
			// record of the recovery does, or someone's append.
			if log.ProbeWrite(ctx) == nil && c.o.Recovered != nil && c.recovered(ctx, since, cause) {
				down = false
			}
		case log.Writes() == last:
			_ = log.ProbeWrite(ctx) // a failure shows in WriteFailure
		}
		last = log.Writes()
	}
}

// recovered records a recovery; it reports whether the record was
// written, which also shows the log writable again.
func (c *Checker) recovered(ctx context.Context, since time.Time, cause string) bool {
	if c.o.Recovered != nil {
		if err := c.o.Recovered(ctx, since, cause); err != nil {
			return false
		}
	}
	c.o.Logger.Info("ready: the audit log can be written again", "unwritable since", since, "cause", cause)
	return true
}
