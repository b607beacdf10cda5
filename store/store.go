// Package store keeps guard's state in SQLite (modernc.org/sqlite): the
// append-only, hash-chained audit log with its signed checkpoint, the tool
// catalog, and held calls. Several guard processes share one database: the
// chain's tail is read inside every write transaction, never cached.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/migrations"
	_ "modernc.org/sqlite" // the database/sql driver "sqlite"
)

// Options configure Open.
type Options struct {
	// Path is the database file; its directory is created (0700).
	Path string
	// Durability is "full" (the default: every commit is fsync'd) or
	// "normal" (SQLite's WAL default: commits survive a crash of guard,
	// not a power cut).
	Durability string
	// KeyPath is the ed25519 key that signs checkpoints, kept outside the
	// database (default: audit.key beside it, created 0600).
	KeyPath string
	// CheckpointPath is the signed checkpoint (default: Path+".checkpoint").
	CheckpointPath string
	// CheckpointEvery is the least time between two checkpoints written
	// after commits (default 1s). Close always writes one.
	CheckpointEvery time.Duration
	Logger          *slog.Logger
	Now             func() time.Time
}

// DB is an open guard database.
type DB struct {
	opts     Options
	aw       *sql.DB // the audit writer's own connection
	w        *sql.DB // the connection of every other write
	r        *sql.DB // readers
	j        *journal
	wake     chan struct{}
	ingestMu sync.Mutex // the writer connection is the ingester's
	done     chan struct{}
	closed   chan struct{}
	once     sync.Once
	signer   *signer
	wc       *writerConn // the audit writer goroutine's connection and statements

	lastCheckpoint time.Time   // writer goroutine only
	dirty          atomic.Bool // records were ingested since the last checkpoint
}

type appendReq struct {
	recs  []*guard.Record
	done  chan error
	start time.Time
}

// timeLayout is how times are stored: RFC 3339, UTC, milliseconds; it
// sorts as text.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(timeLayout)
}

func parseTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}

// Open opens or creates the database at opts.Path and applies migrations.
func Open(ctx context.Context, opts Options) (*DB, error) {
	if opts.Path == "" {
		return nil, errors.New("store: no database path")
	}
	if opts.Durability == "" {
		opts.Durability = "full"
	}
	if opts.Durability != "full" && opts.Durability != "normal" {
		return nil, fmt.Errorf("store: durability %q: want full or normal", opts.Durability)
	}
	if opts.KeyPath == "" {
		opts.KeyPath = filepath.Join(filepath.Dir(opts.Path), "audit.key")
	}
	if opts.CheckpointPath == "" {
		opts.CheckpointPath = opts.Path + ".checkpoint"
	}
	if opts.CheckpointEvery <= 0 {
		opts.CheckpointEvery = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if err := os.MkdirAll(filepath.Dir(opts.Path), 0o700); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	// Processes that open a new database together would race to create it,
	// switch it to WAL and migrate it (SQLite answers some of that with
	// "locked" or I/O errors rather than waiting): they take turns.
	unlock, err := lockFile(opts.Path + ".lock")
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	defer unlock()
	// The database holds the complete arguments of held calls: only its
	// owner may read it (SQLite gives its -wal and -shm files the same mode).
	if f, err := os.OpenFile(opts.Path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
		f.Close()
	}
	sync := "FULL"
	if opts.Durability == "normal" {
		sync = "NORMAL"
	}
	dsn := "file:" + opts.Path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(" + sync + ")&_pragma=foreign_keys(1)&_txlock=immediate"
	w, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", opts.Path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	if err := w.PingContext(ctx); err != nil {
		w.Close()
		return nil, fmt.Errorf("store: open %s: %w", opts.Path, err)
	}
	if err := migrate(ctx, w); err != nil {
		w.Close()
		return nil, fmt.Errorf("store: %s: %w", opts.Path, err)
	}
	r, err := sql.Open("sqlite", "file:"+opts.Path+"?_pragma=busy_timeout(10000)&_pragma=query_only(1)")
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("store: open %s: %w", opts.Path, err)
	}
	r.SetMaxOpenConns(4)
	// The ingester's commits need no fsync of their own: every record it
	// moves is still in a journal, fsync'd when durability is full, and a
	// journal is removed only after a full WAL checkpoint (dropJournal).
	aw, err := sql.Open("sqlite", strings.Replace(dsn, "synchronous(FULL)", "synchronous(NORMAL)", 1))
	if err != nil {
		w.Close()
		r.Close()
		return nil, fmt.Errorf("store: open %s: %w", opts.Path, err)
	}
	aw.SetMaxOpenConns(1)
	sg, err := loadSigner(opts.KeyPath)
	if err != nil {
		w.Close()
		r.Close()
		aw.Close()
		return nil, fmt.Errorf("store: %w", err)
	}
	wc, err := newWriterConn(ctx, aw)
	if err != nil {
		w.Close()
		r.Close()
		aw.Close()
		return nil, fmt.Errorf("store: %s: %w", opts.Path, err)
	}
	db := &DB{
		opts:   opts,
		aw:     aw,
		wc:     wc,
		w:      w,
		r:      r,
		wake:   make(chan struct{}, 1),
		done:   make(chan struct{}),
		closed: make(chan struct{}),
		signer: sg,
	}
	if db.j, err = openJournal(opts.Path, opts.Durability == "full"); err != nil {
		db.closeAll()
		return nil, fmt.Errorf("store: %w", err)
	}
	if err := db.recoverJournals(); err != nil {
		opts.Logger.Error("journals of earlier processes not ingested", "err", err)
	}
	if db.dirty.Load() {
		if err := db.writeCheckpoint(); err != nil {
			opts.Logger.Error("audit checkpoint", "err", err)
		}
	}
	go db.ingester()
	return db, nil
}

// migrate applies the migrations not yet applied, each in a transaction.
// Several processes may open a new database at once: the IMMEDIATE
// transaction serialises them, and each checks again inside it.
func migrate(ctx context.Context, w *sql.DB) error {
	if _, err := w.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied TEXT NOT NULL)`); err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	entries, err := fs.ReadDir(migrations.FS, ".")
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".sql") {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	for _, name := range names {
		v, err := strconv.Atoi(strings.SplitN(name, "_", 2)[0])
		if err != nil {
			return fmt.Errorf("migration %s: the name must start with its number", name)
		}
		body, err := fs.ReadFile(migrations.FS, name)
		if err != nil {
			return fmt.Errorf("migration %s: %w", name, err)
		}
		if err := applyOne(ctx, w, v, name, string(body)); err != nil {
			return err
		}
	}
	return nil
}

func applyOne(ctx context.Context, w *sql.DB, v int, name, body string) error {
	tx, err := w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migration %s: %w", name, err)
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations WHERE version = ?`, v).Scan(&n); err != nil {
		return fmt.Errorf("migration %s: %w", name, err)
	}
	if n > 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, body); err != nil {
		return fmt.Errorf("migration %s: %w", name, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied) VALUES (?, ?, ?)`, v, name, fmtTime(time.Now())); err != nil {
		return fmt.Errorf("migration %s: %w", name, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migration %s: %w", name, err)
	}
	return nil
}

// lockFile takes an exclusive advisory lock on path, waiting for it.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// Close writes everything queued, a last checkpoint, and closes the
// database.
func (db *DB) Close() error {
	var err error
	db.once.Do(func() {
		close(db.done)
		<-db.closed
		err = db.closeAll()
	})
	return err
}

func (db *DB) closeAll() error {
	return errors.Join(db.wc.close(), db.aw.Close(), db.w.Close(), db.r.Close())
}

// Path is the database file.
func (db *DB) Path() string { return db.opts.Path }
