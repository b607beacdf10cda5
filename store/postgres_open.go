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
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
	"github.com/guard-mcp/guard/migrations"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

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
	cfg, err := pgConfig(opts.Path)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	if err := checkSessionPooling(ctx, cfg); err != nil {
		return nil, fmt.Errorf("store: %s: %w", name, err)
	}
	if err := migratePostgres(ctx, cfg); err != nil {
		return nil, fmt.Errorf("store: %s: %w", name, err)
	}
	sqls := &rebinder{}
	db := &DB{
		opts:     opts,
		pg:       true,
		aw:       openPool(cfg, lockAudit, sqls),
		w:        openPool(cfg, lockState, sqls),
		r:        openReaders(cfg, sqls),
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
		},
	}
	db.ing.db, db.ckpt.db = db, db
	db.aw.SetMaxOpenConns(2)
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
	db.schema.noteNewerSchema(ctx, db.r, db.opts.Logger, latestPostgresMigration())
	if opts.Key != "" {
		db.signer, err = audit.SignerFromHex("audit key", opts.Key)
	} else {
		db.signer, err = pgSigner(ctx, db.r, db.opts.KeyPath)
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
	db.listen = startListener(cfg, opts.Logger)
	go db.ing.ingester()
	return db, nil
}

// undefinedTable is PostgreSQL's error code for a table that does not
// exist (SQLSTATE 42P01).
const undefinedTable = "42P01"

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
	cfg, err := pgConfig(opts.Path)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	r := openReaders(cfg, &rebinder{})
	r.SetMaxOpenConns(4)
	var v sql.NullInt64
	if err := r.QueryRowContext(ctx, `SELECT max(version) FROM schema_migrations`).Scan(&v); err != nil {
		r.Close()
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == undefinedTable {
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
			noVia: v.Int64 < requiredViaMigration, noMAC: v.Int64 < macMigration}}
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

// pgSigner reads the checkpoint key from its file. A missing file is
// created only for a log that has no checkpoint yet (the first replica of
// a new database): a replica that made a key of its own for a log others
// sign would fork it. A key that is not the one the log's checkpoints are
// signed with is refused. keyPath is the key's file; r reads the log.
func pgSigner(ctx context.Context, r *sql.DB, keyPath string) (*audit.Signer, error) {
	var origin sql.NullString
	err := r.QueryRowContext(ctx, `SELECT note FROM checkpoints ORDER BY size DESC LIMIT 1`).Scan(&origin)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("checkpoints: %w", err)
	}
	var s *audit.Signer
	if origin.Valid {
		s, err = audit.ReadSigner(keyPath)
		if err != nil {
			return nil, fmt.Errorf("%w: every replica needs the key the log's checkpoints are signed with", err)
		}
	} else if s, err = audit.LoadSigner(keyPath); err != nil {
		return nil, err
	}
	if origin.Valid {
		logOrigin, _, _ := strings.Cut(origin.String, "\n")
		if mine := s.Verifier().Name(); logOrigin != mine {
			return nil, fmt.Errorf("checkpoint key %s is not the log's: its checkpoints are signed as %s, this key signs as %s (every replica needs the same key)",
				keyPath, logOrigin, mine)
		}
	}
	return s, nil
}

// checkSessionPooling refuses a pooler that hands a client's statements
// to whichever server process is free (PgBouncer's transaction or
// statement pooling): guard's advisory locks and LISTEN belong to a
// server session. Two connections of guard's, one after the other, are
// served by two server processes in session mode; in transaction mode
// the pooler gives the second the process the first just left.
func checkSessionPooling(ctx context.Context, cfg *pgx.ConnConfig) error {
	var pids [2]uint32
	var conns []*pgx.Conn
	defer func() {
		for _, c := range conns {
			c.Close(context.WithoutCancel(ctx))
		}
	}()
	// No prepared statement: a pooler that shares server processes would
	// hand the second connection the first one's, and fail otherwise.
	cfg = cfg.Copy()
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	for i := range pids {
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		conns = append(conns, c)
		if err := c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pids[i]); err != nil {
			return fmt.Errorf("connect: %w", err)
		}
	}
	if pids[0] == pids[1] {
		return errors.New("two connections share one server process: the database is reached through a pooler in transaction or statement mode (PgBouncer's pool_mode), which breaks the advisory locks and LISTEN guard relies on; use session pooling or connect directly")
	}
	return nil
}

// migratePostgres applies the PostgreSQL migrations not yet applied, each
// in a transaction, under an advisory lock that replicas starting at once
// take in turn.
func migratePostgres(ctx context.Context, cfg *pgx.ConnConfig) error {
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	if _, err := c.Exec(ctx, "SELECT pg_advisory_lock($1)", lockMigrate); err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	defer c.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", lockMigrate)
	if _, err := c.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied TEXT NOT NULL)`); err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	mfs := migrations.Postgres()
	names, err := migrationNames(mfs)
	if err != nil {
		return err
	}
	for _, m := range names {
		body, err := fs.ReadFile(mfs, m.name)
		if err != nil {
			return fmt.Errorf("migration %s: %w", m.name, err)
		}
		err = pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM schema_migrations WHERE version = $1`, m.version).Scan(&n); err != nil || n > 0 {
				return err
			}
			if _, err := tx.Exec(ctx, string(body)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name, applied) VALUES ($1, $2, $3)`, m.version, m.name, fmtTime(time.Now()))
			return err
		})
		if err != nil {
			return fmt.Errorf("migration %s: %w", m.name, err)
		}
	}
	return nil
}

// migration is one migration file.
type migration struct {
	version int
	name    string
}

// migrationNames lists a set's migrations in order.
func migrationNames(mfs fs.FS) ([]migration, error) {
	entries, err := fs.ReadDir(mfs, ".")
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	var out []migration
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		v, err := strconv.Atoi(strings.SplitN(e.Name(), "_", 2)[0])
		if err != nil {
			return nil, fmt.Errorf("migration %s: the name must start with its number", e.Name())
		}
		out = append(out, migration{v, e.Name()})
	}
	slices.SortFunc(out, func(a, b migration) int { return a.version - b.version })
	return out, nil
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

// latestPostgresMigration is the version of the last embedded PostgreSQL
// migration.
func latestPostgresMigration() int64 {
	names, _ := migrationNames(migrations.Postgres())
	if len(names) == 0 {
		return 0
	}
	return int64(names[len(names)-1].version)
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
