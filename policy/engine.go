package policy

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/internal/repeated"
	"go.yaml.in/yaml/v3"
)

// ApprovedRulesFile is where rules learned from approvals are kept, in the
// rules directory.
const ApprovedRulesFile = "approved.yaml"

// Engine holds the policy in force and replaces it when the configuration
// changes on disk. Every process sharing a database watches on its own.
//
// S is the configuration as its file is read (Source): the engine keeps it
// in force beside the policy compiled from it, so that what else the file
// holds is reloaded with the policy.
type Engine[S Source] struct {
	file     string // the configuration file; "" for built-in defaults
	load     func(file string, getenv func(string) string) (S, error)
	rulesDir string
	prot     *Protected
	limiter  Limiter
	getenv   func(string) string
	logger   *slog.Logger
	cur      atomic.Pointer[Policy]
	cfg      atomic.Pointer[S]
	isolated func() bool
	gate     Gate
	record   func(ConfigLoad) error
	learned  Learned
	// Watch's own: the files' digest last looked at, the approved rules
	// in force, the digest of a change waiting for a person ("": none).
	seen     string
	approved []Rule
	pending  string
	// The version of the learned rules in force (Learned).
	learnedVersion int64
	// unread is the learned rules' version failing to be read (the
	// database unreachable): logged as it starts, lasts and ends.
	unread *repeated.Condition
}

// Learned is where rules learned from approvals are kept when they are
// not rules.d/approved.yaml: in the database, on PostgreSQL, so that
// every replica has the same rules and the same policy version. Only
// guard writes them, after a person's approval and its record: a change
// is applied without waiting for a person.
type Learned interface {
	// LearnedRules returns the rules, oldest first, and their version.
	LearnedRules(ctx context.Context) ([]Rule, int64, error)
	// LearnedRulesVersion returns the version alone, cheaply.
	LearnedRulesVersion(ctx context.Context) (int64, error)
}

// Gate is where the processes sharing a database learn which
// configuration changes a person applied, note the ones that wait, and
// which approved-rules files guard itself wrote. store.DB implements it.
type Gate interface {
	ConfigApplied(ctx context.Context, digest string) (bool, error)
	NoteConfigChange(ctx context.Context, digest, summary string) error
	RulesWritten(ctx context.Context, digest string) (bool, error)
}

// EngineOptions configure NewEngine.
type EngineOptions struct {
	// RulesDir holds approved.yaml: the config's rules.d, or the data
	// directory when there is no config file.
	RulesDir  string
	Protected *Protected
	Getenv    func(string) string
	Logger    *slog.Logger
	// Limiter keeps the buckets of the configured rate limits; nil
	// checks none.
	Limiter Limiter
	// Isolated reports whether isolation is in force for every server
	// that could write guard's files: none of them can, so Watch applies
	// every valid change by itself. When it is nil or says false, a
	// change that alters decisions waits for a person (Gate). It is asked
	// at each change, since a server may lose its isolation meanwhile.
	Isolated func() bool
	// Gate records changes that wait and the decisions on them; nil
	// applies none of them.
	Gate Gate
	// Record, when set, records each configuration the engine puts in
	// force (as it starts, and each change it applies) and each change it
	// leaves to a person, in the audit log, before it takes effect. When
	// it fails the policy in force stays: NewEngine fails, and Watch tries
	// the change again at its next look.
	Record func(ConfigLoad) error
	// Learned, when set, holds the learned rules instead of RulesDir's
	// approved.yaml, and Watch applies each change of theirs.
	Learned Learned
}

// What a ConfigLoad says happened.
const (
	Loaded   = "loaded"   // put in force as the engine started
	Reloaded = "reloaded" // a change put in force
	Held     = "held"     // a change left to a person; the policy in force stays
)

// ConfigLoad is one configuration the engine put in force, or left to a person.
type ConfigLoad struct {
	How     string // Loaded, Reloaded or Held
	Digest  string // FilesDigest of the files
	Policy  string // the version of the policy compiled from them
	Reason  string // why, for people
	Changes string // what changed, one line each (a change)
}

// NewEngine compiles cfg (read from file) with the approved rules. load
// reads the file again when it changes (file "": the built-in defaults).
func NewEngine[S Source](file string, cfg S, load func(file string, getenv func(string) string) (S, error), o EngineOptions) (*Engine[S], error) {
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	e := &Engine[S]{file: file, load: load, rulesDir: o.RulesDir, prot: o.Protected, limiter: o.Limiter, getenv: o.Getenv, logger: o.Logger,
		isolated: o.Isolated, gate: o.Gate, record: o.Record, learned: o.Learned}
	e.unread = &repeated.Condition{Logger: o.Logger, Level: slog.LevelError,
		Msg: "rules learned from approvals: cannot read whether they changed", What: "rules learned from approvals: reading their version"}
	if e.learned != nil {
		e.rulesDir = "" // the rules are not a file
	}
	approved, version, err := e.loadApproved(context.Background())
	if err != nil {
		return nil, err
	}
	e.learnedVersion = version
	if err := checkRules(append(append([]Rule(nil), cfg.PolicyConfig().Policy.Rules...), approved...)); err != nil {
		return nil, err
	}
	p := Compile(cfg, approved, e.prot)
	d := FilesDigest(file, o.RulesDir, cfg)
	if err := e.recordLoad(ConfigLoad{How: Loaded, Digest: d, Policy: p.Version(), Reason: "configuration loaded"}); err != nil {
		return nil, err
	}
	e.cfg.Store(&cfg)
	e.cur.Store(p)
	e.seen, e.approved = d, approved
	return e, nil
}

// recordLoad records a load, when the engine records them.
func (e *Engine[S]) recordLoad(l ConfigLoad) error {
	if e.record == nil {
		return nil
	}
	if err := e.record(l); err != nil {
		return fmt.Errorf("the configuration's record could not be written, so it is not put in force: %w", err)
	}
	return nil
}

// loadApproved reads the learned rules and, from Learned, their version.
func (e *Engine[S]) loadApproved(ctx context.Context) ([]Rule, int64, error) {
	if e.learned == nil {
		r, err := LoadRules(e.approvedPath(), e.getenv)
		return r, 0, err
	}
	r, v, err := e.learned.LearnedRules(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("rules learned from approvals: %w", err)
	}
	return r, v, nil
}

func (e *Engine[S]) approvedPath() string {
	if e.rulesDir == "" {
		return ""
	}
	return filepath.Join(e.rulesDir, ApprovedRulesFile)
}

// Policy is the policy in force.
func (e *Engine[S]) Policy() *Policy { return e.cur.Load() }

// Learned is where the engine reads the learned rules from, when they are
// not a file (EngineOptions.Learned); else nil.
func (e *Engine[S]) Learned() Learned { return e.learned }

// Config is the configuration in force.
func (e *Engine[S]) Config() S { return *e.cfg.Load() }

// Decide decides a call with the policy in force, then, unless it is
// denied, checks the rate limits (before any approval, so that a flood of
// calls cannot fill the approval queue).
//
// Deciding is a function of the call, its tool's definition and the
// policy, with one effect: a call that a rate limit counts takes a token
// from that limit's bucket, which processes on one database share, so
// Decide writes to the store then (and waits for it, at most 5s; an error
// denies). Policy.Decide is the pure part; a call no limit counts writes
// nothing.
func (e *Engine[S]) Decide(call *guard.Call) guard.Verdict {
	p := e.cur.Load()
	v := p.Decide(call)
	// A call enforcement denies takes no token, in monitor mode too
	// (where its verdict allows and says it would deny).
	if e.limiter == nil || v.Action == guard.ActionDeny || v.Would == guard.ActionDeny || len(p.limits) == 0 {
		return v
	}
	if lv, ok := checkLimits(e.limiter, p.limits, call); !ok {
		lv.PolicyVersion = v.PolicyVersion
		if p.monitor {
			lv.Would, lv.Action = lv.Action, guard.ActionAllow
		}
		return lv
	}
	return v
}

// digest covers the configuration, its includes and the approved rules.
func (e *Engine[S]) digest() string { return FilesDigest(e.file, e.rulesDir, e.Config()) }

// Reload reads the files again and applies them; an invalid change leaves
// the policy in force and is returned.
func (e *Engine[S]) Reload() error {
	cfg, approved, version, err := e.read()
	if err != nil {
		return err
	}
	p := Compile(cfg, approved, e.prot)
	if err := e.recordLoad(ConfigLoad{How: Reloaded, Digest: FilesDigest(e.file, e.rulesDir, cfg), Policy: p.Version(),
		Reason: "configuration reloaded"}); err != nil {
		return err
	}
	e.apply(cfg, p, approved, version)
	return nil
}

// load reads and checks the files.
func (e *Engine[S]) read() (cfg S, _ []Rule, _ int64, _ error) {
	cfg, err := e.load(e.file, e.getenv)
	if err != nil {
		return cfg, nil, 0, err
	}
	approved, version, err := e.loadApproved(context.Background())
	if err != nil {
		return cfg, nil, 0, err
	}
	if err := checkRules(append(append([]Rule(nil), cfg.PolicyConfig().Policy.Rules...), approved...)); err != nil {
		return cfg, nil, 0, err
	}
	return cfg, approved, version, nil
}

func (e *Engine[S]) apply(cfg S, p *Policy, approved []Rule, learnedVersion int64) {
	e.cfg.Store(&cfg)
	e.cur.Store(p)
	e.approved = approved
	e.learnedVersion = learnedVersion
}

// learnedChanged applies the learned rules (Learned) when they changed
// since the policy in force was compiled: with the configuration in
// force, recorded like a reload.
func (e *Engine[S]) learnedChanged(ctx context.Context) {
	if e.learned == nil {
		return
	}
	v, err := e.learned.LearnedRulesVersion(ctx)
	if err != nil {
		if ctx.Err() == nil {
			e.unread.Failed("err", err)
		}
		return
	}
	e.unread.Ok()
	if v == e.learnedVersion {
		return
	}
	approved, v, err := e.learned.LearnedRules(ctx)
	if err == nil {
		err = checkRules(append(append([]Rule(nil), e.Config().PolicyConfig().Policy.Rules...), approved...))
	}
	if err != nil {
		e.logger.Error("rules learned from approvals not applied; the policy in force stays", "err", err)
		return
	}
	cfg := e.Config()
	p := Compile(cfg, approved, e.prot)
	changes := strings.Join(ruleChanges("learned rule", e.approved, approved), "\n")
	if err := e.recordLoad(ConfigLoad{How: Reloaded, Digest: e.seen, Policy: p.Version(),
		Reason: "rules learned from approvals changed (in the database)", Changes: changes}); err != nil {
		e.logger.Error("rules learned from approvals not applied; the policy in force stays", "err", err)
		return
	}
	e.apply(cfg, p, approved, v)
	e.logger.Info("rules learned from approvals applied", "policy", p.Version(), "changes", changes)
}

// settle is how long a changed configuration must stay unchanged before
// it is loaded.
const settle = 50 * time.Millisecond

// Watch looks at the policy's files every so often, until ctx ends. A
// valid change is applied at once when it cannot alter a decision (see
// Changes), when it only adds rules guard itself learned, or when
// isolation is in force (EngineOptions.Isolated). Otherwise a wrapped
// server could have written it: guard logs what changed, keeps the policy
// in force, and notes the change for a person (the UI, or guard policy
// reload), applying it once a person has, in any process on the database.
func (e *Engine[S]) Watch(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		e.look(ctx)
	}
}

// look is one of Watch's looks at the files: it applies what changed, or
// leaves it to a person, before it returns.
func (e *Engine[S]) look(ctx context.Context) {
	e.learnedChanged(ctx)
	d := e.digest()
	if d == e.seen {
		if e.pending != "" && e.applied(ctx, e.pending) {
			e.consider(ctx)
		}
		return
	}
	// A file being written (truncated, then filled) is read again once it
	// has stopped changing.
	time.Sleep(settle)
	if d2 := e.digest(); d != d2 {
		return
	}
	e.seen = d
	e.consider(ctx)
}

// applied reports whether a person applied the files with digest d.
func (e *Engine[S]) applied(ctx context.Context, d string) bool {
	if e.gate == nil {
		return false
	}
	ok, err := e.gate.ConfigApplied(ctx, d)
	if err != nil {
		e.logger.Error("config change: cannot read whether it was applied", "err", err)
	}
	return ok
}

// consider loads the files and applies them, or leaves them to a person.
func (e *Engine[S]) consider(ctx context.Context) {
	e.pending = ""
	cfg, approved, version, err := e.read()
	if err != nil {
		e.logger.Error("config change not applied; the previous policy stays in force", "err", err)
		return
	}
	// By the includes of the files read, as guard policy reload does; a
	// file that changed while it was read is read again at the next look.
	d := FilesDigest(e.file, e.rulesDir, cfg)
	if e.digest() != e.seen {
		return
	}
	learned := e.learned == nil // a learned-rules file guard did not write counts
	if learned && e.gate != nil {
		b, _ := os.ReadFile(e.approvedPath())
		if ok, err := e.gate.RulesWritten(ctx, RulesDigest(b)); err == nil && ok {
			learned = false
		}
	}
	changes := Changes(e.Config().PolicyConfig(), cfg.PolicyConfig(), e.approved, approved, learned)
	summary := strings.Join(changes, "\n")
	reason := ""
	switch {
	case len(changes) == 0:
		reason = "configuration reloaded: the change alters no decision"
	case e.isolated != nil && e.isolated():
		reason = "configuration reloaded: no server can have written it (isolation in force)"
	case e.applied(ctx, d):
		reason = "configuration reloaded: a person applied this change"
	}
	if reason == "" {
		e.pending = d
		e.logger.Warn("config change waits for a person (the UI's Configuration change, or guard policy reload): the previous policy stays in force",
			"digest", d, "changes", summary)
		if err := e.recordLoad(ConfigLoad{How: Held, Digest: d, Reason: "configuration change waits for a person; the policy in force stays",
			Changes: summary}); err != nil {
			e.logger.Error("config change: its record could not be written", "err", err)
		}
		if e.gate != nil {
			if err := e.gate.NoteConfigChange(ctx, d, summary); err != nil {
				e.logger.Error("config change: cannot record it", "err", err)
			}
		}
		return
	}
	p := Compile(cfg, approved, e.prot)
	if err := e.recordLoad(ConfigLoad{How: Reloaded, Digest: d, Policy: p.Version(), Reason: reason, Changes: summary}); err != nil {
		// Looked at again next time: the files count as unseen.
		e.seen = ""
		e.logger.Error("config change not applied; the previous policy stays in force", "digest", d, "err", err)
		return
	}
	e.apply(cfg, p, approved, version)
	e.logger.Info(reason, "policy", p.Version(), "digest", d)
}

// PlanLearnedRule is how a rule learned from an approval joins the
// learned rules: with the defaults filled in (every server, every tool,
// tools/call) and a name none of them has (a number added), or not at all
// (add false) when one of them matches the same calls with the same
// action already.
func PlanLearnedRule(rules []Rule, r Rule) (_ Rule, add bool) {
	if r.Method == "" {
		r.Method = "tools/call"
	}
	if r.Server == "" {
		r.Server = "*"
	}
	if r.Tool == "" {
		r.Tool = "*"
	}
	names := map[string]bool{}
	for _, x := range rules {
		if x.Server == r.Server && x.Tool == r.Tool && x.Method == r.Method && x.URI == r.URI && x.When == r.When && x.Action == r.Action {
			return r, false
		}
		names[x.Name] = true
	}
	base := r.Name
	for i := 2; names[r.Name]; i++ {
		r.Name = fmt.Sprintf("%s-%d", base, i)
	}
	return r, true
}

// AppendApprovedRule adds a rule to rulesDir/approved.yaml, atomically,
// and reports whether it did: a rule that matches the same calls with the
// same action is there already. Every field of the rules already there is
// written back as it was; a new rule whose name is taken gets a numbered
// one.
//
// wrote, when set, is given the digest of the new file (RulesDigest) and
// the rule as it is written (its name made unique) before the file
// replaces the old one: a running guard applies a file it knows guard
// wrote without waiting for a person, and the rule's record in the audit
// log comes before the rule takes effect. When wrote fails, nothing is
// written.
func AppendApprovedRule(rulesDir string, r Rule, wrote func(digest string, r Rule) error) (bool, error) {
	file := filepath.Join(rulesDir, ApprovedRulesFile)
	rules, err := LoadRules(file, os.Getenv)
	if err != nil {
		return false, err
	}
	r, add := PlanLearnedRule(rules, r)
	if !add {
		return false, nil
	}
	b, err := MarshalRules(append(rules, r))
	if err != nil {
		return false, fmt.Errorf("approved rules: %w", err)
	}
	if err := os.MkdirAll(rulesDir, 0o700); err != nil {
		return false, fmt.Errorf("approved rules: %w", err)
	}
	tmp := file + ".tmp"
	content := append([]byte("# Rules learned from approvals. guard writes this file.\n"), b...)
	if wrote != nil {
		if err := wrote(RulesDigest(content), r); err != nil {
			return false, fmt.Errorf("approved rules: %w", err)
		}
	}
	if err := os.WriteFile(tmp, content, 0o600); err != nil {
		return false, fmt.Errorf("approved rules: %w", err)
	}
	if err := os.Rename(tmp, file); err != nil {
		return false, fmt.Errorf("approved rules: %w", err)
	}
	return true, nil
}

// MarshalRules writes rules as a rules file (ParseRules reads it back):
// every field as it is, tools/call, the default method, left out.
func MarshalRules(rules []Rule) ([]byte, error) {
	type yrule struct {
		Name   string   `yaml:"name"`
		Server string   `yaml:"server,omitempty"`
		Tool   string   `yaml:"tool,omitempty"`
		Method string   `yaml:"method,omitempty"`
		URI    string   `yaml:"uri,omitempty"`
		When   string   `yaml:"when,omitempty"`
		Users  []string `yaml:"users,omitempty,flow"`
		Groups []string `yaml:"groups,omitempty,flow"`
		Action string   `yaml:"action"`
		Reason string   `yaml:"reason,omitempty"`
	}
	var out struct {
		Rules []yrule `yaml:"rules"`
	}
	for _, x := range rules {
		method := x.Method
		if method == "tools/call" {
			method = "" // the default
		}
		out.Rules = append(out.Rules, yrule{x.Name, x.Server, x.Tool, method, x.URI, x.When, x.Users, x.Groups, x.Action, x.Reason})
	}
	return yaml.Marshal(out)
}
