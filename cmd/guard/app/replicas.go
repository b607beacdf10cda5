package app

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/approvals"
	"github.com/guard-mcp/guard/internal/repeated"
	"github.com/guard-mcp/guard/metrics"
	"github.com/guard-mcp/guard/policy"
	"github.com/guard-mcp/guard/store"
)

// In PostgreSQL mode several guard processes (replicas, usually on several
// machines) share one database. What they must agree on lives there: the
// rules learned from approvals (learnedRules), so that every replica has
// the same policy version. What stays a file on each machine, the
// configuration, each says it runs (replicaWatch), so that one whose
// configuration differs from the others' is seen in its log and metrics.
//
// On both engines every relaying process beats in the database
// (replicaWatch too), so that the holds of one that is killed are known
// to be of no use: each beat, a process withdraws those of processes that
// are gone (approvals.Manager.SettleGone; store.GoneProcesses says how a
// process is judged gone, and why never by one that has just woken).

// learnedRules are the rules learned from approvals that the database
// keeps, as the policy engine reads them: through the parser of rules
// files, so that they are checked as a file's would be.
type learnedRules struct {
	db     *store.DB
	getenv func(string) string
}

var _ policy.Learned = learnedRules{}

// learnedSource names the database's learned rules in errors and records.
const learnedSource = "the database's learned rules"

func (l learnedRules) LearnedRules(ctx context.Context) ([]policy.Rule, int64, error) {
	rows, v, err := l.db.Learned().LearnedRules(ctx)
	if err != nil || len(rows) == 0 {
		return nil, v, err
	}
	rules := make([]policy.Rule, len(rows))
	for i, r := range rows {
		rules[i] = policy.Rule{Name: r.Name, Server: r.Server, Tool: r.Tool, Method: r.Method, URI: r.URI, When: r.When,
			Action: r.Action, Reason: r.Reason}
	}
	b, err := policy.MarshalRules(rules)
	if err != nil {
		return nil, 0, err
	}
	parsed, err := policy.ParseRules(learnedSource, b, l.getenv)
	return parsed, v, err
}

func (l learnedRules) LearnedRulesVersion(ctx context.Context) (int64, error) {
	return l.db.Learned().LearnedRulesVersion(ctx)
}

// add adds a rule learned from approval a, recorded first in the audit
// log (a rule whose record cannot be written is not added). It runs under
// the decisions lock, with the approval's decision.
func (l learnedRules) add(ctx context.Context, a *guard.Approval, by string, r policy.Rule) error {
	existing, _, err := l.LearnedRules(ctx)
	if err != nil {
		return err
	}
	r, add := policy.PlanLearnedRule(existing, r)
	if !add {
		return nil // the same rule is there already
	}
	if err := l.db.Operations().RecordRuleAdded(store.RuleAdded{Approval: a, By: by, Rule: r.Name, Server: r.Server, Tool: r.Tool,
		Method: r.Method, Action: r.Action, File: learnedSource}); err != nil {
		return err
	}
	return l.db.Learned().AddLearnedRule(ctx, store.LearnedRule{Name: r.Name, Server: r.Server, Tool: r.Tool, Method: r.Method,
		URI: r.URI, When: r.When, Action: r.Action, Reason: r.Reason})
}

// Every replicaEvery a process says in the database that it runs, and
// what; one not heard of for lapsesAfter beats is taken to have stopped.
const (
	replicaEvery = 2 * time.Second
	lapsesAfter  = 5
)

// heartbeatEnv names the time between two beats (a Go duration), for
// tests only: they set it small (100ms), so that a killed process is
// found gone within a second rather than store.DefaultLapse. Nothing else
// should: a beat costs a write to the database.
const heartbeatEnv = "GUARD_TEST_HEARTBEAT"

// beatEvery is the time between two beats: replicaEvery, unless tests
// set heartbeatEnv.
func beatEvery(getenv func(string) string, logger *slog.Logger) time.Duration {
	v := getenv(heartbeatEnv)
	if v == "" {
		return replicaEvery
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		logger.Warn("ignored: want a positive duration", "variable", heartbeatEnv, "value", v)
		return replicaEvery
	}
	return d
}

// replicaWatch keeps this process's row among the replicas, withdraws
// the holds of processes that are gone, and, in PostgreSQL mode, compares
// its configuration with the other replicas'.
type replicaWatch struct {
	db      *store.DB
	me      store.Replica
	every   time.Duration
	compare bool // PostgreSQL: replicas should all run the same files
	digest  func() (config, policy string)
	// holds settles the holds of processes that are gone after each
	// beat; nil until the process holds calls.
	holds   *approvals.Manager
	logger  *slog.Logger
	live    atomic.Int64 // replicas heard of, this one included
	differ  atomic.Int64 // of them, those whose configuration differs
	said    string       // the differing replicas last logged
	healthy bool
	// beating is the heartbeat failing, logged as it starts, lasts and
	// ends.
	beating *repeated.Condition
	// settling is the settling of gone processes' holds failing.
	settling *repeated.Condition
}

func newReplicaWatch(db *store.DB, process, version string, every time.Duration, compare bool, digest func() (string, string), logger *slog.Logger) *replicaWatch {
	host, _ := os.Hostname()
	now := time.Now().UTC()
	return &replicaWatch{db: db, every: every, compare: compare, digest: digest, logger: logger, healthy: true,
		beating: &repeated.Condition{Logger: logger, Level: slog.LevelWarn, Msg: "replicas: cannot say in the database that this process runs",
			What: "replicas: the heartbeat"},
		settling: &repeated.Condition{Logger: logger, Level: slog.LevelWarn, Msg: "the holds of guard processes that are gone were not all settled",
			What: "settling the holds of guard processes that are gone"},
		me: store.Replica{ID: guard.NewID(), Host: host, PID: os.Getpid(), Process: process, Version: version, Started: now,
			Lapse: lapsesAfter * every}}
}

// run beats (the first beat is the caller's, before the process holds a
// call: a hold names a process whose row is there) and settles the holds
// of processes that are gone, at once and after each beat, until ctx
// ends; then it takes this process's row out.
func (w *replicaWatch) run(ctx context.Context) {
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		w.settleGone(ctx)
		select {
		case <-ctx.Done():
			if err := w.db.Replicas().LeaveReplicas(context.WithoutCancel(ctx), w.me.ID); err != nil {
				w.logger.Warn("replicas: cannot take this one out", "err", err)
			}
			return
		case <-t.C:
		}
		w.beat(ctx)
	}
}

// settleGone withdraws the holds of processes that are gone.
func (w *replicaWatch) settleGone(ctx context.Context) {
	if w.holds == nil {
		return
	}
	n, err := w.holds.SettleGone(ctx)
	switch {
	case err == nil:
		w.settling.Ok()
	case ctx.Err() == nil:
		w.settling.Failed("err", err)
	}
	if n > 0 {
		w.logger.Info("withdrew the holds of guard processes that are gone", "withdrawn", n)
	}
}

func (w *replicaWatch) beat(ctx context.Context) {
	w.me.ConfigDigest, w.me.PolicyVersion = w.digest()
	w.me.Seen = time.Now().UTC()
	err := w.db.Replicas().Heartbeat(ctx, w.me)
	var all []store.Replica
	if err == nil {
		all, err = w.db.Replicas().Replicas(ctx, w.me.Seen.Add(-w.me.Lapse))
	}
	if err != nil {
		if ctx.Err() == nil {
			w.beating.Failed("err", err)
		}
		w.healthy = false
		return
	}
	w.beating.Ok()
	w.healthy = true
	w.live.Store(int64(len(all)))
	if w.compare {
		w.compareConfigs(all)
	}
}

// compareConfigs says in the log when this replica's configuration
// differs from the others', and when it no longer does.
func (w *replicaWatch) compareConfigs(all []store.Replica) {
	var differ []string
	for _, r := range all {
		if r.ID != w.me.ID && r.ConfigDigest != w.me.ConfigDigest {
			differ = append(differ, r.Host+" (pid "+strconv.Itoa(r.PID)+", "+r.Process+", configuration "+short(r.ConfigDigest)+")")
		}
	}
	slices.Sort(differ)
	w.differ.Store(int64(len(differ)))
	said := strings.Join(differ, "; ")
	if said == w.said {
		return
	}
	w.said = said
	if said == "" {
		w.logger.Info("replicas: this replica's configuration is the same as every other's", "replicas", len(all), "configuration", short(w.me.ConfigDigest))
		return
	}
	w.logger.Warn("replicas: this replica's configuration differs from other replicas' (every replica should run the same files)",
		"configuration", short(w.me.ConfigDigest), "differing", said)
}

// metrics adds the replicas' gauges, in PostgreSQL mode.
func (w *replicaWatch) metrics(reg *metrics.Registry) {
	if !w.compare {
		return
	}
	reg.Gauge("guard_replicas", "guard processes on this database heard of lately, this one included.", func() (float64, error) {
		return float64(w.live.Load()), nil
	})
	reg.Gauge("guard_replicas_config_differs", "Replicas on this database whose configuration differs from this one's (0 when every replica runs the same files).", func() (float64, error) {
		return float64(w.differ.Load()), nil
	})
}

// short is a digest's first characters, enough to tell two apart in a log.
func short(digest string) string {
	d := strings.TrimPrefix(digest, "sha256:")
	return d[:min(12, len(d))]
}
