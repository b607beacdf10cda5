package policy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	guard "github.com/guard-mcp/guard"
	"go.yaml.in/yaml/v3"
)

// ApprovedRulesFile is where rules learned from approvals are kept, in the
// rules directory.
const ApprovedRulesFile = "approved.yaml"

// Engine holds the policy in force and replaces it when the configuration
// changes on disk. Every process sharing a database watches on its own.
type Engine struct {
	file     string // the configuration file; "" for built-in defaults
	rulesDir string
	prot     *Protected
	limiter  Limiter
	getenv   func(string) string
	logger   *slog.Logger
	cur      atomic.Pointer[Policy]
	cfg      atomic.Pointer[Config]
	seen     [32]byte // digest of the files last loaded (Watch only)
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
}

// NewEngine compiles cfg (read from file) with the approved rules.
func NewEngine(file string, cfg *Config, o EngineOptions) (*Engine, error) {
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	e := &Engine{file: file, rulesDir: o.RulesDir, prot: o.Protected, limiter: o.Limiter, getenv: o.Getenv, logger: o.Logger}
	approved, err := LoadRules(e.approvedPath(), e.getenv)
	if err != nil {
		return nil, err
	}
	if err := checkRules(append(append([]Rule(nil), cfg.Policy.Rules...), approved...)); err != nil {
		return nil, err
	}
	e.cfg.Store(cfg)
	e.cur.Store(Compile(cfg, approved, e.prot))
	e.seen = e.digest()
	return e, nil
}

func (e *Engine) approvedPath() string {
	if e.rulesDir == "" {
		return ""
	}
	return filepath.Join(e.rulesDir, ApprovedRulesFile)
}

// Policy is the policy in force.
func (e *Engine) Policy() *Policy { return e.cur.Load() }

// Config is the configuration in force.
func (e *Engine) Config() *Config { return e.cfg.Load() }

// Decide decides a call with the policy in force, then, unless it is
// denied, checks the rate limits (before any approval, so that a flood of
// calls cannot fill the approval queue).
func (e *Engine) Decide(call *guard.Call) guard.Verdict {
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
func (e *Engine) digest() [32]byte {
	h := sha256.New()
	files := []string{e.file, e.approvedPath()}
	if c := e.cfg.Load(); c != nil && e.file != "" {
		for _, pat := range c.Include {
			if !filepath.IsAbs(pat) {
				pat = filepath.Join(filepath.Dir(e.file), pat)
			}
			m, _ := filepath.Glob(pat)
			files = append(files, m...)
		}
	}
	for _, f := range files {
		if f == "" {
			continue
		}
		b, _ := os.ReadFile(f)
		fmt.Fprintf(h, "%s\x00%d\x00", f, len(b))
		h.Write(b)
	}
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// Reload reads the files again; an invalid change leaves the policy in
// force and is returned.
func (e *Engine) Reload() error {
	cfg := Default()
	var err error
	if e.file != "" {
		if cfg, err = Load(e.file, e.getenv); err != nil {
			return err
		}
	}
	approved, err := LoadRules(e.approvedPath(), e.getenv)
	if err != nil {
		return err
	}
	if err := checkRules(append(append([]Rule(nil), cfg.Policy.Rules...), approved...)); err != nil {
		return err
	}
	e.cfg.Store(cfg)
	e.cur.Store(Compile(cfg, approved, e.prot))
	return nil
}

// settle is how long a changed configuration must stay unchanged before
// it is loaded.
const settle = 50 * time.Millisecond

// Watch reloads the policy whenever its files change, until ctx ends.
func (e *Engine) Watch(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d := e.digest()
		if bytes.Equal(d[:], e.seen[:]) {
			continue
		}
		// A file being written (truncated, then filled) is read again
		// once it has stopped changing.
		time.Sleep(settle)
		if d2 := e.digest(); !bytes.Equal(d[:], d2[:]) {
			continue
		}
		e.seen = d
		if err := e.Reload(); err != nil {
			e.logger.Error("config change not applied; the previous policy stays in force", "err", err)
			continue
		}
		e.logger.Info("config reloaded", "policy", e.Policy().Version())
	}
}

// AppendApprovedRule adds a rule to rulesDir/approved.yaml, atomically,
// and reports whether it did: a rule that matches the same calls with the
// same action is there already. Every field of the rules already there is
// written back as it was; a new rule whose name is taken gets a numbered
// one.
func AppendApprovedRule(rulesDir string, r Rule) (bool, error) {
	file := filepath.Join(rulesDir, ApprovedRulesFile)
	rules, err := LoadRules(file, os.Getenv)
	if err != nil {
		return false, err
	}
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
			return false, nil
		}
		names[x.Name] = true
	}
	base := r.Name
	for i := 2; names[r.Name]; i++ {
		r.Name = fmt.Sprintf("%s-%d", base, i)
	}
	type yrule struct {
		Name   string `yaml:"name"`
		Server string `yaml:"server,omitempty"`
		Tool   string `yaml:"tool,omitempty"`
		Method string `yaml:"method,omitempty"`
		URI    string `yaml:"uri,omitempty"`
		When   string `yaml:"when,omitempty"`
		Action string `yaml:"action"`
		Reason string `yaml:"reason,omitempty"`
	}
	var out struct {
		Rules []yrule `yaml:"rules"`
	}
	for _, x := range append(rules, r) {
		method := x.Method
		if method == "tools/call" {
			method = "" // the default
		}
		out.Rules = append(out.Rules, yrule{x.Name, x.Server, x.Tool, method, x.URI, x.When, x.Action, x.Reason})
	}
	b, err := yaml.Marshal(out)
	if err != nil {
		return false, fmt.Errorf("approved rules: %w", err)
	}
	if err := os.MkdirAll(rulesDir, 0o700); err != nil {
		return false, fmt.Errorf("approved rules: %w", err)
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, append([]byte("# Rules learned from approvals. guard writes this file.\n"), b...), 0o600); err != nil {
		return false, fmt.Errorf("approved rules: %w", err)
	}
	if err := os.Rename(tmp, file); err != nil {
		return false, fmt.Errorf("approved rules: %w", err)
	}
	return true, nil
}

// Paths returns the default configuration file (when it exists) and
// database path, from XDG_CONFIG_HOME and XDG_DATA_HOME.
func Paths(getenv func(string) string) (configPath, dbPath string) {
	cfgDir, dataDir := Dirs(getenv)
	if f := filepath.Join(cfgDir, "guard.yaml"); fileExists(f) {
		configPath = f
	}
	return configPath, filepath.Join(dataDir, "guard.db")
}

// Dirs returns guard's default configuration and data directories:
// $XDG_CONFIG_HOME/guard (~/.config/guard) and $XDG_DATA_HOME/guard
// (~/.local/share/guard).
func Dirs(getenv func(string) string) (configDir, dataDir string) {
	home, _ := os.UserHomeDir()
	if h := getenv("HOME"); h != "" {
		home = h
	}
	cfg := getenv("XDG_CONFIG_HOME")
	if cfg == "" {
		cfg = filepath.Join(home, ".config")
	}
	data := getenv("XDG_DATA_HOME")
	if data == "" {
		data = filepath.Join(home, ".local", "share")
	}
	return filepath.Join(cfg, "guard"), filepath.Join(data, "guard")
}

func fileExists(f string) bool {
	st, err := os.Stat(f)
	return err == nil && !st.IsDir()
}

// ExpandHome replaces a leading "~/" with the home directory.
func ExpandHome(p string, getenv func(string) string) string {
	if len(p) >= 2 && p[:2] == "~/" {
		home := getenv("HOME")
		if home == "" {
			home, _ = os.UserHomeDir()
		}
		return filepath.Join(home, p[2:])
	}
	return p
}
