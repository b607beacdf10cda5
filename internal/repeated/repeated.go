// Package repeated logs a condition that repeats while it lasts (a
// database unreachable, a receiver down, a lease that cannot be taken):
// once when it starts, then at most every Every with how often it
// repeated meanwhile, and once when it ends, with how many failures it
// took and for how long. A loop that retries every second logs a few
// lines an outage, not one a second on every replica.
package repeated

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// DefaultEvery is how often a condition that lasts is logged again.
const DefaultEvery = 30 * time.Second

// Condition is one condition of one part (a receiver, a lease). Its
// zero value is not usable: set Logger and Msg. Safe for concurrent use.
type Condition struct {
	Logger *slog.Logger
	// Level is the level of the lines while the condition lasts (the
	// line of its end is at info); the zero value is info.
	Level slog.Level
	// Msg is the message of its start and of its reminders.
	Msg string
	// What names it in the line of its end: "WHAT recovered after N
	// failures in D"; Msg when "".
	What string
	// Every is the least time between two lines while it lasts
	// (DefaultEvery when 0); Now the clock (time.Now when nil).
	Every time.Duration
	Now   func() time.Time

	mu     sync.Mutex
	since  time.Time // when it started; zero while it does not hold
	said   time.Time // when it was last logged
	n      int       // failures since it started
	unsaid int       // failures since it was last logged
}

// Failed notes one more failure; args are this failure's attributes (its
// error, say). It logs the first, and after that at most every Every.
// It reports whether this failure started the condition.
func (c *Condition) Failed(args ...any) bool {
	c.mu.Lock()
	now := c.now()
	first := c.since.IsZero()
	if first {
		c.since = now
	}
	c.n++
	c.unsaid++
	say, repeats, lasted := first || now.Sub(c.said) >= c.every(), c.unsaid-1, now.Sub(c.since)
	if say {
		c.said, c.unsaid = now, 0
	}
	c.mu.Unlock()
	switch {
	case first:
		c.Logger.Log(context.Background(), c.Level, c.Msg, args...)
	case say:
		c.Logger.Log(context.Background(), c.Level, c.Msg, append([]any{"repeats", repeats, "for", lasted.Round(time.Second)}, args...)...)
	}
	return first
}

// Ok notes that it no longer holds: logged when it did. It reports
// whether it ended the condition.
func (c *Condition) Ok(args ...any) bool {
	c.mu.Lock()
	if c.since.IsZero() {
		c.mu.Unlock()
		return false
	}
	n, lasted := c.n, c.now().Sub(c.since)
	c.since, c.n, c.unsaid = time.Time{}, 0, 0
	c.mu.Unlock()
	what := c.What
	if what == "" {
		what = c.Msg
	}
	c.Logger.Info(fmt.Sprintf("%s recovered after %d failures in %s", what, n, lasted.Round(time.Millisecond)),
		append([]any{"failures", n, "down", lasted.Round(time.Millisecond)}, args...)...)
	return true
}

// Holds reports whether the condition holds: a failure since the last Ok.
func (c *Condition) Holds() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.since.IsZero()
}

func (c *Condition) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Condition) every() time.Duration {
	if c.Every > 0 {
		return c.Every
	}
	return DefaultEvery
}
