package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
	"github.com/guard-mcp/guard/config"
	"github.com/guard-mcp/guard/policy"
	"github.com/guard-mcp/guard/store"
	"github.com/guard-mcp/guard/web"
)

// Settings are the resolved configuration and paths of a subcommand.
type Settings struct {
	Config     *config.Config
	ConfigPath string // "" when running on built-in defaults
	DBPath     string // an SQLite file's absolute path, or a PostgreSQL URL
	Postgres   bool   // DBPath is a PostgreSQL URL
	DataDir    string // the database's directory (on PostgreSQL, guard's data directory): keys, checkpoint, UI token
	RulesDir   string // where approved.yaml lives ("" on PostgreSQL: the learned rules are the database's)
}

// protected lists guard's own files for the self-protection rule. On
// PostgreSQL they include what the store keeps beside the checkpoint key,
// which may be outside the data directory: the checkpoint, its lock and
// the audit archives.
func (st *Settings) protected() *policy.Protected {
	if st.Postgres {
		checkpoint, lock := st.checkpointFiles()
		return policy.NewProtected(st.DataDir, st.KeyPath(), checkpoint, lock, st.archiveDir(), st.ConfigPath, st.RulesDir)
	}
	return policy.NewProtected(st.DBPath, st.DBPath+"-wal", st.DBPath+"-shm", st.DataDir, st.ConfigPath, st.RulesDir)
}

// checkpointFiles are, on PostgreSQL, the signed checkpoint the store
// keeps beside the checkpoint key (store.Options.CheckpointPath's
// default) and its lock.
func (st *Settings) checkpointFiles() (checkpoint, lock string) {
	checkpoint = filepath.Join(filepath.Dir(st.KeyPath()), "audit.checkpoint")
	return checkpoint, checkpoint + ".lock"
}

// DBName is the database as it may be shown: an SQLite file's path, or a
// PostgreSQL URL without its password and parameters.
func (st *Settings) DBName() string { return guard.DisplayURL(st.DBPath) }

// uiToken is the UI's login token: the data directory's (made on first
// use) on SQLite; on PostgreSQL, derived from the log's checkpoint key,
// so that every replica, which holds that one key, takes the same login
// link behind a balancer.
func (st *Settings) uiToken() (string, error) {
	if !st.Postgres {
		return uiToken(st.DataDir)
	}
	tok, err := audit.DerivedSecret(st.KeyPath(), "guard: the UI's login token")
	if err != nil {
		return "", fmt.Errorf("ui token: %w", err)
	}
	return tok, nil
}

// storeOptions are the database options of the resolved settings.
func (m *Main) storeOptions(st *Settings) store.Options {
	return store.Options{Path: st.DBPath, Durability: st.Config.Durability, Logger: m.Logger,
		KeyPath: st.KeyPath(), CheckpointEvery: st.Config.Audit.Checkpoints.Every,
		Witnesses: st.Config.Audit.Checkpoints.Witness}
}

// KeyPath is the checkpoint key file: audit.key_file (relative to the
// configuration's directory), else audit.key beside the database.
func (st *Settings) KeyPath() string {
	p := st.Config.Audit.KeyFile
	if p == "" {
		return filepath.Join(st.DataDir, "audit.key")
	}
	if !filepath.IsAbs(p) && st.ConfigPath != "" {
		p = filepath.Join(filepath.Dir(st.ConfigPath), p)
	}
	return p
}

// RetentionOptions are the retention job's options of the resolved
// settings: audit.retention, and audit.archive_dir (relative to the
// configuration's directory), else archive/ beside the database (on
// PostgreSQL, beside the checkpoint key).
func (st *Settings) RetentionOptions() store.RetentionOptions {
	return store.RetentionOptions{Retention: st.Config.Audit.Retention, ArchiveDir: st.archiveDir()}
}

// archiveDir is where retention writes its archives.
func (st *Settings) archiveDir() string {
	p := st.Config.Audit.ArchiveDir
	if p == "" && st.Postgres {
		return filepath.Join(filepath.Dir(st.KeyPath()), "archive")
	}
	if p == "" {
		return store.ArchiveDir(st.DBPath)
	}
	if !filepath.IsAbs(p) && st.ConfigPath != "" {
		p = filepath.Join(filepath.Dir(st.ConfigPath), p)
	}
	return p
}

// uiTokenFile holds the UI's login token, in the data directory.
const uiTokenFile = "ui.token"

// uiToken returns the UI's login token, creating it (32 random bytes,
// readable by the owner only) on first use.
func uiToken(dataDir string) (string, error) {
	path := filepath.Join(dataDir, uiTokenFile)
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) >= 64 {
		return strings.TrimSpace(string(b)), nil
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", fmt.Errorf("ui token: %w", err)
	}
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return "", fmt.Errorf("ui token: %w", err)
	}
	tok := hex.EncodeToString(buf)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) { // another process made it first
		b, rerr := os.ReadFile(path)
		if rerr != nil {
			return "", fmt.Errorf("ui token: %w", rerr)
		}
		return strings.TrimSpace(string(b)), nil
	}
	if err != nil {
		return "", fmt.Errorf("ui token: %w", err)
	}
	defer f.Close()
	if _, err := f.WriteString(tok + "\n"); err != nil {
		return "", fmt.Errorf("ui token: %w", err)
	}
	return tok, nil
}

// uiURL is the address a browser opens: the login route with the token,
// at the public URL when one is configured.
func uiURL(publicURL, listen, token string) string {
	return uiBase(publicURL, listen) + "/login?token=" + token
}

// uiBase is the UI's address: the public URL when one is configured
// (browsers reach the UI through what stands in front of guard), else
// the address it listens on.
func uiBase(publicURL, listen string) string {
	if publicURL != "" {
		return publicURL
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "http://" + listen
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// uiOrigin is the UI's address as browsers reach it: with passkeys, the
// origin of their relying party (http://localhost:PORT, as an IP address
// cannot be one), else uiBase.
func uiOrigin(c *config.Config, listen string) string {
	if c.UI.Passkey == web.PasskeyRequired {
		if o, err := c.PasskeyOrigin(listen); err == nil {
			return o
		}
	}
	return uiBase(c.PublicURL, listen)
}

// PlacedPath is p made absolute, with the symbolic links of its directory
// resolved: where guard's file is, the same for guard and for the
// sandbox whatever the working directory, and whatever a server later
// does to a link on the way. The file's own name is kept as given (a
// link stays a link, read afresh, and the rules directory and relative
// includes beside it): see SandboxHide for how a link is hidden.
func PlacedPath(p string) (string, error) {
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

// OpenStore opens the database of the resolved settings.
func (m *Main) OpenStore(ctx context.Context, st *Settings) (*store.DB, error) {
	return store.Open(ctx, m.storeOptions(st))
}

// OpenReadOnly opens the database of the resolved settings read-only.
func (m *Main) OpenReadOnly(ctx context.Context, st *Settings) (*store.DB, error) {
	return store.OpenReadOnly(ctx, store.Options{Path: st.DBPath, Logger: m.Logger, KeyPath: st.KeyPath()})
}
