package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store/sqlite"
)

// A journal that cannot be read whole loses nothing silently. Its
// recovery moves every frame it can read into the log (sqlite.ScanJournal),
// keeps the file aside (renamed with damagedSuffix, never read again),
// and appends an event record that names the file and every run of bytes
// it could not read: where, how long, how many records, and the records
// on either side. A run followed by a record the database already held
// held only records the database holds too (the ingester moves a
// journal's records in order); any other run may have held acknowledged
// records that are now lost, and is an integrity alert until a person
// acknowledges it (AcknowledgeLoss), itself a record in the chain.

// MethodJournalDamaged is the method of the event record of a journal
// whose recovery could not read all of it.
const MethodJournalDamaged = "guard/journal_damaged"

// MethodLossAcknowledged is the method of the event record of a person's
// acknowledgement of a loss; its call_id is the id of the loss's record.
const MethodLossAcknowledged = "guard/loss_acknowledged"

// damagedSuffix is added to the name of a journal kept aside after its
// recovery found damage: segments reads only names ending in .log.
const damagedSuffix = ".damaged"

// AlertJournalDamaged is the Kind of an Alert for a damaged journal.
const AlertJournalDamaged = "journal_damaged"

// Alert is an integrity problem recorded in the log that no one has
// acknowledged yet.
type Alert struct {
	ID   string    `json:"id"` // the id of the record that reports it: what AcknowledgeLoss takes
	Time time.Time `json:"time"`
	Kind string    `json:"kind"` // AlertJournalDamaged, AlertJournalRefused
	Text string    `json:"text"` // what was lost or refused, for people
}

// damageDetail is the detail of a MethodJournalDamaged record.
type damageDetail struct {
	Journal string      `json:"journal"` // where the file is kept
	Marked  bool        `json:"marked"`  // whether its frames are marked (this release's)
	Read    int         `json:"records_read"`
	Moved   int         `json:"records_moved"` // those of them not in the database before
	Runs    []damageRun `json:"damaged"`
	// Lost is set when a run may have held records the database does
	// not hold: the record is then an alert until acknowledged.
	Lost bool `json:"lost"`
}

// damageRun is one run of bytes that could not be read.
type damageRun struct {
	Offset int64 `json:"offset"`
	Bytes  int64 `json:"bytes"`
	// Frames is how many records the run held, when the lengths in it
	// tell (0: at least one, how many is not known).
	Frames int `json:"frames"`
	// After and Before are the records read on either side of it.
	After  *damageEdge `json:"after,omitempty"`
	Before *damageEdge `json:"before,omitempty"`
	Lost   bool        `json:"lost"`
}

// damageEdge names a record beside a damaged run.
type damageEdge struct {
	ID   string `json:"id"`
	Seq  int64  `json:"seq"`
	Time string `json:"time"`
}

// heldAlready reports, for each record, whether the database holds it
// already.
func heldAlready(ctx context.Context, q *sql.DB, recs []*guard.Record) ([]bool, error) {
	held := make([]bool, len(recs))
	st, err := q.PrepareContext(ctx, `SELECT count(*) FROM records WHERE call_id = ? AND id = ?`)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	for i, r := range recs {
		var n int
		if err := st.QueryRowContext(ctx, r.CallID, r.ID).Scan(&n); err != nil {
			return nil, err
		}
		held[i] = n > 0
	}
	return held, nil
}

// recordDamage appends the event record of a journal whose scan found
// damage, once the records it read are in the database (so that those
// beside the damage have their seqs); aside is where the file will be
// kept. A record of the same file from an earlier attempt (one that could
// not rename it) is not written again.
func (jn journals) recordDamage(ctx context.Context, path, aside string, sc *sqlite.JournalScan, held []bool, moved int) error {
	done, err := jn.journalRecorded(ctx, MethodJournalDamaged, aside)
	if err != nil {
		return fmt.Errorf("damaged journal: %w", err)
	}
	if done {
		return nil
	}
	d := damageDetail{Journal: aside, Marked: sc.Marked, Read: len(sc.Frames), Moved: moved}
	edge := func(i int) *damageEdge {
		if i < 0 || i >= len(sc.Frames) {
			return nil
		}
		r := sc.Frames[i].Rec
		e := &damageEdge{ID: r.ID, Time: fmtTime(r.Time)}
		_ = jn.db.w.QueryRowContext(ctx, `SELECT seq FROM records WHERE call_id = ? AND id = ?`, r.CallID, r.ID).Scan(&e.Seq)
		return e
	}
	for _, s := range sc.Damage {
		run := damageRun{Offset: s.Off, Bytes: s.End - s.Off, Frames: s.Frames, After: edge(s.Before - 1), Before: edge(s.Before)}
		// The ingester moves a journal's records in order: a run
		// followed by a record the database held is in it too.
		run.Lost = s.Before >= len(held) || !held[s.Before]
		d.Lost = d.Lost || run.Lost
		d.Runs = append(d.Runs, run)
	}
	rec, err := jn.appendJournalEvent(MethodJournalDamaged, damageText(filepath.Base(path), d), mustJSON(d))
	if err != nil {
		return fmt.Errorf("damaged journal: %w", err)
	}
	if d.Lost {
		jn.db.integrityAlert()
		jn.db.opts.Logger.Error("a journal left by a process that stopped is damaged: acknowledged records may be lost; it is kept aside and the loss is recorded until a person acknowledges it",
			"journal", aside, "record", rec.ID, "damaged_bytes", sc.DamagedBytes(), "records_read", len(sc.Frames))
	} else {
		jn.db.opts.Logger.Warn("a journal left by a process that stopped is damaged where the database already held its records; it is kept aside",
			"journal", aside, "record", rec.ID, "damaged_bytes", sc.DamagedBytes())
	}
	return nil
}

// journalRecorded reports whether the log holds the event record of method
// about the journal kept at aside: one from an earlier attempt at its
// recovery (which could not rename it), not to be written again.
func (jn journals) journalRecorded(ctx context.Context, method, aside string) (bool, error) {
	var n int
	err := jn.db.w.QueryRowContext(ctx, `SELECT count(*) FROM records
		WHERE kind = 'event' AND kind NOT IN ('request', 'outcome') AND method = ? AND instr(detail, ?) > 0`,
		method, mustJSON(aside)).Scan(&n)
	return n > 0, err
}

// appendJournalEvent commits an event record of method about a journal,
// with its reason and detail, and returns it.
func (jn journals) appendJournalEvent(method, reason, detail string) (*guard.Record, error) {
	rec := &guard.Record{ID: guard.NewID(), Kind: guard.KindEvent, Method: method, Reason: reason, Detail: detail,
		Time: jn.db.opts.Now().UTC().Truncate(time.Millisecond)}
	rec.CallID = rec.ID
	jn.db.ing.commitMu.Lock()
	err := jn.db.ing.commitRetrying([]*appendReq{{recs: []*guard.Record{rec}}})
	jn.db.ing.commitMu.Unlock()
	if err != nil {
		return nil, err
	}
	jn.db.ckpt.dirty.Store(true)
	return rec, nil
}

// damageText says for people what a damaged journal's record says.
func damageText(name string, d damageDetail) string {
	var runs []string
	for _, r := range d.Runs {
		what := "at least one record"
		if r.Frames == 1 {
			what = "1 record"
		} else if r.Frames > 1 {
			what = fmt.Sprintf("%d records", r.Frames)
		}
		s := fmt.Sprintf("%d bytes at offset %d (%s)", r.Bytes, r.Offset, what)
		if r.After != nil {
			s += fmt.Sprintf(" after record %d (id %s, %s)", r.After.Seq, r.After.ID, r.After.Time)
		}
		if r.Before != nil {
			s += fmt.Sprintf(" before record %d (id %s, %s)", r.Before.Seq, r.Before.ID, r.Before.Time)
		} else {
			s += ", the journal's last"
		}
		if !r.Lost {
			s += ", which the database already held"
		}
		runs = append(runs, s)
	}
	out := fmt.Sprintf("the journal %s of a guard process that stopped could not be read whole: %s; %d records were read from it, %d of them moved into the log now; the file is kept as %s",
		name, strings.Join(runs, "; "), d.Read, d.Moved, d.Journal)
	if d.Lost {
		out += "; records acknowledged there may be lost"
	}
	return out
}

// mustJSON is v in JSON (of values that always marshal).
func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// Integrity keeps the integrity alerts: the losses and refused journals
// recorded in the log until a person acknowledges them, and the counts of
// the alerts this process raised, of the checkpoints it refused to sign
// and of those a witness did not get. DB.Integrity returns it.
type Integrity struct{ db *DB }

// Integrity returns the audit log's integrity alerts.
func (db *DB) Integrity() Integrity { return Integrity{db} }

// integrityAlert counts an integrity alert this process raised.
func (db *DB) integrityAlert() { db.stats.integrity.Add(1) }

// IntegrityAlerts is how many integrity alerts this process raised: a
// journal whose recovery may have lost acknowledged records, a record
// found without a valid MAC (mac.go), and a journal's frame refused
// (journalauth.go), each counted once.
func (ig Integrity) IntegrityAlerts() int64 {
	return ig.db.stats.integrity.Load() + ig.db.auth.alerts.Load()
}

// UnauthenticatedRecords lists, in words, the records this process found
// in the log without a valid MAC (written by someone without the
// checkpoint key), oldest first. Each stays an alert while the process
// runs: guard signs no checkpoint over it, and only a person can tell
// what happened.
func (ig Integrity) UnauthenticatedRecords() []string { return ig.db.auth.unauthenticated() }

// Alerts lists the integrity problems recorded in the log that no one has
// acknowledged (AcknowledgeLoss), oldest first.
func (ig Integrity) Alerts(ctx context.Context) ([]Alert, error) {
	ig.db.ing.caughtUp(ctx)
	pruned := " AND l.pruned = 0"
	if ig.db.schema.noPruned {
		pruned = ""
	}
	// The terms on kind let SQLite read the index of the records that
	// are not a call's (records_kind) where the schema has it.
	rows, err := ig.db.r.QueryContext(ctx, `SELECT l.id, l.time, l.method, l.reason, l.detail FROM records l
		WHERE l.kind = 'event' AND l.kind NOT IN ('request', 'outcome') AND l.method IN (?, ?)`+pruned+`
		AND NOT EXISTS (SELECT 1 FROM records a WHERE a.call_id = l.id AND a.kind = 'event' AND a.method = ?)
		ORDER BY l.time, l.seq`, MethodJournalDamaged, MethodJournalRefused, MethodLossAcknowledged)
	if err != nil {
		return nil, fmt.Errorf("alerts: %w", err)
	}
	defer rows.Close()
	var out []Alert
	for rows.Next() {
		var a Alert
		var at, method, detail string
		if err := rows.Scan(&a.ID, &at, &method, &a.Text, &detail); err != nil {
			return nil, fmt.Errorf("alerts: %w", err)
		}
		a.Time, a.Kind = parseTime(at), AlertJournalRefused
		if method == MethodJournalDamaged {
			var d damageDetail
			if json.Unmarshal([]byte(detail), &d) == nil && !d.Lost {
				continue // damage where the database held the records: nothing lost
			}
			a.Kind = AlertJournalDamaged
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("alerts: %w", err)
	}
	return out, nil
}

// ErrAcknowledged is wrapped by AcknowledgeLoss's error for a loss a
// person has acknowledged already.
var ErrAcknowledged = errors.New("acknowledged already")

// AcknowledgeLoss records that the person by has seen the loss, or the
// refused journal, reported by the record id (an Alert's ID), and why, as
// an event record in the chain; it is no longer an alert. It fails with
// guard.ErrNotFound when no such loss or refusal is recorded, and with
// ErrAcknowledged when someone has acknowledged it.
func (ig Integrity) AcknowledgeLoss(ctx context.Context, id, by, reason string) (*guard.Record, error) {
	var rec *guard.Record
	check := func(ctx context.Context) (*guard.Record, error) {
		ig.db.ing.caughtUp(ctx)
		var method string
		err := ig.db.r.QueryRowContext(ctx, `SELECT method FROM records WHERE call_id = ? AND id = ? AND kind = 'event'`, id, id).Scan(&method)
		if errors.Is(err, sql.ErrNoRows) || err == nil && method != MethodJournalDamaged && method != MethodJournalRefused {
			return nil, fmt.Errorf("acknowledge: %w: no loss is recorded with the id %q", guard.ErrNotFound, id)
		}
		if err != nil {
			return nil, fmt.Errorf("acknowledge: %w", err)
		}
		var who, at string
		err = ig.db.r.QueryRowContext(ctx, `SELECT decided_by, time FROM records WHERE call_id = ? AND kind = 'event' AND method = ? ORDER BY seq LIMIT 1`,
			id, MethodLossAcknowledged).Scan(&who, &at)
		if err == nil {
			return nil, fmt.Errorf("acknowledge: the loss %s was %w by %s at %s", id, ErrAcknowledged, who, at)
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("acknowledge: %w", err)
		}
		rec = &guard.Record{ID: guard.NewID(), CallID: id, Kind: guard.KindEvent, Method: MethodLossAcknowledged,
			DecidedBy: by, Reason: reason, Detail: mustJSON(map[string]string{"loss": id})}
		return rec, nil
	}
	if err := ig.db.decide(ctx, check, func(context.Context) (bool, error) { return true, nil }); err != nil {
		return nil, err
	}
	return rec, nil
}
