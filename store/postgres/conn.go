// Package postgres is what only guard's PostgreSQL engine does, below
// package store: the connections (placeholders rewritten, one writer at a
// time through advisory locks), opening a database (its URL, a pooler's
// mode, the migrations, the checkpoint key), the advisory locks, the
// listener of other replicas' changes (LISTEN/NOTIFY), the batch writer's
// statements and the question asked about a commit in doubt. It works on
// *sql.DB, *sql.Conn and pgx connections and takes what it needs as
// parameters: it knows nothing of package store or its callers.
package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"hash/fnv"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// On PostgreSQL the store runs the same statements as on SQLite, through
// database/sql and pgx's driver, with three differences made here, below
// the statements:
//
//   - placeholders: a statement's ? and ?N become $n and $N;
//   - one writer at a time: SQLite lets one connection of all processes
//     write at a time, and the store's read-check-write transactions rely
//     on it. Every transaction on a writing pool takes that pool's
//     advisory lock (pg_advisory_xact_lock) as it begins, and a write
//     statement run outside a transaction is run in one: the replicas'
//     writes to the working tables take turns as one process's would. The
//     audit writer has a lock of its own (appends do not wait for the
//     working tables), which the few transactions that change the log
//     otherwise (retention) also take, always after the other;
//   - BEGIN IMMEDIATE, SQLite's write transaction, is BEGIN and the lock.
//
// What SQLite alone has (the journal, file locks, the data version, FTS5,
// read-only opens of a file) has a PostgreSQL counterpart where it is
// used.

// URLHasPassword reports whether a PostgreSQL URL carries a password, in
// its user information or as a password parameter: a command line that
// names one shows it to every user of the machine (in /proc), where
// PGPASSWORD, a .pgpass file or the configuration do not. The URL is read
// as pgx (like libpq) reads it, which takes more than net/url does
// (several hosts, h1:5432,h2:5432): the user information ends at the
// first @ before any /.
func URLHasPassword(name string) bool {
	p, ok := strings.CutPrefix(name, "postgresql://")
	if !ok {
		p, _ = strings.CutPrefix(name, "postgres://")
	}
	if i := strings.IndexAny(p, "@/"); i >= 0 && p[i] == '@' {
		if _, pw, _ := strings.Cut(p[:i], ":"); pw != "" {
			return true
		}
	}
	_, query, _ := strings.Cut(p, "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		return strings.Contains(query, "password=")
	}
	return q.Get("password") != ""
}

// Advisory lock keys: guard's locks on a PostgreSQL database. They are
// 64-bit hashes of a name, so that they are unlikely to meet another
// application's on a shared server.
var (
	// LockState is the working tables' writers' lock.
	LockState = AdvisoryKey("guard: working tables")
	// LockAudit is the audit log's writer's lock.
	LockAudit = AdvisoryKey("guard: audit log")
	// LockMigrate is taken while migrations are applied.
	LockMigrate = AdvisoryKey("guard: migrations")
	// LockDecisions is the decisions lock (store's decisions.go): a
	// session's, held across the record's append and the change it
	// decides.
	LockDecisions = AdvisoryKey("guard: decisions")
)

// AdvisoryKey is the advisory lock key of a name.
func AdvisoryKey(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64())
}

// pgConnector opens pgx connections that rewrite placeholders and, when
// lock is not zero, take the advisory lock lock in every transaction.
type pgConnector struct {
	base driver.Connector
	lock int64
	sqls *Rebinder
}

func (c *pgConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.base.Connect(ctx)
	if err != nil {
		return nil, err
	}
	sc, ok := dc.(*stdlib.Conn)
	if !ok {
		dc.Close()
		return nil, fmt.Errorf("postgres: the driver's connection is a %T", dc)
	}
	return &pgConn{Conn: sc, lock: c.lock, sqls: c.sqls}, nil
}

func (c *pgConnector) Driver() driver.Driver { return c.base.Driver() }

// pgConn is a pgx connection as the store uses it (see above).
type pgConn struct {
	*stdlib.Conn
	lock int64
	sqls *Rebinder
}

// PgxConn is the pgx connection under dc, a driver connection of a pool
// that OpenPool or OpenReaders opened (ok false for any other: an SQLite
// connection).
func PgxConn(dc any) (c *pgx.Conn, ok bool) {
	pc, ok := dc.(*pgConn)
	if !ok {
		return nil, false
	}
	return pc.Conn.Conn(), true
}

// beginImmediate is SQLite's write transaction, which the writer's
// statements begin with.
const beginImmediate = "BEGIN IMMEDIATE"

func (c *pgConn) idle() bool { return c.Conn.Conn().PgConn().TxStatus() == 'I' }

// takeLock takes the connection's advisory lock inside the transaction
// under way.
func (c *pgConn) takeLock(ctx context.Context) error {
	if c.lock == 0 {
		return nil
	}
	if _, err := c.Conn.Conn().Exec(ctx, "SELECT pg_advisory_xact_lock($1)", c.lock); err != nil {
		return fmt.Errorf("advisory lock: %w", err)
	}
	return nil
}

// begin starts a transaction and takes the lock.
func (c *pgConn) begin(ctx context.Context) error {
	if _, err := c.Conn.Conn().Exec(ctx, "BEGIN"); err != nil {
		return err
	}
	if err := c.takeLock(ctx); err != nil {
		_, _ = c.Conn.Conn().Exec(context.WithoutCancel(ctx), "ROLLBACK")
		return err
	}
	return nil
}

// lost turns the error of a statement that did not run, on a connection
// the server closed (a restart, a failover, an administrator), into
// driver.ErrBadConn, so that database/sql runs it again on another
// connection instead of failing once for each connection of the pool.
func (c *pgConn) lost(err error) error {
	if err != nil && c.Conn.Conn().IsClosed() {
		return driver.ErrBadConn
	}
	return err
}

func (c *pgConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := c.Conn.BeginTx(ctx, opts)
	if err != nil {
		return nil, c.lost(err)
	}
	if !opts.ReadOnly {
		if err := c.takeLock(ctx); err != nil {
			_ = tx.Rollback()
			return nil, err
		}
	}
	return tx, nil
}

func (c *pgConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *pgConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *pgConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if query == beginImmediate {
		return &beginStmt{c: c}, nil
	}
	return c.Conn.PrepareContext(ctx, c.sqls.rebind(query))
}

func (c *pgConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if query == beginImmediate {
		return driver.ResultNoRows, c.begin(ctx)
	}
	query = c.sqls.rebind(query)
	if !c.idle() {
		return c.Conn.ExecContext(ctx, query, args)
	}
	if c.lock == 0 || !isWrite(query) {
		res, err := c.Conn.ExecContext(ctx, query, args)
		if !isWrite(query) {
			err = c.lost(err) // a read is run again elsewhere
		}
		return res, err
	}
	// A write outside a transaction takes its turn like one inside.
	if err := c.begin(ctx); err != nil {
		return nil, c.lost(err)
	}
	res, err := c.Conn.ExecContext(ctx, query, args)
	if err == nil {
		_, err = c.Conn.Conn().Exec(ctx, "COMMIT")
	}
	if err != nil {
		_, _ = c.Conn.Conn().Exec(context.WithoutCancel(ctx), "ROLLBACK")
		return nil, err
	}
	return res, nil
}

func (c *pgConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	query = c.sqls.rebind(query)
	if !c.idle() {
		return c.Conn.QueryContext(ctx, query, args)
	}
	if c.lock == 0 || !isWrite(query) {
		rows, err := c.Conn.QueryContext(ctx, query, args)
		if !isWrite(query) {
			err = c.lost(err) // a read is run again elsewhere
		}
		return rows, err
	}
	if err := c.begin(ctx); err != nil {
		return nil, c.lost(err)
	}
	rows, err := c.Conn.QueryContext(ctx, query, args)
	if err != nil {
		_, _ = c.Conn.Conn().Exec(context.WithoutCancel(ctx), "ROLLBACK")
		return nil, err
	}
	return &committingRows{Rows: rows, c: c, ctx: context.WithoutCancel(ctx)}, nil
}

// committingRows are the rows of a write statement run in a transaction of
// its own, committed when they are closed.
type committingRows struct {
	driver.Rows
	c    *pgConn
	ctx  context.Context
	done bool
}

func (r *committingRows) Close() error {
	err := r.Rows.Close()
	if r.done {
		return err
	}
	r.done = true
	end := "COMMIT"
	if err != nil {
		end = "ROLLBACK"
	}
	if _, cerr := r.c.Conn.Conn().Exec(r.ctx, end); cerr != nil && err == nil {
		err = cerr
	}
	return err
}

// beginStmt is BEGIN IMMEDIATE prepared.
type beginStmt struct{ c *pgConn }

func (s *beginStmt) Close() error  { return nil }
func (s *beginStmt) NumInput() int { return 0 }
func (s *beginStmt) Exec([]driver.Value) (driver.Result, error) {
	return s.ExecContext(context.Background(), nil)
}
func (s *beginStmt) ExecContext(ctx context.Context, _ []driver.NamedValue) (driver.Result, error) {
	return driver.ResultNoRows, s.c.begin(ctx)
}
func (s *beginStmt) Query([]driver.Value) (driver.Rows, error) {
	return nil, errors.New("BEGIN returns no rows")
}
func (s *beginStmt) QueryContext(context.Context, []driver.NamedValue) (driver.Rows, error) {
	return nil, errors.New("BEGIN returns no rows")
}

// isWrite reports whether a statement may change the database: it begins
// with INSERT, UPDATE, DELETE, REPLACE or WITH (a WITH may).
func isWrite(query string) bool {
	q := strings.TrimLeft(query, " \t\r\n(")
	for strings.HasPrefix(q, "--") {
		i := strings.IndexByte(q, '\n')
		if i < 0 {
			return false
		}
		q = strings.TrimLeft(q[i+1:], " \t\r\n(")
	}
	end := strings.IndexFunc(q, func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '(' })
	if end < 0 {
		end = len(q)
	}
	switch strings.ToUpper(q[:end]) {
	case "INSERT", "UPDATE", "DELETE", "REPLACE", "WITH", "MERGE":
		return true
	}
	return false
}

// Rebinder rewrites placeholders, remembering each statement's rewrite:
// the pools of one database share one.
type Rebinder struct {
	mu   sync.RWMutex
	done map[string]string
}

// maxRebound bounds the rewrites remembered (statements built from a
// query's filters vary; the store's are few).
const maxRebound = 4096

func (r *Rebinder) rebind(q string) string {
	r.mu.RLock()
	s, ok := r.done[q]
	r.mu.RUnlock()
	if ok {
		return s
	}
	s = Rebind(q)
	r.mu.Lock()
	if r.done == nil || len(r.done) >= maxRebound {
		r.done = map[string]string{}
	}
	r.done[q] = s
	r.mu.Unlock()
	return s
}

// Rebind turns SQLite's placeholders (? numbered in order, and ?N) into
// PostgreSQL's ($n, $N), leaving quoted text, quoted names and comments
// alone.
func Rebind(q string) string {
	if !strings.Contains(q, "?") {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 16)
	n := 0
	for i := 0; i < len(q); i++ {
		switch ch := q[i]; ch {
		case '\'', '"':
			j := i + 1
			for j < len(q) && q[j] != ch {
				j++
			}
			b.WriteString(q[i:min(j+1, len(q))])
			i = j
		case '-':
			if i+1 < len(q) && q[i+1] == '-' {
				j := strings.IndexByte(q[i:], '\n')
				if j < 0 {
					j = len(q) - i - 1
				}
				b.WriteString(q[i : i+j+1])
				i += j
				continue
			}
			b.WriteByte(ch)
		case '?':
			j := i + 1
			for j < len(q) && q[j] >= '0' && q[j] <= '9' {
				j++
			}
			b.WriteByte('$')
			if j > i+1 {
				b.WriteString(q[i+1 : j])
				if v, err := strconv.Atoi(q[i+1 : j]); err == nil {
					n = max(n, v)
				}
			} else {
				n++
				b.WriteString(strconv.Itoa(n))
			}
			i = j - 1
		default:
			b.WriteByte(ch)
		}
	}
	return b.String()
}

// Config parses a PostgreSQL URL. The password comes from the URL, from
// PGPASSWORD, or from a .pgpass file (PGPASSFILE, else ~/.pgpass), as
// libpq reads them. A connection gives up after 10 s unless the URL says
// otherwise (connect_timeout).
func Config(url string) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", guard.DisplayURL(url), err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	return cfg, nil
}

// OpenPool opens a database/sql pool on cfg whose connections take the
// advisory lock lock in their transactions (0: none).
func OpenPool(cfg *pgx.ConnConfig, lock int64, sqls *Rebinder) *sql.DB {
	return sql.OpenDB(&pgConnector{base: stdlib.GetConnector(*cfg), lock: lock, sqls: sqls})
}

// OpenReaders opens the readers' pool on cfg: every transaction of its
// connections is read-only. The setting is made once a connection is up,
// not as a startup parameter, which PgBouncer refuses.
func OpenReaders(cfg *pgx.ConnConfig, sqls *Rebinder) *sql.DB {
	readOnly := stdlib.OptionAfterConnect(func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "SET default_transaction_read_only = on")
		return err
	})
	return sql.OpenDB(&pgConnector{base: stdlib.GetConnector(*cfg, readOnly), sqls: sqls})
}

// Lock takes the session advisory lock key on a connection of its own
// of pool, held until unlock: waiting for it, or, with try, only if no
// one holds it (ok false then).
func Lock(ctx context.Context, pool *sql.DB, key int64, try bool) (unlock func(), ok bool, err error) {
	c, err := pool.Conn(ctx)
	if err != nil {
		return nil, false, err
	}
	if try {
		err = c.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&ok)
	} else {
		_, err = c.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, key)
		ok = true
	}
	if err != nil {
		dropSession(c) // it may hold the lock all the same
		return nil, false, err
	}
	if !ok {
		c.Close()
		return nil, false, nil
	}
	return func() {
		if _, err := c.ExecContext(context.Background(), `SELECT pg_advisory_unlock($1)`, key); err != nil {
			// A lock that cannot be released goes with its connection.
			dropSession(c)
			return
		}
		c.Close()
	}, true, nil
}

// dropSession closes a pooled PostgreSQL connection rather than giving it
// back to the pool: its session ends, and the advisory locks it holds go
// with it.
func dropSession(c *sql.Conn) {
	_ = c.Raw(func(any) error { return driver.ErrBadConn })
	c.Close()
}
