package main

import (
	"fmt"
	"path/filepath"

	guardapp "github.com/guard-mcp/guard/cmd/guard/app"
	"github.com/guard-mcp/guard/config"
	"github.com/guard-mcp/guard/store"
	"github.com/guard-mcp/guard/store/postgres"
	"github.com/spf13/pflag"
)

// commonFlags are the flags every subcommand takes.
type commonFlags struct{ config, db string }

// addCommonFlags adds --config and --db to a command's flags.
func addCommonFlags(fs *pflag.FlagSet) *commonFlags {
	cf := &commonFlags{}
	fs.StringVar(&cf.config, "config", "", "configuration `file` (default $GUARD_CONFIG, else ~/.config/guard/guard.yaml when it exists)")
	fs.StringVar(&cf.db, "db", "", "database: an SQLite file's `path`, or a postgres:// URL without its password (default $GUARD_DB, else the config's db, else ~/.local/share/guard/guard.db)")
	return cf
}

// settings are the resolved configuration and paths of a subcommand.
type settings = guardapp.Settings

// settings resolves the configuration and database: flag, then
// environment, then the config file's value, then the default; and the
// configuration's keys that have a variable and no flag (public_url,
// allowed_hosts). A config that is named but missing is an error.
func (a *app) settings(cf *commonFlags) (*settings, error) {
	defCfg, defDB := config.Paths(a.getenv)
	cfgPath, err := a.flagOrVariable(cf.config, "config")
	if err != nil {
		return nil, err
	}
	if cfgPath == "" {
		cfgPath = defCfg
	}
	cfg := config.Default()
	if cfgPath != "" {
		// Absolute, as every path guard hides from its servers must be:
		// "g.yaml" means nothing to a server that runs elsewhere, and
		// the sandbox refuses it.
		if cfgPath, err = placedPath(config.ExpandHome(cfgPath, a.getenv)); err != nil {
			return nil, fmt.Errorf("configuration path: %w", err)
		}
		c, err := config.Load(cfgPath, a.getenv)
		if err != nil {
			return nil, err
		}
		cfg = c
	}
	if err := cfg.ApplyEnvironment(a.getenv); err != nil {
		return nil, err
	}
	// A password in GUARD_DB is the environment's, which only the
	// process's user reads.
	if cf.db != "" && a.source("db") == "--db" && store.IsPostgres(cf.db) && postgres.URLHasPassword(cf.db) {
		return nil, fmt.Errorf("--db: the URL holds a password, which every user of this machine can read in the process list: give it in PGPASSWORD, a .pgpass file, or the configuration's db (${NAME} expands an environment variable there)")
	}
	db, err := a.flagOrVariable(cf.db, "db")
	if err != nil {
		return nil, err
	}
	if db == "" && cfg.DB != "" {
		db = cfg.DB
		if !store.IsPostgres(db) && !filepath.IsAbs(config.ExpandHome(db, a.getenv)) && cfgPath != "" {
			db = filepath.Join(filepath.Dir(cfgPath), db)
		}
	}
	if db == "" {
		db = defDB
	}
	var st *settings
	if store.IsPostgres(db) {
		// Keys, the checkpoint, the UI token and the rules directory are
		// files of each machine: guard's data directory.
		_, dataDir := config.Dirs(a.getenv)
		st = &settings{Config: cfg, ConfigPath: cfgPath, DBPath: db, Postgres: true, DataDir: dataDir}
		// The database's credentials are guard's, not its servers'.
		cfg.OwnVariables = append(cfg.OwnVariables, "PGPASSWORD", "PGPASSFILE")
	} else {
		db, err := placedPath(config.ExpandHome(db, a.getenv))
		if err != nil {
			return nil, fmt.Errorf("database path: %w", err)
		}
		st = &settings{Config: cfg, ConfigPath: cfgPath, DBPath: db, DataDir: filepath.Dir(db)}
	}
	switch {
	case st.Postgres:
		// Rules learned from approvals are the database's, the same for
		// every replica.
	case cfgPath != "":
		st.RulesDir = filepath.Join(filepath.Dir(cfgPath), "rules.d")
	default:
		st.RulesDir = filepath.Join(st.DataDir, "rules.d")
	}
	return st, nil
}

// flagOrVariable is a common flag's value when given (or set from its
// variable as the command line was read), else its variable's: settings
// is also called with flags no command line set (guard wrap asks what an
// entry's guard would resolve).
func (a *app) flagOrVariable(given, flag string) (string, error) {
	v, ok := config.LookupVariable(flag)
	if given != "" || !ok {
		return given, nil
	}
	return config.ReadVariable(v, a.getenv)
}

// placedPath is p made absolute, its directory's links resolved
// (app.PlacedPath).
func placedPath(p string) (string, error) { return guardapp.PlacedPath(p) }

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
