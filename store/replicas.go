package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	guard "github.com/guard-mcp/guard"
)

// LearnedRule is a rule learned from an approval, as the database keeps it
// (PostgreSQL mode: every replica reads the same).
type LearnedRule struct {
	Name, Server, Tool, Method, URI, When, Action, Reason string
	Added                                                 time.Time
}

// LearnedRules returns the rules learned from approvals, oldest first,
// and their version: it changes whenever a rule is added.
func (ls Learned) LearnedRules(ctx context.Context) ([]LearnedRule, int64, error) {
	rows, err := ls.db.r.QueryContext(ctx, `SELECT seq, name, server, tool, method, uri, when_expr, action, reason, added
		FROM learned_rules ORDER BY seq`)
	if err != nil {
		return nil, 0, fmt.Errorf("learned rules: %w", err)
	}
	defer rows.Close()
	var out []LearnedRule
	var version int64
	for rows.Next() {
		var r LearnedRule
		var added string
		if err := rows.Scan(&version, &r.Name, &r.Server, &r.Tool, &r.Method, &r.URI, &r.When, &r.Action, &r.Reason, &added); err != nil {
			return nil, 0, fmt.Errorf("learned rules: %w", err)
		}
		r.Added = parseTime(added)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("learned rules: %w", err)
	}
	return out, version, nil
}

// LearnedRulesVersion is the version LearnedRules returns, read alone:
// one indexed row, so that a replica can ask every second.
func (ls Learned) LearnedRulesVersion(ctx context.Context) (int64, error) {
	var v int64
	if err := ls.db.r.QueryRowContext(ctx, `SELECT coalesce(max(seq), 0) FROM learned_rules`).Scan(&v); err != nil {
		return 0, fmt.Errorf("learned rules: %w", err)
	}
	return v, nil
}

// AddLearnedRule adds a rule. The caller holds the decisions lock (the
// rule is written with the approval that teaches it, DecideApprovalWith)
// and has recorded the rule in the audit log, and chose its name among
// LearnedRules' so that it is unique.
func (ls Learned) AddLearnedRule(ctx context.Context, r LearnedRule) error {
	if !ls.db.writable {
		return errReadOnly
	}
	_, err := ls.db.w.ExecContext(ctx, insertLearnedRule, r.Name, r.Server, r.Tool, r.Method, r.URI, r.When, r.Action, r.Reason, fmtTime(ls.db.opts.Now()))
	if err != nil {
		return fmt.Errorf("learned rule %s: %w", r.Name, err)
	}
	return nil
}

// insertLearnedRule adds a learned rule (AddLearnedRule, and Copy).
const insertLearnedRule = `INSERT INTO learned_rules (name, server, tool, method, uri, when_expr, action, reason, added)
 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`

// Replica is a guard process on the database as it last said: on
// PostgreSQL a replica, on SQLite one of the processes sharing the file.
type Replica struct {
	ID            string // the process's own, new at each start
	Host          string
	PID           int
	Process       string // "guard serve", "guard run"
	Version       string // guard's
	ConfigDigest  string // of its configuration's contents
	PolicyVersion string // of the policy in force
	Started, Seen time.Time
	// Lapse is how long after its last beat the process is taken to be
	// gone (DefaultLapse when zero): a few of its beats.
	Lapse time.Duration
	// AwakeSince is when its unbroken run of beats began: Heartbeat
	// starts a new run when a beat comes more than Lapse after the one
	// before (the machine slept, or the process hung). Zero in rows of
	// versions that did not keep it.
	AwakeSince time.Time
}

// Heartbeat says that r runs, as it is now (r.Seen, the process's own
// clock): its row keeps the run of beats that r.Seen continues, or starts
// a new one (see Replica.AwakeSince). A process beats well within its
// Lapse: GoneProcesses judges it by it.
func (rs Replicas) Heartbeat(ctx context.Context, r Replica) error {
	if !rs.db.writable {
		return errReadOnly
	}
	lapse := r.lapse()
	// One statement: the run goes on when the previous beat is recent
	// (times are text that sorts as time), without a read before.
	// macs: this release writes every record with its MAC (mac.go).
	_, err := rs.db.w.ExecContext(ctx, `INSERT INTO replicas (id, host, pid, process, version, config_digest, policy_version, started, seen, awake_since, lapse_ms, macs)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)
		ON CONFLICT (id) DO UPDATE SET config_digest = excluded.config_digest, policy_version = excluded.policy_version,
			awake_since = CASE WHEN replicas.seen >= ? AND replicas.awake_since <> '' THEN replicas.awake_since ELSE excluded.awake_since END,
			lapse_ms = excluded.lapse_ms, seen = excluded.seen`,
		r.ID, r.Host, r.PID, r.Process, r.Version, r.ConfigDigest, r.PolicyVersion, fmtTime(r.Started), fmtTime(r.Seen),
		fmtTime(r.Seen), lapse.Milliseconds(), fmtTime(r.Seen.Add(-lapse)))
	if err != nil {
		return fmt.Errorf("replica %s: %w", r.ID, err)
	}
	return nil
}

// Replicas returns the processes seen at since or later, and removes
// those not seen for a day.
func (rs Replicas) Replicas(ctx context.Context, since time.Time) ([]Replica, error) {
	if rs.db.writable {
		if _, err := rs.db.w.ExecContext(ctx, `DELETE FROM replicas WHERE seen < ?`, fmtTime(since.Add(-24*time.Hour))); err != nil {
			return nil, fmt.Errorf("replicas: %w", err)
		}
	}
	out, err := rs.replicas(ctx, `WHERE seen >= ?`, fmtTime(since))
	if err != nil {
		return nil, fmt.Errorf("replicas: %w", err)
	}
	return out, nil
}

// replicas reads the rows of the replicas where selects, in the order
// they started.
func (rs Replicas) replicas(ctx context.Context, where string, args ...any) ([]Replica, error) {
	cols := "awake_since, lapse_ms"
	if rs.db.schema.noProcess {
		cols = "'', 0"
	}
	rows, err := rs.db.r.QueryContext(ctx, `SELECT id, host, pid, process, version, config_digest, policy_version, started, seen, `+cols+`
		FROM replicas `+where+` ORDER BY started, id`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Replica
	for rows.Next() {
		var r Replica
		var started, seen, awake string
		var lapse int64
		if err := rows.Scan(&r.ID, &r.Host, &r.PID, &r.Process, &r.Version, &r.ConfigDigest, &r.PolicyVersion, &started, &seen,
			&awake, &lapse); err != nil {
			return nil, err
		}
		r.Started, r.Seen, r.AwakeSince = parseTime(started), parseTime(seen), parseTime(awake)
		r.Lapse = time.Duration(lapse) * time.Millisecond
		out = append(out, r)
	}
	return out, rows.Err()
}

// LeaveReplicas removes a process that stops from the replicas.
func (rs Replicas) LeaveReplicas(ctx context.Context, id string) error {
	if !rs.db.writable {
		return errReadOnly
	}
	if _, err := rs.db.w.ExecContext(ctx, `DELETE FROM replicas WHERE id = ?`, id); err != nil {
		return fmt.Errorf("replica %s: %w", id, err)
	}
	return nil
}

// NoteRound keeps a round of a 2026-07-28 call until expires, by key (the
// server's, the client's and the round's), for the client's next round
// wherever it lands; a round kept under the same key is replaced.
func (rs Replicas) NoteRound(ctx context.Context, key string, r guard.Round, expires time.Time) error {
	if !rs.db.writable {
		return errReadOnly
	}
	now := rs.db.opts.Now().UnixMilli()
	if _, err := rs.db.w.ExecContext(ctx, `DELETE FROM rounds WHERE expires < ?`, now); err != nil {
		return fmt.Errorf("rounds: %w", err)
	}
	_, err := rs.db.w.ExecContext(ctx, `INSERT INTO rounds (key, call_id, tool, digest, pin, decision, decided_by, reason, expires)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (key) DO UPDATE SET call_id = excluded.call_id, tool = excluded.tool, digest = excluded.digest, pin = excluded.pin,
			decision = excluded.decision, decided_by = excluded.decided_by, reason = excluded.reason, expires = excluded.expires`,
		key, r.CallID, r.Tool, r.ArgsDigest, r.Pin, r.Decision, r.DecidedBy, r.Reason, expires.UnixMilli())
	if err != nil {
		return fmt.Errorf("rounds: %w", err)
	}
	return nil
}

// TakeRound returns the round kept under key and removes it (a round is
// continued once), or nil when there is none or it expired.
func (rs Replicas) TakeRound(ctx context.Context, key string) (*guard.Round, error) {
	if !rs.db.writable {
		return nil, errReadOnly
	}
	var r guard.Round
	err := rs.db.w.QueryRowContext(ctx, `DELETE FROM rounds WHERE key = ? AND expires >= ?
		RETURNING call_id, tool, digest, pin, decision, decided_by, reason`, key, rs.db.opts.Now().UnixMilli()).
		Scan(&r.CallID, &r.Tool, &r.ArgsDigest, &r.Pin, &r.Decision, &r.DecidedBy, &r.Reason)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("rounds: %w", err)
	}
	return &r, nil
}

// Learned keeps the rules learned from approvals, which every process on
// the database puts in force alike; DB.Learned returns it.
type Learned struct{ db *DB }

// Learned returns the store of learned rules.
func (db *DB) Learned() Learned { return Learned{db} }

// Replicas keeps the guard processes on the database, as each last said
// it runs, and the rounds of calls that any of them may continue, and
// says whether a newer release's replica migrated the database past this
// one's schema; DB.Replicas returns it.
type Replicas struct{ db *DB }

// Replicas returns the store of processes and their shared rounds.
func (db *DB) Replicas() Replicas { return Replicas{db} }

// NewerSchema is the database's schema version when it is newer than this
// guard's (a replica not yet upgraded), else 0.
func (rs Replicas) NewerSchema() int64 { return rs.db.schema.newerSchema }
