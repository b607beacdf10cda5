package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
	"github.com/guard-mcp/guard/store/postgres"
	"github.com/jackc/pgx/v5/pgconn"
)

// IsPostgres reports whether a database name is a PostgreSQL URL
// (postgres:// or postgresql://) rather than an SQLite file's path.
func IsPostgres(name string) bool {
	return strings.HasPrefix(name, "postgres://") || strings.HasPrefix(name, "postgresql://")
}

// pgPendingMigration is PostgreSQL's migration that adds call_pending:
// the call index written after the records (pgindex.go).
const pgPendingMigration = 22

// pgCommitWait bounds an audit commit on PostgreSQL: past it the calls
// whose records it carried are refused (a server that does not answer is
// one that cannot record), and the next batch tries a new connection.
const pgCommitWait = 10 * time.Second

// openPostgres opens a PostgreSQL database (opts.Path is its URL) and
// applies the migrations. Records are acknowledged once committed there:
// there is no journal. The checkpoint key is never read from the
// database: every replica reads the same key from its own file.
func openPostgres(ctx context.Context, opts Options) (*DB, error) {
	name := guard.DisplayURL(opts.Path)
	if err := opts.pgFiles(); err != nil {
		return nil, fmt.Errorf("store: %s: %w", name, err)
	}
	opts.defaults()
	cfg, err := postgres.Config(opts.Path)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	if err := postgres.CheckSessionPooling(ctx, cfg); err != nil {
		return nil, fmt.Errorf("store: %s: %w", name, err)
	}
	if err := postgres.Migrate(ctx, cfg); err != nil {
		return nil, fmt.Errorf("store: %s: %w", name, err)
	}
	sqls := &postgres.Rebinder{}
	db := &DB{
		opts:     opts,
		pg:       true,
		aw:       postgres.OpenPool(cfg, postgres.LockAudit, sqls),
		w:        postgres.OpenPool(cfg, postgres.LockState, sqls),
		r:        postgres.OpenReaders(cfg, sqls),
		writable: true,
		stats:    newAuditStats(),
		deciding: make(chan struct{}, 1),
		auth:     newTailAuth(nil, opts.Logger),
		ing: ingestion{
			stop:     make(chan struct{}),
			closed:   make(chan struct{}),
			synced:   make(chan struct{}),
			work:     make(chan struct{}, 1),
			urgent:   make(chan struct{}, 1),
			syncWork: make(chan struct{}, 1),
			progress: make(chan struct{}),
			own:      map[string]bool{},
			index:    make(chan struct{}, 1),
			indexed:  make(chan struct{}),
		},
	}
	db.ing.db, db.ckpt.db = db, db
	db.aw.SetMaxOpenConns(2)
	// The call index's writers have a pool of their own: a connection
	// they leave idle is not the one the audit writer takes next.
	db.ix = postgres.OpenPool(cfg, 0, sqls)
	db.ix.SetMaxOpenConns(4)
	db.w.SetMaxOpenConns(8)
	db.r.SetMaxOpenConns(8)
	db.ing.room = sync.NewCond(&db.ing.jmu)
	close(db.ing.synced) // no journal to sync
	fail := func(err error) (*DB, error) {
		if db.ckpt.witness != nil {
			db.ckpt.witness.Close()
		}
		db.closeAll()
		return nil, fmt.Errorf("store: %s: %w", name, err)
	}
	db.schema.noteNewerSchema(ctx, db.r, db.opts.Logger, postgres.LatestMigration())
	if opts.Key != "" {
		db.signer, err = audit.SignerFromHex("audit key", opts.Key)
	} else {
		db.signer, err = postgres.Signer(ctx, db.r, db.opts.KeyPath)
	}
	if err != nil {
		return fail(err)
	}
	db.auth = newTailAuth(db.signer, opts.Logger)
	if len(opts.Witnesses) > 0 {
		if db.ckpt.witness, err = audit.NewWitnesses(opts.Witnesses, opts.SyslogSocket, opts.Logger, &db.stats.witness); err != nil {
			return fail(err)
		}
	}
	if db.ing.wc, err = newWriterConn(ctx, db.aw, db.auth); err != nil {
		return fail(err)
	}
	if err := db.ckpt.initMACs(ctx); err != nil {
		return fail(err)
	}
	if err := db.ing.commitRetrying(nil); errors.Is(err, errTreeAhead) {
		opts.Logger.Error("audit log", "err", err)
	} else if err != nil {
		return fail(err)
	}
	if err := db.CallIndex().fillCallIndex(ctx, false); err != nil {
		return fail(err)
	}
	db.ckpt.holder = guard.NewID()
	if db.ckpt.checkpointTurn(ctx) {
		db.ckpt.startMACs(ctx)
		if err := db.ckpt.writeCheckpoint(); err != nil {
			db.ckpt.logCheckpoint(err)
		}
	}
	db.listen = postgres.Listen(cfg, opts.Logger, pollEvery)
	db.ing.linger.Store(int64(indexLinger))
	go db.ing.indexer()
	go db.ing.ingester()
	return db, nil
}

// openPostgresReadOnly opens a PostgreSQL database for reading only: no
// migration, no key made, every transaction read-only, so that a command
// that reads (query, verify, export) changes nothing. A database guard
// never opened is an error, as an SQLite file that is not guard's is.
func openPostgresReadOnly(ctx context.Context, opts Options) (*DB, error) {
	name := guard.DisplayURL(opts.Path)
	if opts.KeyPath != "" {
		_ = opts.pgFiles() // with a key file, it only names the checkpoint file
	}
	opts.defaults()
	cfg, err := postgres.Config(opts.Path)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	r := postgres.OpenReaders(cfg, &postgres.Rebinder{})
	r.SetMaxOpenConns(4)
	var v sql.NullInt64
	if err := r.QueryRowContext(ctx, `SELECT max(version) FROM schema_migrations`).Scan(&v); err != nil {
		r.Close()
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == postgres.UndefinedTable {
			return nil, fmt.Errorf("store: %s is %w: %w", name, ErrNotGuardDatabase, err)
		}
		return nil, fmt.Errorf("store: %s: %w", name, err) // not reached, refused, ...
	}
	var sg *audit.Signer
	if opts.KeyPath != "" {
		if sg, err = audit.ReadSigner(opts.KeyPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			r.Close()
			return nil, fmt.Errorf("store: %w", err)
		}
	}
	db := &DB{opts: opts, pg: true, w: r, r: r, signer: sg, ing: ingestion{closed: make(chan struct{})}, stats: newAuditStats(), auth: newTailAuth(sg, opts.Logger),
		schema: schemaGaps{noRules: v.Int64 < approvalRulesMigration,
			noScope: v.Int64 < approvalScopeMigration, noProcess: v.Int64 < processMigration, noUser: v.Int64 < userMigration,
			noVia: v.Int64 < requiredViaMigration, noMAC: v.Int64 < macMigration, noPending: v.Int64 < pgPendingMigration}}
	db.ing.db, db.ckpt.db = db, db
	return db, nil
}

// pgFiles checks that a PostgreSQL database's options name its
// checkpoint key, and fills in its checkpoint file: each replica's own,
// audit.checkpoint beside the key.
func (o *Options) pgFiles() error {
	if o.KeyPath == "" && o.Key == "" {
		return errors.New("a PostgreSQL database needs the checkpoint key's file (audit.key_file), the same for every replica")
	}
	if o.CheckpointPath == "" {
		if o.KeyPath == "" {
			return errors.New("with the checkpoint key given as text, the checkpoint file's path must be given too")
		}
		o.CheckpointPath = filepath.Join(filepath.Dir(o.KeyPath), "audit.checkpoint")
	}
	return nil
}

// tableExists is a statement that counts the tables (or views) named name,
// on PostgreSQL when pg, else on SQLite: 1 or 0.
func tableExists(pg bool, name string) string {
	if pg {
		return "SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = current_schema() AND tablename = '" + name + "'"
	}
	return "SELECT count(*) FROM sqlite_master WHERE name = '" + name + "'"
}

// indexedBy is SQLite's INDEXED BY clause, which makes a statement use an
// index (or fail); PostgreSQL's planner (pg) has no such clause.
func indexedBy(pg bool, index string) string {
	if pg {
		return ""
	}
	return " INDEXED BY " + index
}

// Replicas are upgraded one at a time: the first of a new release applies
// its migrations, and the others, of the release before, go on with a
// schema newer than theirs. Every migration keeps what the release before
// reads and writes (it adds; what it replaces goes a release later), so
// that works; noteNewerSchema, reading the database with r, says so in
// log, so that a replica left behind is seen, and keeps the newer version.
func (g *schemaGaps) noteNewerSchema(ctx context.Context, r *sql.DB, log *slog.Logger, latest int64) {
	var v sql.NullInt64
	if err := r.QueryRowContext(ctx, `SELECT max(version) FROM schema_migrations`).Scan(&v); err != nil || v.Int64 <= latest {
		return
	}
	g.newerSchema = v.Int64
	log.Warn("the database's schema is newer than this guard's: another replica runs a newer release; this one goes on with the schema of the release before, and should be upgraded too",
		"schema", v.Int64, "this_release", latest)
}

// pgLock takes the session advisory lock key on a connection of its own,
// held until unlock: waiting for it, or, with try, only if no one holds
// it (ok false then).
func (db *DB) pgLock(ctx context.Context, key int64, try bool) (unlock func(), ok bool, err error) {
	return postgres.Lock(ctx, db.r, key, try)
}

// tryLock takes the lock of a job that one process on the database runs
// at a time (suffix names it: a file lock beside an SQLite database, an
// advisory lock of a PostgreSQL one), if no one holds it.
func (db *DB) tryLock(ctx context.Context, suffix string) (unlock func(), ok bool, err error) {
	if !db.pg {
		return tryLockFile(db.opts.Path + suffix)
	}
	unlock, ok, err = db.pgLock(ctx, postgres.AdvisoryKey("guard: "+suffix), true)
	if err != nil {
		return nil, false, fmt.Errorf("lock %s: %w", suffix, err)
	}
	return unlock, ok, nil
}
