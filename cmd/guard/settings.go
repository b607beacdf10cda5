package main

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/config"
	"github.com/guard-mcp/guard/policy"
	"github.com/guard-mcp/guard/store"
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
type settings struct {
	Config     *config.Config
	ConfigPath string // "" when running on built-in defaults
	DBPath     string // an SQLite file's absolute path, or a PostgreSQL URL
	Postgres   bool   // DBPath is a PostgreSQL URL
	DataDir    string // the database's directory (on PostgreSQL, guard's data directory): keys, checkpoint, UI token
	RulesDir   string // where approved.yaml lives ("" on PostgreSQL: the learned rules are the database's)
}

// settings resolves the configuration and database: flag, then
// environment, then the config file's value, then the default. A config
// that is named but missing is an error.
func (a *app) settings(cf *commonFlags) (*settings, error) {
	defCfg, defDB := config.Paths(a.getenv)
	cfgPath := cf.config
	if cfgPath == "" {
		cfgPath = a.getenv("GUARD_CONFIG")
	}
	if cfgPath == "" {
		cfgPath = defCfg
	}
	cfg := config.Default()
	if cfgPath != "" {
		// Absolute, as every path guard hides from its servers must be:
		// "g.yaml" means nothing to a server that runs elsewhere, and
		// the sandbox refuses it.
		var err error
		if cfgPath, err = placedPath(config.ExpandHome(cfgPath, a.getenv)); err != nil {
			return nil, fmt.Errorf("configuration path: %w", err)
		}
		c, err := config.Load(cfgPath, a.getenv)
		if err != nil {
			return nil, err
		}
		cfg = c
	}
	db := cf.db
	if db != "" && store.IsPostgres(db) && store.URLHasPassword(db) {
		return nil, fmt.Errorf("--db: the URL holds a password, which every user of this machine can read in the process list: give it in PGPASSWORD, a .pgpass file, or the configuration's db (${NAME} expands an environment variable there)")
	}
	if db == "" {
		db = a.getenv("GUARD_DB")
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

// placedPath is p made absolute, with the symbolic links of its directory
// resolved: where guard's file is, the same for guard and for the
// sandbox whatever the working directory, and whatever a server later
// does to a link on the way. The file's own name is kept as given (a
// link stays a link, read afresh, and the rules directory and relative
// includes beside it): see sandboxHide for how a link is hidden.
func placedPath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	dir, err := realPath(filepath.Dir(abs))
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, filepath.Base(abs)), nil
}

// realPath is p made absolute with every symbolic link resolved: the path
// the kernel reaches p by. Of a path that does not exist (yet), the
// nearest ancestor that does is resolved and the rest kept.
func realPath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	var rest []string
	for d := abs; ; d = filepath.Dir(d) {
		r, err := filepath.EvalSymlinks(d)
		if err == nil {
			return filepath.Join(append([]string{r}, rest...)...), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("resolving %s: %w", p, err)
		}
		if d == filepath.Dir(d) {
			return abs, nil
		}
		rest = append([]string{filepath.Base(d)}, rest...)
	}
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

// protected lists guard's own files for the self-protection rule. On
// PostgreSQL they include what the store keeps beside the checkpoint key,
// which may be outside the data directory: the checkpoint, its lock and
// the audit archives.
func (st *settings) protected() *policy.Protected {
	if st.Postgres {
		checkpoint, lock := st.checkpointFiles()
		return policy.NewProtected(st.DataDir, keyPath(st), checkpoint, lock, archiveDir(st), st.ConfigPath, st.RulesDir)
	}
	return policy.NewProtected(st.DBPath, st.DBPath+"-wal", st.DBPath+"-shm", st.DataDir, st.ConfigPath, st.RulesDir)
}

// checkpointFiles are, on PostgreSQL, the signed checkpoint the store
// keeps beside the checkpoint key (store.Options.CheckpointPath's
// default) and its lock.
func (st *settings) checkpointFiles() (checkpoint, lock string) {
	checkpoint = filepath.Join(filepath.Dir(keyPath(st)), "audit.checkpoint")
	return checkpoint, checkpoint + ".lock"
}

// dbName is the database as it may be shown: an SQLite file's path, or a
// PostgreSQL URL without its password and parameters.
func (st *settings) dbName() string { return guard.DisplayURL(st.DBPath) }

// uiToken is the UI's login token: the data directory's (made on first
// use) on SQLite; on PostgreSQL, derived from the log's checkpoint key,
// so that every replica, which holds that one key, takes the same login
// link behind a balancer.
func (st *settings) uiToken() (string, error) {
	if !st.Postgres {
		return uiToken(st.DataDir)
	}
	tok, err := store.DerivedSecret(keyPath(st), "guard: the UI's login token")
	if err != nil {
		return "", fmt.Errorf("ui token: %w", err)
	}
	return tok, nil
}
