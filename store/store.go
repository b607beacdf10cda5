// Package store keeps guard's state in SQLite (modernc.org/sqlite): the
// append-only, hash-chained audit log with its signed checkpoint, the tool
// catalog, and held calls. Records become durable in a journal of the
// process's own before they reach the database (the journal's format and
// files are package store/sqlite's; journal.go and writer.go move them
// in); readers wait for the journals to be moved in. Several guard processes
// share one database: the chain's tail is found inside every write
// transaction, and a writer takes the tail it committed last only while
// SQLite's data version shows that no one else has committed since.
//
// A postgres:// name opens a PostgreSQL database instead (postgres_open.go,
// and package store/postgres below it), which several replicas of guard
// serve share: records are acknowledged once committed there, and each
// replica hears of the others' changes to held calls, tool reviews and
// configuration changes as they commit (LISTEN/NOTIFY, postgres.Listener),
// where processes sharing an SQLite file read it again every few
// milliseconds.
//
// What a batch of records becomes (their chain hashes, MACs, Merkle tree
// hashes and call index rows) is worked out by package audit, the same
// for both engines; each engine only writes it (writer.go; pgwriter.go
// with package store/postgres's statements).
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
	"github.com/guard-mcp/guard/internal/filelock"
	"github.com/guard-mcp/guard/store/postgres"
	"github.com/guard-mcp/guard/store/sqlite"
	_ "modernc.org/sqlite" // the database/sql driver "sqlite"
)

// Options configure Open.
type Options struct {
	// Path is the database file; its directory is created (0700). A
	// postgres:// or postgresql:// URL opens a PostgreSQL database instead
	// (postgres_open.go).
	Path string
	// Durability is "full" (the default: every append is fsync'd in the
	// journal before it is acknowledged) or "normal" (an append is
	// written to the journal: it survives a crash of guard, not a power
	// cut).
	Durability string
	// KeyPath is the ed25519 key that signs checkpoints, kept outside the
	// database (default: audit.key beside it, created 0600). On
	// PostgreSQL it must be given (or Key), the same for every replica.
	KeyPath string
	// Key is the checkpoint key itself (a hex ed25519 seed), in place of
	// KeyPath's file: from the environment, say.
	Key string
	// CheckpointPath is the signed checkpoint (default: Path+".checkpoint";
	// on PostgreSQL, each replica's own copy, audit.checkpoint beside
	// KeyPath).
	CheckpointPath string
	// CheckpointEvery is the least time between two checkpoints written
	// after commits (default 1s). Close always writes one.
	CheckpointEvery time.Duration
	// Witnesses are where each new checkpoint is also sent (audit.NewWitnesses):
	// file:///PATH, syslog, or an http(s) URL.
	Witnesses []string
	// SyslogSocket is the local syslog socket the syslog witness writes
	// to ("": the system's, /dev/log).
	SyslogSocket string
	// BusyWait is how long the audit ingester waits while other
	// processes hold the database's write lock before new appends are
	// refused until it can commit (default 2m).
	BusyWait time.Duration
	Logger   *slog.Logger
	Now      func() time.Time
}

// defaults fills in the options both engines default alike.
func (o *Options) defaults() {
	if o.CheckpointEvery <= 0 {
		o.CheckpointEvery = time.Second
	}
	if o.BusyWait <= 0 {
		o.BusyWait = 2 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// DB is an open guard database.
type DB struct {
	opts   Options
	aw     *sql.DB       // the audit writer's own connection (nil when read-only)
	ix     *sql.DB       // the call index's writers' (PostgreSQL, pgindex.go; nil when read-only)
	w      *sql.DB       // the connection of every other write (readers when read-only)
	r      *sql.DB       // readers
	signer *audit.Signer // nil when read-only and there is no key
	hold   *sql.Conn     // keeps the in-memory stand-in of a missing database (openEmpty)

	pg bool // a PostgreSQL database: no journal; records are acknowledged once committed
	// listen hears of other replicas' changes on PostgreSQL (postgres.Listener);
	// nil on SQLite.
	listen *postgres.Listener
	// deciding holds a value while a decision of this process holds or
	// asks for the decisions lock on PostgreSQL (lockDecisions);
	// lockWaiters counts the decisions waiting for their turn.
	deciding    chan struct{}
	lockWaiters atomic.Int32
	writable    bool // false when read-only: appends are refused
	once        sync.Once
	stats       *auditStats
	auth        *tailAuth // the records' MACs (mac.go)

	ing    ingestion       // the journal and the ingester (writer.go, journal.go)
	ckpt   checkpointState // this process's checkpoints (checkpoint.go)
	schema schemaGaps      // what a read-only open found missing
}

// ingestion is how appends reach the audit log: the journal in front of
// SQLite, the pending appends, and the ingester that commits them in
// batches.
type ingestion struct {
	db      *DB           // the database the appends go to
	closeMu sync.RWMutex  // held by AppendAsync while it appends
	closing bool          // set by Close: appends are refused
	stop    chan struct{} // closed by Close: the ingester and syncer finish
	closed  chan struct{} // the ingester has ended
	synced  chan struct{} // the syncer has ended (durability full)

	// The call index's writer on PostgreSQL (pgindex.go): index is
	// signalled once a batch that touched calls is committed; indexed is
	// closed once the indexer has ended. noIndex, set by tests, leaves
	// the batches unindexed, as a writer that stops between the two
	// transactions does. linger, in nanoseconds, is how long the indexer
	// lets batches gather (indexLinger; tests lengthen it).
	index   chan struct{}
	indexed chan struct{}
	noIndex atomic.Bool
	linger  atomic.Int64

	// The journal (journal.go, writer.go). jmu is held to write an
	// append's frames and to hand appends on, never across a wait.
	jmu        sync.Mutex
	room       *sync.Cond         // on jmu: the backlog went down, or the ingester failed
	seg        *sqlite.Segment    // where appends go
	appended   int64              // appends written to the journal
	unsynced   []*appendReq       // durability full: written, not yet synced
	syncing    bool               // durability full: a sync is under way
	pend       []*appendReq       // durable, not yet in the database, in order
	frames     sync.Pool          // *appendFrames, to build an append's frames in
	jmac       *sqlite.FrameMACer // under jmu: seals the frames appended (journalauth.go)
	work       chan struct{}      // there are appends pending
	urgent     chan struct{}      // ingest now, without lingering
	syncWork   chan struct{}      // there are appends to sync
	segs       []*sqlite.Segment  // the ingester's: segments not yet removed, oldest first
	own        map[string]bool    // under jmu: the paths of this DB's segments, which readers do not wait for
	settled    atomic.Int64       // appends in the database (or refused)
	doubts     []*doubt           // the ingester's: batches whose commit is in doubt (pgdoubt.go)
	doubtAsked time.Time          // the ingester's: when the database was last asked about them
	failure    atomic.Pointer[error]
	writes     writability // whether appends succeed (writable.go)
	// unmoved are the ingester's: journals of processes that stopped
	// that it could not move in, and when it last tried.
	unmoved  map[string]time.Time
	progMu   sync.Mutex
	progress chan struct{} // closed and replaced after every batch ingested

	// commitMu is held while a batch is committed. It guards wc.
	commitMu sync.Mutex
	fsync    bool        // durability full: the journal is fsync'd, and the database's files before a journal goes
	wc       *writerConn // the ingester's connection and statements; nil after a failure until the next batch
}

// checkpointState is what this process knows of the log's signed checkpoints.
type checkpointState struct {
	db             *DB              // the database whose log they sign
	holder         string           // this process's name for the leases it takes
	signedSize     atomic.Int64     // the size of the last checkpoint this process signed or found kept
	lastTurn       atomic.Int64     // unix nanoseconds: when this process last sought the checkpoint lease
	lastCheckpoint atomic.Int64     // unix nanoseconds
	dirty          atomic.Bool      // records were committed since the last checkpoint
	eager          atomic.Bool      // the turn taken at once for this process's first records was taken
	refusedLogged  atomic.Bool      // a refused checkpoint was logged as an error
	witness        *audit.Witnesses // where each new checkpoint is also sent; nil: nowhere

	// lastSigned is the last checkpoint this process signed: the next
	// must extend it.
	lastSigned atomic.Pointer[audit.Checkpoint]
}

// schemaGaps are the columns and the migrations a database opened
// read-only lacks, or the newer schema it has.
type schemaGaps struct {
	// newerSchema is the database's schema version when a newer release
	// migrated it (noteNewerSchema), else 0.
	newerSchema int64
	noPruned    bool // read-only, before the retention migration: records have no pruned column
	noRules     bool // read-only, before the approval rules migration: approvals have no caller, approvers nor reviews
	noScope     bool // read-only, before the approval scope migration: approvals have no scope
	noProcess   bool // read-only, before the process migration: approvals name no process
	noVia       bool // read-only, before the required_via migration: approvals require no way of verifying
	noUser      bool // read-only, before the user migration: records and calls have no user columns
	noMAC       bool // read-only, before the MAC migration: records have no mac column
	noPending   bool // read-only PostgreSQL, before the call_pending migration: the index is written with the records
}

// fmtTime is how times are stored (audit.FormatTime).
func fmtTime(t time.Time) string { return audit.FormatTime(t) }

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
	if IsPostgres(opts.Path) {
		return openPostgres(ctx, opts)
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
	opts.defaults()
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
	syncMode := "FULL"
	if opts.Durability == "normal" {
		syncMode = "NORMAL"
	}
	// SQLite waits for other processes' locks up to its busy timeout; the
	// audit writer retries after it up to BusyWait.
	busy := min(10*time.Second, opts.BusyWait).Milliseconds()
	dsn := func(syncMode string) string {
		return "file:" + opts.Path + "?_pragma=busy_timeout(" + strconv.FormatInt(busy, 10) + ")&_pragma=journal_mode(WAL)&_pragma=synchronous(" + syncMode + ")&_pragma=foreign_keys(1)&_txlock=immediate"
	}
	w, err := sql.Open("sqlite", dsn(syncMode))
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
	r, err := sql.Open("sqlite", "file:"+opts.Path+"?_pragma=busy_timeout(10000)&_pragma=query_only(1)")
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("store: open %s: %w", opts.Path, err)
	}
	r.SetMaxOpenConns(4)
	// The ingester's commits are not fsync'd: the journal holds the
	// durable copy of their records until the database's files are
	// synced, before a segment is removed (DB.rotate).
	awSync := "NORMAL"
	if sqliteDirect {
		awSync = syncMode // no journal: the commit is what is durable
	}
	aw, err := sql.Open("sqlite", dsn(awSync))
	if err != nil {
		w.Close()
		r.Close()
		return nil, fmt.Errorf("store: open %s: %w", opts.Path, err)
	}
	aw.SetMaxOpenConns(1)
	aw.SetMaxIdleConns(1)
	aw.SetConnMaxLifetime(0)
	db := &DB{
		opts:     opts,
		aw:       aw,
		w:        w,
		r:        r,
		writable: true,
		stats:    newAuditStats(),
		auth:     newTailAuth(nil, opts.Logger),
		ing: ingestion{
			fsync:    opts.Durability == "full",
			stop:     make(chan struct{}),
			closed:   make(chan struct{}),
			synced:   make(chan struct{}),
			work:     make(chan struct{}, 1),
			urgent:   make(chan struct{}, 1),
			syncWork: make(chan struct{}, 1),
			progress: make(chan struct{}),
			unmoved:  map[string]time.Time{},
		},
	}
	db.ing.db, db.ckpt.db = db, db
	db.ing.room = sync.NewCond(&db.ing.jmu)
	db.ing.frames.New = func() any { return new(sqlite.AppendFrames) }
	fail := func(err error) (*DB, error) {
		if db.ckpt.witness != nil {
			db.ckpt.witness.Close()
		}
		db.closeAll()
		return nil, fmt.Errorf("store: %s: %w", opts.Path, err)
	}
	// The key first: the records of an earlier version's journals get
	// their MACs as they are moved in (upgrade).
	if db.signer, err = audit.LoadSigner(opts.KeyPath); err != nil {
		return fail(err)
	}
	db.auth = newTailAuth(db.signer, opts.Logger)
	db.ing.jmac = sqlite.NewFrameMACer(db.auth.jkey)
	if err := db.upgrade(ctx); err != nil {
		return fail(err)
	}
	db.schema.noteNewerSchema(ctx, db.r, db.opts.Logger, sqlite.LatestMigration())
	if len(opts.Witnesses) > 0 {
		if db.ckpt.witness, err = audit.NewWitnesses(opts.Witnesses, opts.SyslogSocket, opts.Logger, &db.stats.witness); err != nil {
			return fail(err)
		}
	}
	if db.ing.wc, err = newWriterConn(ctx, aw, db.auth); err != nil {
		return fail(err)
	}
	if err := db.ckpt.initMACs(ctx); err != nil {
		return fail(err)
	}
	// The tree over records an earlier version appended is built now
	// (a transaction that appends nothing), not in the first call's.
	if err := db.ing.commitRetrying(nil); errors.Is(err, errTreeAhead) {
		// Records were removed from the log's end: appends are refused
		// (the ingester fails the same way) and verify says why.
		opts.Logger.Error("audit log", "err", err)
	} else if err != nil {
		return fail(err)
	}
	// Before journals left by processes that stopped are moved in: the
	// index is filled only while it is empty.
	if err := db.CallIndex().fillCallIndex(ctx, false); err != nil {
		return fail(err)
	}
	if conn, err := w.Conn(ctx); err == nil {
		_ = sqlite.PersistWAL(ctx, conn)
		conn.Close()
	}
	if err := os.MkdirAll(sqlite.JournalsDir(opts.Path), 0o700); err != nil {
		return fail(fmt.Errorf("journal: %w", err))
	}
	if err := db.ing.recoverJournals(ctx); err != nil {
		opts.Logger.Error("records of journals left by processes that stopped could not all be moved into the database; they stay for the next start", "err", err)
	}
	if db.ing.seg, err = sqlite.NewSegment(sqlite.JournalsDir(opts.Path), db.ing.fsync); err != nil {
		return fail(err)
	}
	db.ing.segs = []*sqlite.Segment{db.ing.seg}
	db.ing.own = map[string]bool{db.ing.seg.Path: true}
	// A checkpoint of the log as it is (the file may be older, or of an
	// earlier version's form), by the process whose turn it is; nothing
	// is kept twice.
	db.ckpt.holder = guard.NewID()
	if db.ckpt.checkpointTurn(ctx) {
		db.ckpt.startMACs(ctx)
		if err := db.ckpt.writeCheckpoint(); err != nil {
			db.ckpt.logCheckpoint(err)
		}
	}
	go db.ing.ingester()
	if db.ing.fsync {
		go db.ing.syncer()
	} else {
		close(db.ing.synced)
	}
	return db, nil
}

// retentionMigration is the migration that adds the records' pruned
// column (retention.go).
const retentionMigration = 12

// approvalRulesMigration is the migration that adds a held call's caller,
// its approvers and the reviews of it.
const approvalRulesMigration = 15

// approvalScopeMigration is the migration that adds an approval's scope
// and when its session ended.
const approvalScopeMigration = 17

// userMigration is the migration that adds the records' and the calls'
// user columns: the caller the front authenticated.
const userMigration = 18

// processMigration is the migration that adds the process that held a
// call, and what a process's beats say of its liveness.
const processMigration = 19

// requiredViaMigration is the migration that adds how whoever decides on
// a held call must have been verified.
const requiredViaMigration = 20

// journalsDropped is the migration that drops the journals table of
// earlier versions: it runs once their journals are in the database.
const journalsDropped = 5

// upgrade applies the migrations, moving what earlier versions left in
// their journals into the database before the migration that drops their
// offsets (which alone waits: the import needs the records table as the
// other migrations leave it).
func (db *DB) upgrade(ctx context.Context) error {
	if err := sqlite.Migrate(ctx, db.w, journalsDropped); err != nil {
		return err
	}
	done, err := db.journals().importJournals(ctx)
	if err != nil {
		db.opts.Logger.Error("records of earlier versions' journals not moved into the database; they stay for the next start", "err", err)
	}
	if !done {
		return nil // the journals table stays until they are
	}
	return sqlite.Migrate(ctx, db.w, 0)
}

// lockFile takes an exclusive advisory lock on path, waiting for it.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := filelock.Lock(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		_ = filelock.Unlock(f)
		f.Close()
	}, nil
}

// Close moves everything appended into the database, writes a last
// checkpoint, and closes the database. Appends after Close are refused.
func (db *DB) Close() error {
	var err error
	db.once.Do(func() {
		if db.writable {
			db.ing.closeMu.Lock()
			db.ing.closing = true
			db.ing.closeMu.Unlock()
			close(db.ing.stop)
			<-db.ing.closed
			if db.ing.indexed != nil {
				<-db.ing.indexed // the call index's rows of the last batches
			}
			if db.ckpt.witness != nil {
				db.ckpt.witness.Close()
			}
			db.opts.Logger.Info("audit log closed", "batches", db.stats.batches.Count(),
				"records", int64(db.stats.batches.Sum()), "peak_backlog", db.Writing().PeakBacklog())
		}
		err = db.closeAll()
	})
	return err
}

// closeAll closes the connections, the audit writer's last: it keeps the
// -wal and -shm files for read-only openers (sqlite.PersistWAL).
func (db *DB) closeAll() error {
	if db.listen != nil {
		db.listen.Close()
	}
	var errs []error
	if db.hold != nil {
		errs = append(errs, db.hold.Close())
	}
	if db.r != nil && db.r != db.w {
		errs = append(errs, db.r.Close())
	}
	if db.w != nil {
		errs = append(errs, db.w.Close())
	}
	if db.ing.wc != nil {
		errs = append(errs, db.ing.wc.close())
	}
	if db.aw != nil {
		errs = append(errs, db.aw.Close())
	}
	if db.ix != nil {
		errs = append(errs, db.ix.Close())
	}
	return errors.Join(errs...)
}

// Path is the database file.
func (db *DB) Path() string { return db.opts.Path }

// ErrNotGuardDatabase is wrapped by OpenReadOnly's error for a database
// that has no guard schema: one guard never opened (on PostgreSQL, a new
// database), or another program's.
var ErrNotGuardDatabase = errors.New("not a guard database (or it was never opened by guard)")

// ErrSchemaTooOld is returned by OpenReadOnly for a database whose schema
// predates what this version reads: a writable open upgrades it.
var ErrSchemaTooOld = errors.New("the database's schema is older than this version of guard reads")

// readableFrom is the oldest schema version OpenReadOnly reads: the
// migrations after it (the configuration changes that wait for a person,
// the journals table dropped) change nothing the read-only commands read.
const readableFrom = 3

// OpenReadOnly opens an existing database for reading only: it creates,
// migrates and writes nothing (no directory, no key, no lock file; SQLite
// opens the file with mode=ro), so that queries and verification work on a
// full disk or a read-only copy. Appends are refused. The checkpoint key is
// read if it exists, to check the checkpoint.
//
// SQLite needs the -wal and -shm files of a WAL database to read it; every
// writable open keeps them when it closes (sqlite.PersistWAL), so they are there
// for any database this version has written. Without them (a database last
// closed by an older version), SQLite creates them, which needs the disk.
func OpenReadOnly(ctx context.Context, opts Options) (*DB, error) {
	if opts.Path == "" {
		return nil, errors.New("store: no database path")
	}
	if IsPostgres(opts.Path) {
		return openPostgresReadOnly(ctx, opts)
	}
	if opts.KeyPath == "" {
		opts.KeyPath = filepath.Join(filepath.Dir(opts.Path), "audit.key")
	}
	if opts.CheckpointPath == "" {
		opts.CheckpointPath = opts.Path + ".checkpoint"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if _, err := os.Stat(opts.Path); errors.Is(err, os.ErrNotExist) {
		return openEmpty(ctx, opts)
	}
	r, err := sql.Open("sqlite", "file:"+opts.Path+"?mode=ro&_pragma=busy_timeout(10000)&_pragma=query_only(1)")
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", opts.Path, err)
	}
	r.SetMaxOpenConns(4)
	var v sql.NullInt64
	if err := r.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&v); err != nil {
		r.Close()
		return nil, fmt.Errorf("store: %s is %w: %w", opts.Path, ErrNotGuardDatabase, err)
	}
	if latest := sqlite.LatestMigration(); v.Int64 < readableFrom {
		r.Close()
		return nil, fmt.Errorf("store: %s: %w (schema version %d, this version's is %d): run a command that writes to it once (guard run, guard serve) to upgrade it",
			opts.Path, ErrSchemaTooOld, v.Int64, latest)
	}
	if n := sqlite.OrphanJournals(opts.Path); n > 0 {
		opts.Logger.Warn("journals of guard processes that stopped are beside the database: their records are read from them, and are in the chain once a writable guard opens it", "journals", n, "dir", sqlite.JournalsDir(opts.Path))
	}
	if files, _ := legacyJournals(opts.Path); len(files) > 0 {
		opts.Logger.Warn("an earlier version's journals are still beside the database: records in them appear once a writable guard opens it", "journals", legacyJournalDir(opts.Path))
	}
	sg, err := audit.ReadSigner(opts.KeyPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		r.Close()
		return nil, fmt.Errorf("store: %w", err)
	}
	db := &DB{opts: opts, w: r, r: r, signer: sg, ing: ingestion{closed: make(chan struct{})}, stats: newAuditStats(), auth: newTailAuth(sg, opts.Logger),
		schema: schemaGaps{noPruned: v.Int64 < retentionMigration, noRules: v.Int64 < approvalRulesMigration,
			noScope: v.Int64 < approvalScopeMigration, noProcess: v.Int64 < processMigration,
			noUser: v.Int64 < userMigration, noVia: v.Int64 < requiredViaMigration, noMAC: v.Int64 < macMigration}}
	db.ing.db, db.ckpt.db = db, db
	return db, nil
}

// openEmpty stands for a database that does not exist yet: one in memory,
// with the schema and nothing in it, so that reading commands answer
// "nothing recorded" without creating the file.
func openEmpty(ctx context.Context, opts Options) (*DB, error) {
	r, err := sql.Open("sqlite", "file:guard-empty-"+guard.NewID()+"?mode=memory&cache=shared&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	r.SetMaxOpenConns(4)
	// The database lives as long as a connection to it: one is held.
	hold, err := r.Conn(ctx)
	if err == nil {
		err = sqlite.Migrate(ctx, r, 0)
	}
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("store: %w", err)
	}
	db := &DB{opts: opts, w: r, r: r, hold: hold, ing: ingestion{closed: make(chan struct{})}, stats: newAuditStats(), auth: newTailAuth(nil, opts.Logger)}
	db.ing.db, db.ckpt.db = db, db
	return db, nil
}
