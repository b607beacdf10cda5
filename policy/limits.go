package policy

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	guard "github.com/guard-mcp/guard"
	"go.yaml.in/yaml/v3"
)

// Limit caps the rate of calls to a server's tools: per tool when Tool is
// set (each matching tool has its own bucket), else for the server as a
// whole. Burst calls may come at once; then Count per Per.
type Limit struct {
	Server string
	Tool   string
	Count  int
	Per    time.Duration
	Burst  int
	File   string
	Line   int
}

// Limiter keeps token buckets shared by the processes on one database.
type Limiter interface {
	TakeToken(ctx context.Context, key string, rate float64, burst int, now time.Time) (bool, time.Duration, error)
}

// Applies reports whether the limit counts the call: a tool call of a
// matching server (and tool, when the limit names one).
func (l Limit) Applies(call *guard.Call) bool {
	return call.Method == "tools/call" && glob(l.Server, call.Server) && (l.Tool == "" || glob(l.Tool, call.ToolName))
}

// limitTimeout bounds one check against the shared buckets.
const limitTimeout = 5 * time.Second

// checkLimits takes a token from every limit the call matches. The first
// that has none refuses the call; an error refuses it too (fail closed).
func checkLimits(lim Limiter, limits []Limit, call *guard.Call) (guard.Verdict, bool) {
	now := call.Time
	if now.IsZero() {
		now = time.Now()
	}
	for _, l := range limits {
		if !l.Applies(call) {
			continue
		}
		key, subject := "server\x00"+call.Server, "server "+call.Server
		if l.Tool != "" {
			key, subject = "tool\x00"+call.Server+"\x00"+call.ToolName, call.ToolName
		}
		key += fmt.Sprintf("\x00%d/%s/%d", l.Count, l.Per, l.Burst)
		ctx, cancel := context.WithTimeout(context.Background(), limitTimeout)
		ok, wait, err := lim.TakeToken(ctx, key, float64(l.Count)/l.Per.Seconds(), l.Burst, now)
		cancel()
		if err != nil {
			return guard.Verdict{Action: guard.ActionDeny, Rule: guard.RateLimitRule,
				Reason: "the rate limit could not be checked: " + err.Error()}, false
		}
		if !ok {
			return guard.Verdict{Action: guard.ActionDeny, Rule: guard.RateLimitRule,
				Reason: fmt.Sprintf("Rate limit: %s allows %d calls per %s; retry in %s", subject, l.Count, perWord(l.Per), retryIn(wait))}, false
		}
	}
	return guard.Verdict{}, true
}

func perWord(d time.Duration) string {
	switch d {
	case time.Second:
		return "second"
	case time.Minute:
		return "minute"
	case time.Hour:
		return "hour"
	case 24 * time.Hour:
		return "day"
	}
	return d.String()
}

func retryIn(d time.Duration) string {
	if d < time.Second {
		return "1s"
	}
	return (d + time.Second - 1).Truncate(time.Second).String()
}

// parseRate reads "30/min", "5/s", "1000/hour", "100/day".
func parseRate(s string) (int, time.Duration, error) {
	n, unit, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, 0, fmt.Errorf("want COUNT/UNIT, like 30/min")
	}
	count, err := strconv.Atoi(strings.TrimSpace(n))
	if err != nil || count <= 0 {
		return 0, 0, fmt.Errorf("%q is not a positive count", n)
	}
	per, ok := map[string]time.Duration{
		"s": time.Second, "sec": time.Second, "second": time.Second,
		"m": time.Minute, "min": time.Minute, "minute": time.Minute,
		"h": time.Hour, "hour": time.Hour, "d": 24 * time.Hour, "day": 24 * time.Hour,
	}[strings.TrimSpace(unit)]
	if !ok {
		return 0, 0, fmt.Errorf("unit %q is not one of s, min, hour, day", unit)
	}
	return count, per, nil
}

func (p *parser) limits(n *yaml.Node, dst *[]Limit) error {
	if n.Kind != yaml.SequenceNode {
		return p.Errf(n, "expected a list of limits")
	}
	for _, e := range n.Content {
		l := Limit{Server: "*", File: p.File, Line: e.Line}
		var rate string
		err := p.Mapping(e, map[string]func(*yaml.Node) error{
			"server": p.glob(&l.Server),
			"tool":   p.glob(&l.Tool),
			"rate":   p.Str(&rate),
			"burst":  p.Count(&l.Burst),
		})
		if err != nil {
			return err
		}
		if rate == "" {
			return p.Errf(e, "a limit needs a rate, like rate: 30/min")
		}
		if l.Count, l.Per, err = parseRate(rate); err != nil {
			return p.Errf(e, "rate %q: %v", rate, err)
		}
		if l.Burst == 0 {
			l.Burst = l.Count
		}
		*dst = append(*dst, l)
	}
	return nil
}
