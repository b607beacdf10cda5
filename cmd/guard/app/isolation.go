package app

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/guard-mcp/guard/config"
	"github.com/guard-mcp/guard/internal/filelock"
	"github.com/guard-mcp/guard/policy"
	"github.com/guard-mcp/guard/sandbox"
)

// isolation starts the stdio servers of one guard process so that guard's
// own directories and files do not exist for them (package sandbox), and
// keeps track of whether every server it started was isolated.
type isolation struct {
	spec   sandbox.Spec
	logger *slog.Logger
	// exposed counts the servers started, or configured, without isolation.
	exposed atomic.Int64
	logged  sync.Map // server name → true once its isolation was logged
	// marker is exposedMarker's path; marked holds it (shared lock) from
	// the first server without isolation until the process ends.
	marker   string
	markerID fileIdentity // the marker's identity when this process made sure it existed
	markOnce sync.Once
	marked   *os.File
	// settled is set once the servers this process runs have been
	// settled (settle): before, whether they are isolated is not known
	// yet.
	settled atomic.Bool
	// probed is closed once the probe at start (probeAtStart) is done;
	// found is what it found.
	probeOnce sync.Once
	probed    chan struct{}
	found     probeResult
}

// exposedMarker is the file, in guard's data directory, that every guard
// process running a server without isolation holds a shared lock on for
// the rest of its life: another process on the machine then knows that
// guard's files may have been written by a server, whatever its own
// servers are.
const exposedMarker = "exposed.lock"

// expose counts a server that runs, or may run, without isolation, and
// says so to the other guard processes on the machine.
func (iso *isolation) expose() {
	iso.exposed.Add(1)
	iso.markOnce.Do(func() {
		if iso.marker == "" {
			return
		}
		f, err := os.OpenFile(iso.marker, os.O_RDWR|os.O_CREATE, 0o600)
		if err == nil {
			err = filelock.RLock(f)
		}
		if err != nil {
			// The others cannot be told: this process's own answer
			// (everyServerIsolated) is false all the same.
			iso.logger.Warn("other guard processes cannot be told that a server here runs without isolation", "err", err)
			if f != nil {
				f.Close()
			}
			return
		}
		iso.marked = f
	})
}

// othersExposed reports whether a guard process on this machine (this
// one included) runs a server without isolation, or whether that cannot
// be told.
func (iso *isolation) othersExposed() bool {
	if iso.marker == "" {
		return true
	}
	// The marker is the file this process found at start: one removed or
	// put in its place (by a server without isolation, which could also
	// have written the configuration) tells nothing, so it counts as
	// exposure.
	f, err := os.OpenFile(iso.marker, os.O_RDWR, 0)
	if err != nil {
		return true
	}
	defer f.Close()
	if id, err := identifyOpen(f); err != nil || id != iso.markerID {
		return true
	}
	// A shared lock held by any process makes an exclusive one fail.
	if err := filelock.TryLock(f); err != nil {
		return true
	}
	_ = filelock.Unlock(f)
	return false
}

// newIsolation works out what servers must not see. With create, the
// directories it hides that do not exist yet are created, so that a
// server cannot create them first; without, they are left out.
func (m *Main) newIsolation(st *Settings, logger *slog.Logger, create bool) *isolation {
	self, err := os.Executable()
	if err != nil {
		logger.Error("servers cannot be isolated from guard's files: guard cannot find its own program", "err", err)
	}
	iso := &isolation{spec: sandbox.Spec{Self: self, Hide: st.SandboxHide(m.Getenv, logger, create)}, logger: logger,
		marker: filepath.Join(st.DataDir, exposedMarker)}
	if iso.markerID, err = identifyFile(iso.marker); err != nil && create {
		logger.Warn("configuration changes will wait for a person: the marker of servers without isolation cannot be read", "err", err)
	}
	return iso
}

// notOnThisOS is what guard says, at start and in guard policy check, on
// an OS without isolation (macOS, Windows): there a server runs on the path
// rules alone, as a matter of course rather than a fault of this system.
var notOnThisOS = "isolation is not available on this OS (" + osName[runtime.GOOS] + "): the servers guard starts can reach guard's own files; only the path rules (guard-self-protection) protect them"

// osName names the systems without isolation as their users do.
var osName = map[string]string{"darwin": "macOS", "windows": "Windows", "linux": "Linux"}

// errNotIsolated is why guard refused to start a server: it was to run
// isolated (the probe at start found that isolation works here, or the
// server's settings say sandbox: on) and isolation could not be set up
// for it. Running it anyway would hand guard's files to a server that
// any shortage, or a path guard got wrong, lets out.
var errNotIsolated = errors.New("the server could not be isolated from guard's files, so guard did not start it")

// probeResult is what the probe at start found.
type probeResult struct {
	took time.Duration // how long setting up the sandbox took
	// none is why this system cannot isolate servers at all (no user
	// namespaces, a restriction on them, another OS): then a server runs
	// on the path rules alone, loudly, unless its settings say sandbox:
	// on. nil when isolation works here: then a server that cannot be
	// isolated does not run.
	none error
	// failed is why what this process hides could not be hidden, on a
	// system that isolates: each server will be refused unless a later
	// start succeeds.
	failed error
}

// probeAtStart probes the sandbox, in the background, once: whether this
// system isolates servers is decided now, before anything (clients
// holding descriptors, a server's own doing) can make a start fail.
func (iso *isolation) probeAtStart() {
	iso.probeOnce.Do(func() {
		iso.probed = make(chan struct{})
		go func() {
			defer close(iso.probed)
			iso.found = iso.probe()
		}()
	})
}

// probe sets up a sandbox for what this process hides, running nothing in
// it; when that fails, one that hides nothing says whether the system has
// no sandbox at all or could not hide these paths.
func (iso *isolation) probe() probeResult {
	took, err := sandbox.Probe(iso.spec)
	if err == nil {
		return probeResult{took: took}
	}
	if errors.Is(sandbox.Supported(iso.spec.Self), sandbox.ErrUnsupported) {
		return probeResult{none: err}
	}
	return probeResult{failed: err}
}

// result waits for the probe at start (starting it, if no one did) and
// returns what it found.
func (iso *isolation) result() probeResult {
	iso.probeAtStart()
	<-iso.probed
	return iso.found
}

// settle logs, once per process, for each of the stdio servers names,
// whether isolation will be in force, as the probe at start found, and
// counts those that will run without it; from then on, whether every
// server is isolated is known.
func (iso *isolation) settle(names []string, servers map[string]*policy.Server) {
	r := iso.result()
	for _, name := range names {
		srv := servers[name]
		switch {
		case srv != nil && srv.Sandbox == "off":
			iso.expose()
			iso.logger.Warn("isolation off for this server (sandbox: off): guard's own files are reachable by it; only the path rules (guard-self-protection) protect them", "server", name)
		case r.none != nil && srv.MustIsolate():
			iso.logger.Error("the server will not be started: its settings say sandbox: on, and this system cannot isolate servers", "server", name, "cause", r.none)
		case r.none != nil && !sandbox.OSSupported:
			iso.expose()
			iso.logger.Warn(notOnThisOS, "server", name)
		case r.none != nil:
			iso.expose()
			iso.logger.Error("the server will run WITHOUT isolation: guard's own files will be reachable by it; only the path rules (guard-self-protection) protect them", "server", name, "cause", r.none)
		case r.failed != nil:
			iso.logger.Error("the server will not be started: it cannot be isolated from guard's files", "server", name, "cause", r.failed)
		default:
			iso.logger.Info("isolation in force: guard's own directories and files do not exist for the server", "server", name)
		}
		iso.logged.Store(name, true)
	}
	iso.settled.Store(true)
}

// everyServerIsolated reports whether isolation has been in force for
// every stdio server this process started and for every one it is
// configured to start: false once one ran, or may run, where it could
// reach guard's files.
func (iso *isolation) everyServerIsolated() bool { return iso.exposed.Load() == 0 }

// start returns the hook (stdio.Stdio.Start) that starts the server
// name's processes, isolated unless its configuration says sandbox: off.
// Where the probe at start found no isolation on this system, the server
// runs without it, said at error level each time (unless its settings
// say sandbox: on); where it found isolation, a server that cannot be
// isolated is not started (errNotIsolated).
func (iso *isolation) start(name string, srv *policy.Server) func(*exec.Cmd) (*exec.Cmd, error) {
	return func(cmd *exec.Cmd) (*exec.Cmd, error) {
		if srv != nil && srv.Sandbox == "off" {
			return cmd, cmd.Start()
		}
		if none := iso.result().none; none != nil {
			if srv.MustIsolate() {
				err := fmt.Errorf("%w (its settings say sandbox: on, and this system cannot isolate servers): %w", errNotIsolated, none)
				iso.logger.Error("server not started: it could not be isolated from guard's files", "server", name, "cause", err)
				return nil, err
			}
			iso.expose()
			if !sandbox.OSSupported {
				// Said at start (settle), and once more for a server
				// not settled then.
				if _, seen := iso.logged.LoadOrStore(name, true); !seen {
					iso.logger.Warn(notOnThisOS, "server", name)
				}
				return cmd, cmd.Start()
			}
			iso.logger.Error("the server runs WITHOUT isolation: guard's own files are reachable by it; only the path rules (guard-self-protection) protect them", "server", name, "cause", none)
			return cmd, cmd.Start()
		}
		started, err := sandbox.Start(cmd, iso.spec)
		if err == nil {
			if _, seen := iso.logged.LoadOrStore(name, true); !seen {
				iso.logger.Info("isolation in force: guard's own directories and files do not exist for the server", "server", name)
			}
			return started, nil
		}
		if !errors.Is(err, sandbox.ErrUnavailable) {
			return nil, err // the server itself could not be started
		}
		iso.logger.Error("server not started: it could not be isolated from guard's files", "server", name, "cause", err)
		return nil, fmt.Errorf("%w: %w", errNotIsolated, err)
	}
}

// SandboxHide lists what a server must not see: guard's default data and
// configuration directories, the directories of included rule files (and
// the files they match elsewhere, through links), and guard's files that
// live elsewhere (a configured database or configuration): their
// directory when it holds only guard's files, else each file. A file that
// does not exist yet, or is a symbolic link (a server could point it
// elsewhere), cannot be hidden by itself: then its directory is, unless
// that is the home directory or above it. Every path is absolute, its
// links resolved: the sandbox hides what the kernel reaches, from
// wherever the server runs.
func (st *Settings) SandboxHide(getenv func(string) string, logger *slog.Logger, create bool) []string {
	cfgDir, dataDir := config.Dirs(getenv)
	dirs := []string{cfgDir, dataDir}
	var files []string
	if st.ConfigPath != "" {
		for _, pat := range st.Config.Include {
			if !filepath.IsAbs(pat) {
				pat = filepath.Join(filepath.Dir(st.ConfigPath), pat)
			}
			dir := globDir(pat)
			dirs = append(dirs, dir)
			// A match that links out of the directory names a file
			// the directory's hiding does not cover.
			matches, _ := filepath.Glob(pat)
			for _, m := range matches {
				if real, err := realPath(m); err == nil && !under(real, dir) {
					files = append(files, real)
				}
			}
		}
	}
	if create && st.RulesDir != "" {
		// Where learned rules go: made now, so that it is hidden as itself
		// rather than a server creating it with rules of its own.
		if err := os.MkdirAll(st.RulesDir, 0o700); err != nil {
			logger.Warn("cannot create the rules directory", "dir", st.RulesDir, "err", err)
		}
	}
	var hide []string
	for _, d := range dirs {
		if create {
			if err := os.MkdirAll(d, 0o700); err != nil {
				logger.Error("cannot create guard's directory to hide it from servers", "dir", d, "err", err)
				continue
			}
		} else if _, err := os.Stat(d); err != nil {
			continue
		}
		real, err := realPath(d)
		if err != nil {
			logger.Error("cannot hide guard's directory from servers", "dir", d, "err", err)
			continue
		}
		if link := replaceableLink(d); link != "" && create {
			logger.Warn("guard's directory is reached through a symbolic link that servers may replace: the directory is hidden from them, not the link, which could point the next guard elsewhere; make it a directory", "dir", d, "link", link, "to", real)
		}
		hide = append(hide, real)
	}
	files = append(files, st.KeyPath(), filepath.Join(st.DataDir, uiTokenFile), filepath.Join(st.DataDir, exposedMarker),
		st.RulesDir, st.ConfigPath)
	if create {
		// The marker of processes running a server without isolation
		// exists from the start, so that it is hidden as itself.
		if f, err := os.OpenFile(filepath.Join(st.DataDir, exposedMarker), os.O_RDWR|os.O_CREATE, 0o600); err == nil {
			f.Close()
		}
	}
	if st.Postgres {
		// The database is a server's; its checkpoint file and the
		// checkpoint's lock are beside the key. The lock is made now, so
		// that it is hidden as itself.
		checkpoint, lock := st.checkpointFiles()
		if create {
			if f, err := os.OpenFile(lock, os.O_RDWR|os.O_CREATE, 0o600); err == nil {
				f.Close()
			}
		}
		files = append(files, checkpoint, lock)
	} else {
		files = append(files, st.sqliteFiles(logger, create)...)
	}
	if st.Config.Audit.Retention > 0 {
		// The archives retention writes hold the records' bodies: their
		// directory is made now, so that it is hidden as itself.
		if create {
			if err := os.MkdirAll(st.archiveDir(), 0o700); err != nil {
				logger.Warn("cannot create the audit archives' directory", "dir", st.archiveDir(), "err", err)
			}
		}
		files = append(files, st.archiveDir())
	}
	elsewhere := map[string][]string{} // directory → guard's files in it
	linked := map[string]bool{}        // guard's files that are symbolic links
	for i := 0; i < len(files); i++ {
		f := files[i]
		if f == "" {
			continue
		}
		if real, err := PlacedPath(f); err == nil {
			f = real
		}
		if fi, err := os.Lstat(f); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			// The link's directory is hidden (below), and what it
			// names as a file of guard's of its own.
			linked[f] = true
			if real, err := realPath(f); err == nil {
				files = append(files, real)
			}
		}
		if slices.ContainsFunc(hide, func(d string) bool { return under(f, d) }) {
			continue
		}
		elsewhere[filepath.Dir(f)] = append(elsewhere[filepath.Dir(f)], f)
	}
	home, _ := os.UserHomeDir()
	if h := getenv("HOME"); h != "" {
		home = h
	}
	if real, err := realPath(home); err == nil {
		home = real
	}
	for dir, owned := range elsewhere {
		if onlyThese(dir, owned) {
			hide = append(hide, dir)
			continue
		}
		for _, f := range owned {
			if _, err := os.Lstat(f); err == nil && !linked[f] {
				hide = append(hide, f)
				continue
			}
			why := "it does not exist yet"
			if linked[f] {
				why = "it is a symbolic link, which a server could point elsewhere"
			}
			if under(home, dir) {
				logger.Error("a file of guard's cannot be hidden from servers: "+why+", and its directory is the home directory or above it; keep guard's files in a directory of their own", "file", f)
				continue
			}
			logger.Warn("guard's files share a directory with others; the whole directory is hidden from servers, since one of them cannot be hidden alone: "+why, "dir", dir, "file", f)
			hide = append(hide, dir)
			break
		}
	}
	if !create {
		hide = slices.DeleteFunc(hide, func(p string) bool { _, err := os.Lstat(p); return err != nil })
	}
	sort.Strings(hide)
	return slices.Compact(hide)
}

// replaceableLink returns the first symbolic link on the way to p whose
// directory this process (and so a server of its user) may write, or "":
// a server could replace that link, so that the next guard finds its
// files elsewhere.
func replaceableLink(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return ""
	}
	parts := strings.Split(abs, string(filepath.Separator))
	d := string(filepath.Separator)
	for _, part := range parts {
		if part == "" {
			continue
		}
		next := filepath.Join(d, part)
		fi, err := os.Lstat(next)
		if err != nil {
			return ""
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if writableDir(d) {
				return next
			}
			if next, err = filepath.EvalSymlinks(next); err != nil {
				return ""
			}
		}
		d = next
	}
	return ""
}

// onlyThese reports whether dir holds nothing but files of the list.
func onlyThese(dir string, files []string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if !slices.Contains(files, filepath.Join(dir, e.Name())) {
			return false
		}
	}
	return true
}

// globDir is the directory part of a glob before its first pattern
// character: where files it may match can be created.
func globDir(pat string) string {
	d := filepath.Dir(pat)
	for strings.ContainsAny(d, `*?[\`) {
		d = filepath.Dir(d)
	}
	return d
}

// under reports whether p is dir or below it.
func under(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// dirIdentity is a directory's device and inode: whether the directory at
// a path is still the one guard started with.
type dirIdentity struct{ dev, ino uint64 }

// fileIdentity tells a file from another put in its place: the inode
// number alone does not, since a removed file's number is soon reused, so
// the time its inode last changed (its creation, for a file nobody chmods)
// is part of it, in nanoseconds.
type fileIdentity struct {
	dirIdentity
	ctime int64
}

// identify returns the identity of the directory at path.
func identify(path string) (dirIdentity, error) {
	id, err := identifyFile(path)
	return id.dirIdentity, err
}

// configDirReplaced reports whether the directory at path is no longer the
// one whose identity was taken at start (was): someone moved it, or a
// directory above it, away and put another in its place. A changed
// configuration found there must not be applied without a person: it may
// have been written by a server that escaped isolation this way.
func configDirReplaced(path string, was dirIdentity) bool {
	now, err := identify(path)
	return err != nil || now != was
}

// sqliteFiles are an SQLite database's files, which the store makes beside
// it; with create, the lock files and the journal's directory are made
// now, so that they are hidden as themselves.
func (st *Settings) sqliteFiles(logger *slog.Logger, create bool) []string {
	db := st.DBPath
	files := []string{db, db + "-wal", db + "-shm", db + ".checkpoint", db + ".checkpoint.lock", db + ".lock", db + ".journal",
		db + ".decisions.lock", db + ".verify.lock", db + ".retention.lock"}
	if create {
		// So are the database's lock files, which the store makes when
		// it first needs them.
		for _, lock := range []string{db + ".checkpoint.lock", db + ".decisions.lock", db + ".verify.lock", db + ".retention.lock"} {
			if f, err := os.OpenFile(lock, os.O_RDWR|os.O_CREATE, 0o600); err == nil {
				f.Close()
			}
		}
		// So is the audit journal's directory (the database's Open makes
		// it too, perhaps later).
		if err := os.MkdirAll(db+".journal", 0o700); err != nil {
			logger.Warn("cannot create the audit journal's directory", "dir", db+".journal", "err", err)
		}
	}
	if _, err := os.Lstat(db + ".journals"); err == nil {
		// An earlier version's journals, until a writable open moves them in.
		files = append(files, db+".journals")
	}
	return files
}

// CheckIsolation says, for each configured stdio server, whether it would
// run isolated from guard's files, probing the sandbox once (it runs
// nothing); it says so on stderr too when a server would not, or would
// not be started.
func (m *Main) CheckIsolation(st *Settings) {
	if !sandbox.OSSupported {
		// Whatever the configuration names: the servers of clients that
		// guard wraps are not in it.
		fmt.Fprintf(m.Stdout, "\nisolation of stdio servers from guard's files: NOT AVAILABLE: %s\n", notOnThisOS)
		fmt.Fprintf(m.Stderr, "guard: WARNING: %s\n", notOnThisOS)
	}
	var names []string
	for name, srv := range st.Config.Servers {
		if len(srv.Command) > 0 {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return
	}
	sort.Strings(names)
	r := m.newIsolation(st, slog.New(slog.DiscardHandler), false).probe()
	fmt.Fprintln(m.Stdout, "\nisolation of stdio servers from guard's files:")
	for _, name := range names {
		srv := st.Config.Servers[name]
		switch {
		case srv.Sandbox == "off":
			fmt.Fprintf(m.Stdout, "  %s: OFF (sandbox: off): the server can reach guard's files\n", name)
			fmt.Fprintf(m.Stderr, "guard: WARNING: server %s is not isolated (sandbox: off): it can reach guard's files\n", name)
		case r.none != nil && srv.MustIsolate():
			fmt.Fprintf(m.Stdout, "  %s: REFUSED: sandbox: on, and this system cannot isolate servers: %v\n", name, r.none)
			fmt.Fprintf(m.Stderr, "guard: WARNING: server %s would not be started (sandbox: on): %v\n", name, r.none)
		case r.none != nil:
			fmt.Fprintf(m.Stdout, "  %s: NOT AVAILABLE: %v\n", name, r.none)
			fmt.Fprintf(m.Stderr, "guard: WARNING: server %s would run without isolation: %v\n", name, r.none)
		case r.failed != nil:
			fmt.Fprintf(m.Stdout, "  %s: REFUSED: guard's files cannot be hidden from it: %v\n", name, r.failed)
			fmt.Fprintf(m.Stderr, "guard: WARNING: server %s would not be started: it cannot be isolated from guard's files: %v\n", name, r.failed)
		default:
			fmt.Fprintf(m.Stdout, "  %s: in force (setup %v)\n", name, r.took.Round(10*time.Microsecond))
		}
	}
}
