package main

import (
	"flag"
	"fmt"
	"path/filepath"

	"github.com/guard-mcp/guard/policy"
)

// commonFlags are the flags every subcommand takes.
type commonFlags struct{ config, db string }

func addCommonFlags(fs *flag.FlagSet) *commonFlags {
	cf := &commonFlags{}
	fs.StringVar(&cf.config, "config", "", "configuration `file` (default $GUARD_CONFIG, else ~/.config/guard/guard.yaml when it exists)")
	fs.StringVar(&cf.db, "db", "", "database `path` (default $GUARD_DB, else the config's db, else ~/.local/share/guard/guard.db)")
	return cf
}

// settings are the resolved configuration and paths of a subcommand.
type settings struct {
	Config     *policy.Config
	ConfigPath string // "" when running on built-in defaults
	DBPath     string
	DataDir    string // the database's directory: keys, checkpoint
	RulesDir   string // where approved.yaml lives
}

// settings resolves the configuration and database: flag, then
// environment, then the config file's value, then the default. A config
// that is named but missing is an error.
func (a *app) settings(cf *commonFlags) (*settings, error) {
	defCfg, defDB := policy.Paths(a.getenv)
	cfgPath := cf.config
	if cfgPath == "" {
		cfgPath = a.getenv("GUARD_CONFIG")
	}
	if cfgPath == "" {
		cfgPath = defCfg
	}
	cfg := policy.Default()
	if cfgPath != "" {
		cfgPath = policy.ExpandHome(cfgPath, a.getenv)
		c, err := policy.Load(cfgPath, a.getenv)
		if err != nil {
			return nil, err
		}
		cfg = c
	}
	db := cf.db
	if db == "" {
		db = a.getenv("GUARD_DB")
	}
	if db == "" && cfg.DB != "" {
		db = cfg.DB
		if !filepath.IsAbs(policy.ExpandHome(db, a.getenv)) && cfgPath != "" {
			db = filepath.Join(filepath.Dir(cfgPath), db)
		}
	}
	if db == "" {
		db = defDB
	}
	db, err := filepath.Abs(policy.ExpandHome(db, a.getenv))
	if err != nil {
		return nil, fmt.Errorf("database path: %w", err)
	}
	st := &settings{Config: cfg, ConfigPath: cfgPath, DBPath: db, DataDir: filepath.Dir(db)}
	st.RulesDir = filepath.Join(st.DataDir, "rules.d")
	if cfgPath != "" {
		st.RulesDir = filepath.Join(filepath.Dir(cfgPath), "rules.d")
	}
	return st, nil
}

// settingsOrExit resolves settings or prints why not; a bad configuration
// is a usage error (exit 2).
func (a *app) settingsOrExit(cf *commonFlags) (*settings, int, bool) {
	st, err := a.settings(cf)
	if err != nil {
		fmt.Fprintf(a.stderr, "guard: %v\n", err)
		return nil, exitUsage, false
	}
	return st, 0, true
}

// protected lists guard's own files for the self-protection rule.
func (st *settings) protected() *policy.Protected {
	return policy.NewProtected(st.DBPath, st.DBPath+"-wal", st.DBPath+"-shm", st.DataDir, st.ConfigPath, st.RulesDir)
}
