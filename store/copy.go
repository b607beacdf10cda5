package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/audit"
	"github.com/guard-mcp/guard/store/postgres"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Moving a database from SQLite to PostgreSQL (guard store copy): the
// two schemas have the same tables and columns (migrations/postgres), so
// rows move as they are (but for copyAs), each table in one COPY, and the
// audit log's hashes, tree and checkpoints stay valid because not a byte
// of them changes.

// ErrNotEmpty is returned by Copy when the destination already holds rows
// of a table it would move: a log is moved into an empty database only.
var ErrNotEmpty = errors.New("the destination database is not empty")

// copyTables are the tables Copy moves, in the order it moves them: the
// audit log first, then the working tables.
var copyTables = []string{
	"records", "tree_hashes", "checkpoints", "call_index",
	"approvals", "approval_reviews", "tools", "tool_reviews", "config_changes", "rules_written", "learned_rules",
	"rate_limits", "audit_verifications", "retention_runs", "stream_cursors", "passkeys",
}

// notCopied are the destination's tables that Copy does not move, and why.
// Every table of either schema is in copyTables or here (a test holds
// them to it), so that a table added later is moved or left on purpose.
var notCopied = map[string]string{
	"call_pending":       "the batches whose call index rows are not written yet, PostgreSQL's: the call index moved is whole",
	"call_text":          "made again from the records in the destination: SQLite's is a contentless FTS5 index, whose words cannot be read back",
	"leases":             "held by the processes of the old database; those of the new one take their own",
	"passkey_enrolments": "one-time codes that last minutes: guard ui enroll gives another",
	"replicas":           "the processes of the old database; each guard on the new one says what it runs",
	"retention_grant":    "empty but inside the retention job's transaction",
	"rounds":             "rounds of calls in flight, which the move ends (guard is stopped for it)",
	"schema_migrations":  "each database has its own: the destination's are applied as it is opened",
}

// copyAs are the columns whose text PostgreSQL holds otherwise than
// SQLite, by table and column, and how: a rate limit's key as TakeToken
// writes it there (it holds NUL bytes, which PostgreSQL's text cannot).
var copyAs = map[string]func(string) string{
	"rate_limits.key": pgText,
}

// CopyOptions are what Copy moves besides the source database.
type CopyOptions struct {
	// Learned are rules learned from approvals that the source kept
	// outside the database (rules.d/approved.yaml, in SQLite mode). They
	// are added to the destination's learned_rules, where PostgreSQL
	// mode keeps them, after the rows the source's table held; their
	// names must not be among those. Added, when zero, is the time of the
	// move.
	Learned []LearnedRule
}

// TableRows is how many rows of a table Copy moved.
type TableRows struct {
	Table string
	Rows  int64
}

// CopyReport is what Copy moved, and how the destination verified.
type CopyReport struct {
	// Rows are the rows of each table moved (and of call_text, made
	// from them), in the order they were.
	Rows []TableRows
	// Checkpoint is the latest checkpoint of the log moved; nil when it
	// had none.
	Checkpoint *audit.Checkpoint
	// KeyPath is the checkpoint key, the log's: guard on PostgreSQL
	// needs it (audit.key_file). CheckpointPath is the destination's
	// checkpoint file, which holds Checkpoint or a later one.
	KeyPath, CheckpointPath string
	// Verified is the destination's verification, after the move,
	// against Checkpoint as a checkpoint kept elsewhere: Witnessed, and
	// Extends is its size.
	Verified audit.Report
	// Learned is how many rules of CopyOptions.Learned were added.
	Learned int
}

// Count is how many rows of a table were moved.
func (r *CopyReport) Count(table string) int64 {
	for _, t := range r.Rows {
		if t.Table == table {
			return t.Rows
		}
	}
	return 0
}

// Copy moves the SQLite database from.Path into the empty PostgreSQL
// database at the URL to.Path: the audit records, every column byte for
// byte, the Merkle tree's hashes, every checkpoint kept, the call index
// (its words are made again from the records), approvals, the tool
// catalog and its reviews, configuration changes, the rules guard wrote,
// the rules learned from approvals (the table's, and o.Learned),
// rate-limit buckets, scheduled verifications, retention runs and the
// stream cursors (the records keep their seq, so streaming resumes where
// it was). Leases and the replicas' rows stay behind (notCopied says
// why).
//
// The source is opened as guard opens it (Open, with from): an older
// schema is migrated, journals left behind are moved in, the tree is
// built and a checkpoint signed. Its checkpoint key must exist (Copy
// never makes one for a log that has checkpoints), and is the
// destination's unless to names one, which must be the same key. The
// source must verify, against the destination's checkpoint file too when
// one is there: a checkpoint of another log there is refused, before
// anything is written.
//
// The source is read in one read transaction, a snapshot: what another
// process commits meanwhile stays behind, and a guard still running on it
// would go on recording there. Stop guard for a move.
//
// The destination's schema is made by its migrations; then everything
// moves in one PostgreSQL transaction, all or nothing, under the advisory
// locks guard's writers take, and only into a database whose tables are
// empty (else ErrNotEmpty). Text PostgreSQL cannot hold (a NUL byte, or
// bytes that are not UTF-8, which SQLite keeps as they came) fails the
// move, naming the table, row and column.
//
// Afterwards the destination is opened as guard opens it (with to), which
// checks that the key is the log's and writes the latest checkpoint to
// its checkpoint file (to.CheckpointPath, by default audit.checkpoint
// beside the key), and is verified against the latest checkpoint moved.
// An error then comes with the report: the move is committed.
func Copy(ctx context.Context, from, to Options, o CopyOptions) (*CopyReport, error) {
	if from.Path == "" || IsPostgres(from.Path) {
		return nil, errors.New("store: copy: the source must be an SQLite database file")
	}
	if !IsPostgres(to.Path) {
		return nil, errors.New("store: copy: the destination must be a PostgreSQL database (a postgres:// URL)")
	}
	// Open would create a database that is not there.
	if _, err := os.Stat(from.Path); err != nil {
		return nil, fmt.Errorf("store: copy: the source: %w", err)
	}
	if from.KeyPath == "" {
		from.KeyPath = filepath.Join(filepath.Dir(from.Path), "audit.key")
	}
	if to.KeyPath == "" && to.Key == "" {
		to.KeyPath = from.KeyPath
	}
	if to.Logger == nil {
		to.Logger = from.Logger
	}
	if err := to.pgFiles(); err != nil {
		return nil, fmt.Errorf("store: copy: %w", err)
	}
	if err := sameKey(from, to); err != nil {
		return nil, fmt.Errorf("store: copy: %w", err)
	}
	name := guard.DisplayURL(to.Path)
	cfg, err := postgres.Config(to.Path)
	if err != nil {
		return nil, fmt.Errorf("store: copy: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store: copy: %s: connect: %w", name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// A database that is not empty is refused before the source is
	// read, and again inside the transaction that moves it.
	if err := refuseFull(ctx, conn); err != nil {
		return nil, fmt.Errorf("store: copy to %s: %w", name, err)
	}
	src, err := Open(ctx, from)
	if err != nil {
		return nil, fmt.Errorf("store: copy: the source: %w", err)
	}
	defer src.Close()
	if err := verifyForCopy(ctx, src.Verifier(), to.CheckpointPath); err != nil {
		return nil, fmt.Errorf("store: copy: %w", err)
	}
	if err := postgres.Migrate(ctx, cfg); err != nil {
		return nil, fmt.Errorf("store: copy: %s: %w", name, err)
	}
	rep := &CopyReport{KeyPath: to.KeyPath, CheckpointPath: to.CheckpointPath}
	if err := copyTo(ctx, src, conn, o, rep); err != nil {
		return nil, fmt.Errorf("store: copy to %s: %w", name, err)
	}
	if err := checkCopy(ctx, to, rep); err != nil {
		return rep, fmt.Errorf("store: copy to %s: the move is committed, but %w", name, err)
	}
	return rep, nil
}

// sameKey checks that the source's checkpoint key exists and that the
// destination's is the same.
func sameKey(from, to Options) error {
	s, err := audit.ReadSigner(from.KeyPath)
	if err != nil {
		return fmt.Errorf("the source's %w", err)
	}
	d := s
	switch {
	case to.Key != "":
		d, err = audit.SignerFromHex("the destination's checkpoint key", to.Key)
	case to.KeyPath != from.KeyPath:
		d, err = audit.ReadSigner(to.KeyPath)
	}
	if err != nil {
		return err
	}
	if d.VerifierKey() != s.VerifierKey() {
		return fmt.Errorf("the destination's checkpoint key signs as %s, the log's (%s) as %s: a log keeps its key", d.Verifier().Name(), from.KeyPath, s.Verifier().Name())
	}
	return nil
}

// verifyForCopy verifies the source with its Verifier v, and against the
// checkpoint in the destination's checkpoint file when there is one:
// guard on the destination will hold the log to it.
func verifyForCopy(ctx context.Context, v Verifier, checkpointPath string) error {
	var o audit.VerifyOptions
	if b, err := os.ReadFile(checkpointPath); err == nil {
		o.Kept = append(o.Kept, audit.KeptCheckpoint{Name: "in " + checkpointPath + " (the destination's checkpoint file)", Note: b})
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("the destination's checkpoint file: %w", err)
	}
	rep, err := v.VerifyWith(ctx, o)
	if err != nil {
		return fmt.Errorf("verifying the source: %w", err)
	}
	if !rep.OK {
		return fmt.Errorf("the source does not verify, and is not moved: %s", rep.Why())
	}
	return nil
}

// pgQuerier is a PostgreSQL connection or transaction.
type pgQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// refuseFull returns ErrNotEmpty when a table Copy moves holds rows in
// the destination (a table not made yet holds none).
func refuseFull(ctx context.Context, q pgQuerier) error {
	for _, t := range copyTables {
		var made, full bool
		if err := q.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", t).Scan(&made); err != nil {
			return fmt.Errorf("%s: %w", t, err)
		}
		if !made {
			continue
		}
		if err := q.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+pgx.Identifier{t}.Sanitize()+")").Scan(&full); err != nil {
			return fmt.Errorf("%s: %w", t, err)
		}
		if full {
			return fmt.Errorf("%w: its table %s already holds rows; guard store copy moves a database into an empty one only", ErrNotEmpty, t)
		}
	}
	return nil
}

// copyTo moves the tables, reading them from one read transaction of the
// source src and writing them in one transaction on conn.
func copyTo(ctx context.Context, src *DB, conn *pgx.Conn, o CopyOptions, rep *CopyReport) error {
	stx, err := src.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("the source: %w", err)
	}
	defer stx.Rollback() //nolint:errcheck // it only read
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		// The locks of guard's writers, in their order: a guard that
		// starts on the destination meanwhile waits for the move.
		for _, l := range []int64{postgres.LockState, postgres.LockAudit} {
			if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", l); err != nil {
				return fmt.Errorf("advisory lock: %w", err)
			}
		}
		if err := refuseFull(ctx, tx); err != nil {
			return err
		}
		for _, t := range copyTables {
			n, err := copyTable(ctx, stx, tx, t)
			if err != nil {
				return fmt.Errorf("%s: %w", t, pgWhere(err))
			}
			rep.Rows = append(rep.Rows, TableRows{t, n})
			if t == "call_index" {
				tag, err := tx.Exec(ctx, postgres.InsertWords)
				if err != nil {
					return fmt.Errorf("call_text: %w", err)
				}
				rep.Rows = append(rep.Rows, TableRows{"call_text", tag.RowsAffected()})
			}
		}
		if err := resetIdentities(ctx, tx); err != nil {
			return err
		}
		for _, r := range o.Learned {
			if r.Added.IsZero() {
				r.Added = src.opts.Now()
			}
			if _, err := tx.Exec(ctx, postgres.Rebind(insertLearnedRule), r.Name, r.Server, r.Tool, r.Method, r.URI, r.When, r.Action, r.Reason, fmtTime(r.Added)); err != nil {
				return fmt.Errorf("learned rule %s: %w", r.Name, err)
			}
			rep.Learned++
		}
		var note string
		switch err := stx.QueryRowContext(ctx, `SELECT note FROM checkpoints ORDER BY size DESC LIMIT 1`).Scan(&note); {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return fmt.Errorf("checkpoints: %w", err)
		default:
			if rep.Checkpoint, err = audit.OpenCheckpoint([]byte(note), src.signer.Verifier()); err != nil {
				return fmt.Errorf("the latest checkpoint: %w", err)
			}
		}
		return nil
	})
}

// copyTable moves one table's rows, in rowid order, by COPY. Its columns
// are the destination's, which the source must have, and no others (an
// SQLite table's rowid is its own, without a column).
func copyTable(ctx context.Context, stx *sql.Tx, tx pgx.Tx, table string) (int64, error) {
	rows, err := tx.Query(ctx, `SELECT column_name, data_type FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position`, table)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var names []string
	var dest []any
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			return 0, err
		}
		var d any
		switch typ {
		case "bigint", "integer", "smallint":
			d = new(int64)
		case "text":
			d = new(string)
		case "bytea":
			d = new([]byte)
		case "double precision", "real":
			d = new(float64)
		default:
			return 0, fmt.Errorf("column %s is of type %s, which store copy does not move", name, typ)
		}
		names, dest = append(names, name), append(dest, d)
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	have, err := sqliteColumns(ctx, stx, table)
	if err != nil {
		return 0, err
	}
	for _, c := range have {
		if !slices.Contains(names, c) {
			return 0, fmt.Errorf("the source's column %s has no place in the destination's schema", c)
		}
	}
	sel := make([]string, len(names))
	for i, c := range names {
		if !slices.Contains(have, c) && c != "rowid" {
			return 0, fmt.Errorf("the destination's column %s is not in the source's schema", c)
		}
		sel[i] = pgx.Identifier{c}.Sanitize()
	}
	as := make([]func(string) string, len(names))
	for i, c := range names {
		as[i] = copyAs[table+"."+c]
	}
	src, err := stx.QueryContext(ctx, "SELECT "+strings.Join(sel, ", ")+" FROM "+pgx.Identifier{table}.Sanitize()+" ORDER BY rowid")
	if err != nil {
		return 0, fmt.Errorf("the source: %w", err)
	}
	defer src.Close()
	vals := make([]any, len(dest))
	return tx.CopyFrom(ctx, pgx.Identifier{table}, names, pgx.CopyFromFunc(func() ([]any, error) {
		if !src.Next() {
			return nil, src.Err()
		}
		if err := src.Scan(dest...); err != nil {
			return nil, fmt.Errorf("the source: %w", err)
		}
		for i, d := range dest {
			switch d := d.(type) {
			case *int64:
				vals[i] = *d
			case *string:
				if as[i] != nil {
					vals[i] = as[i](*d)
				} else {
					vals[i] = *d
				}
			case *[]byte:
				vals[i] = *d
			case *float64:
				vals[i] = *d
			}
		}
		return vals, nil
	}))
}

// sqliteColumns are the columns of an SQLite table.
func sqliteColumns(ctx context.Context, stx *sql.Tx, table string) ([]string, error) {
	rows, err := stx.QueryContext(ctx, `SELECT name FROM pragma_table_info(?)`, table)
	if err != nil {
		return nil, fmt.Errorf("the source: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, fmt.Errorf("the source: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("the source: %w", err)
	}
	if len(out) == 0 {
		return nil, errors.New("the source has no such table")
	}
	return out, nil
}

// resetIdentities moves each identity column's sequence past the largest
// value moved, so that the rows guard adds next do not take one of them.
func resetIdentities(ctx context.Context, tx pgx.Tx) error {
	rows, err := tx.Query(ctx, `SELECT table_name, column_name FROM information_schema.columns
		WHERE table_schema = current_schema() AND is_identity = 'YES'`)
	if err != nil {
		return fmt.Errorf("identity columns: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ Table, Column string }])
	if err != nil {
		return fmt.Errorf("identity columns: %w", err)
	}
	for _, id := range ids {
		t, c := pgx.Identifier{id.Table}.Sanitize(), pgx.Identifier{id.Column}.Sanitize()
		if _, err := tx.Exec(ctx, "SELECT setval(pg_get_serial_sequence($1, $2), coalesce(max("+c+"), 0) + 1, false) FROM "+t, t, id.Column); err != nil {
			return fmt.Errorf("%s.%s: %w", id.Table, id.Column, err)
		}
	}
	return nil
}

// pgWhere adds to a PostgreSQL error where it happened: a COPY's table,
// line (row) and column.
func pgWhere(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Where != "" {
		return fmt.Errorf("%w (%s)", err, pe.Where)
	}
	return err
}

// checkCopy opens the destination as guard opens it, which writes its
// checkpoint file, and verifies it against the latest checkpoint moved.
func checkCopy(ctx context.Context, to Options, rep *CopyReport) error {
	dst, err := Open(ctx, to)
	if err != nil {
		return fmt.Errorf("it does not open: %w", err)
	}
	var o audit.VerifyOptions
	if rep.Checkpoint != nil {
		o.Kept = []audit.KeptCheckpoint{{Name: "moved from the source", Note: rep.Checkpoint.Note}}
	}
	rep.Verified, err = dst.Verifier().VerifyWith(ctx, o)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("verifying it: %w", err)
	}
	if !rep.Verified.OK {
		return fmt.Errorf("it does not verify: %s", rep.Verified.Why())
	}
	if rep.Checkpoint == nil {
		return nil
	}
	c, err := audit.ReadCheckpointFile(to.CheckpointPath, dst.signer.Verifier())
	if err != nil || c.Size < rep.Checkpoint.Size {
		return fmt.Errorf("its checkpoint file %s does not hold the latest checkpoint (%v): copy the source's there", to.CheckpointPath, err)
	}
	return nil
}
