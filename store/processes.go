package store

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// Every relaying process (guard run, guard serve) beats in the replicas
// table (Heartbeat), on both engines: a row names it (host, pid, command)
// and says when it last beat. A process killed (SIGKILL, the OOM killer)
// stops beating; its holds name it (guard.Approval.Process), so that the
// next guard on the database can tell that nothing will ever use those
// scoped to a session that lived in it.
//
// A heartbeat rather than a lock: a file lock would tell the processes of
// one machine alone (enough on SQLite, nothing across PostgreSQL's
// replicas), and the replicas beat already. What a heartbeat cannot tell
// by itself is a process gone from one whose machine slept: a laptop's
// processes all stop beating while it sleeps, and the first to wake
// would find the others lapsed. So a process is judged gone only on
// evidence: another process's unbroken run of beats (Replica.AwakeSince)
// that went on for the gone one's Lapse after its last beat. Had it been
// running, on a machine that was awake, it would have beaten meanwhile.
// A process that has just woken has no such run yet, nor does one that
// has just started: neither judges alone. Times are each process's own
// clock: as for leases, replicas on several machines must keep their
// clocks agreeing (NTP) well within a lapse.

// DefaultLapse is how long after its last beat a process is taken to be
// gone when its row says nothing else: five beats of every two seconds.
const DefaultLapse = 10 * time.Second

// lapse is r's Lapse, or DefaultLapse.
func (r Replica) lapse() time.Duration {
	if r.Lapse <= 0 {
		return DefaultLapse
	}
	return r.Lapse
}

// String names the process for people: "guard run (pid 4242 on laptop),
// last heard of at 2026-07-28T12:00:00.000Z".
func (r Replica) String() string {
	return r.Process + " (pid " + strconv.Itoa(r.PID) + " on " + r.Host + "), last heard of at " + fmtTime(r.Seen)
}

// GoneProcesses names, by id, the guard processes that pending approvals
// name and that are gone: a process whose row is there has not beaten for
// its lapse while another went on beating (see above); one whose row is
// not there (it stopped and took its row out, or its row was removed a
// day after its last beat) is gone once another process has beaten
// unbroken for DefaultLapse. The name says which process it was, as its
// row last did.
func (hs Holds) GoneProcesses(ctx context.Context) (map[string]string, error) {
	if hs.db.schema.noProcess {
		return nil, nil // no approval names a process
	}
	rows, err := hs.db.r.QueryContext(ctx, `SELECT DISTINCT process FROM approvals WHERE state = 'pending' AND process <> ''`)
	if err != nil {
		return nil, fmt.Errorf("gone processes: %w", err)
	}
	defer rows.Close()
	var named []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("gone processes: %w", err)
		}
		named = append(named, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("gone processes: %w", err)
	}
	rows.Close()
	if len(named) == 0 {
		return nil, nil
	}
	all, err := hs.db.Replicas().replicas(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("gone processes: %w", err)
	}
	byID := make(map[string]*Replica, len(all))
	for i := range all {
		byID[all[i].ID] = &all[i]
	}
	gone := map[string]string{}
	for _, id := range named {
		p := byID[id]
		if !goneBy(id, p, all) {
			continue
		}
		if p == nil {
			gone[id] = "process " + id + ", no longer on the database"
		} else {
			gone[id] = p.String()
		}
	}
	return gone, nil
}

// goneBy reports whether the process id, whose row is p (nil: none), is
// gone on the evidence of the others' rows: one of them beat unbroken for
// p's lapse after p's last beat. A row without AwakeSince (a version
// that did not keep it) is no evidence: its run may span a sleep.
func goneBy(id string, p *Replica, all []Replica) bool {
	lapse, last := DefaultLapse, time.Time{}
	if p != nil {
		lapse, last = p.lapse(), p.Seen
	}
	for _, q := range all {
		if q.ID == id || q.AwakeSince.IsZero() {
			continue
		}
		if q.Seen.Sub(later(q.AwakeSince, last)) >= lapse {
			return true
		}
	}
	return false
}

// later is the later of two times.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
