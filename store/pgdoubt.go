package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/store/postgres"
)

// A batch whose COMMIT was sent but whose answer never came (the server
// stopped, the connection was cut, the commit timed out) may be in the
// database or not: the error says nothing either way. Refusing its calls
// at once could leave a log that says a call was answered when its
// client was refused, so the batch is held "in doubt" and the database is
// asked, as soon as it can be reached, whether the batch's first record
// is at the place it was given in the chain. The question is asked under
// the audit lock, so the transaction that sent the COMMIT has ended by
// then, one way or the other.
//
//   - Settled within doubtWait: each append gets the true answer (its
//     caller was kept waiting, not refused).
//   - Not settled by then: the appends are refused, and the question is
//     asked again until it can be answered. If the batch turns out to be
//     committed, an event record ("guard/unconfirmed") is appended for
//     each of its records, with that record's call id: the log then says
//     that the record's caller was refused although the record is there.
//
// The corrections themselves are never refused for lack of an answer:
// nobody waits for them, so they are held until the database tells.

const (
	doubtWait    = 5 * time.Second        // how long a caller waits for a batch in doubt to be settled
	doubtRecheck = 100 * time.Millisecond // between two questions to the database
	doubtAsk     = 2 * time.Second        // how long one question may take
)

// MethodUnconfirmed is the method of the event recorded for a record
// whose commit was in doubt, whose caller was refused for that, and which
// turned out to be committed.
const MethodUnconfirmed = "guard/unconfirmed"

// doubt is a batch in doubt.
type doubt struct {
	waiting []*appendReq    // appends not yet answered
	refused []*guard.Record // records whose callers were refused: corrected if committed
	fixes   []*appendReq    // corrections of an earlier doubt, in this batch
	seq     int64
	id      string
	err     error
	until   time.Time // waiting callers are refused by then
}

// holdInDoubt keeps a batch whose commit is in doubt for settleDoubts. batch is
// the ingester's (reused after ingest returns).
func (in *ingestion) holdInDoubt(batch []*appendReq, e *postgres.InDoubt) {
	err := fmt.Errorf("audit commit: %w", e.Err)
	in.noteWrite(err)
	if in.failure.Swap(&err) == nil {
		in.db.opts.Logger.Error("audit records cannot be committed to the database; calls are refused until they can", "err", err)
	}
	d := &doubt{seq: e.Seq, id: e.ID, err: err, until: time.Now().Add(doubtWait)}
	for _, r := range batch {
		if r.fix {
			d.fixes = append(d.fixes, r)
		} else {
			d.waiting = append(d.waiting, r)
		}
	}
	in.db.opts.Logger.Warn("audit commit in doubt: its callers wait until the database tells whether it was committed",
		"seq", e.Seq, "appends", len(batch), "err", e.Err)
	in.doubts = append(in.doubts, d)
}

// settleDoubts asks the database about the batches in doubt, oldest
// first, and answers or refuses their appends. With final (the store
// closes) it asks once and refuses whatever is still unknown.
func (in *ingestion) settleDoubts(final bool) {
	if len(in.doubts) == 0 || (!final && time.Since(in.doubtAsked) < doubtRecheck) {
		return
	}
	in.doubtAsked = time.Now()
	reachable := true
	kept := in.doubts[:0]
	for _, d := range in.doubts {
		committed, known := false, false
		if reachable {
			var err error
			committed, err = in.committedAt(d.seq, d.id)
			if err != nil {
				reachable = false // the others wait for the next round
				in.db.opts.Logger.Debug("audit commit still in doubt", "seq", d.seq, "err", err)
			} else {
				known = true
			}
		}
		if known {
			var err error
			if !committed {
				err = d.err
			}
			in.reply(d.waiting, err)
			in.reply(d.fixes, err)
			if committed {
				in.db.opts.Logger.Info("audit commit that was in doubt is in the database", "seq", d.seq)
				in.correct(d.refused)
			} else {
				in.db.opts.Logger.Info("audit commit that was in doubt is not in the database", "seq", d.seq)
				in.retryFixes(d.fixes)
			}
			continue
		}
		if len(d.waiting) > 0 && (final || time.Now().After(d.until)) {
			for _, r := range d.waiting {
				d.refused = append(d.refused, r.recs...)
			}
			in.reply(d.waiting, fmt.Errorf("its commit could not be confirmed: %w", d.err))
			d.waiting = nil
		}
		kept = append(kept, d)
	}
	clear(in.doubts[len(kept):])
	in.doubts = kept
	if final && len(in.doubts) > 0 {
		for _, d := range in.doubts {
			in.db.opts.Logger.Error("audit commit still in doubt at close: its callers were refused, and the log may hold its records",
				"seq", d.seq, "records", len(d.refused))
		}
	}
}

// committedAt reports whether record id is at seq in the chain
// (postgres.CommittedAt), asked within doubtAsk.
func (in *ingestion) committedAt(seq int64, id string) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), doubtAsk)
	defer cancel()
	return postgres.CommittedAt(ctx, in.db.aw, seq, id)
}

// reply answers appends held in doubt.
func (in *ingestion) reply(batch []*appendReq, err error) {
	if len(batch) == 0 {
		return
	}
	in.noteWrite(err)
	for _, r := range batch {
		in.db.stats.backlog.Add(-int64(len(r.recs)))
		in.db.stats.latency.Observe(time.Since(r.start).Seconds())
		if err != nil {
			r.done <- fmt.Errorf("%w: %w", guard.ErrAuditWrite, err)
		} else {
			r.done <- nil
		}
	}
	in.settled.Add(int64(len(batch)))
	in.progressed()
}

// correct queues an unconfirmed event for each record whose caller was
// refused although it is committed, ahead of what is pending.
func (in *ingestion) correct(recs []*guard.Record) {
	if len(recs) == 0 {
		return
	}
	now := in.db.opts.Now().UTC().Truncate(time.Millisecond)
	fixes := make([]*guard.Record, 0, len(recs))
	for _, r := range recs {
		detail, _ := json.Marshal(map[string]any{
			"record": r.ID,
			"kind":   r.Kind,
			"seq":    r.Seq,
			"error":  "the database did not confirm this record's commit in time, so what depended on it was refused; the record was committed",
		})
		fixes = append(fixes, &guard.Record{
			ID: guard.NewID(), CallID: r.CallID, Kind: guard.KindEvent, Time: now,
			Session: r.Session, Client: r.Client, User: r.User, UserEmail: r.UserEmail, UserGroups: r.UserGroups,
			Protocol: r.Protocol, Server: r.Server, Direction: r.Direction, Method: MethodUnconfirmed, Tool: r.Tool,
			Detail: string(detail),
		})
	}
	in.db.opts.Logger.Warn("audit records were committed although their callers were refused; the log records that", "records", len(recs))
	in.retryFixes([]*appendReq{{recs: fixes, done: make(chan error, 1), start: time.Now(), fix: true}})
}

// retryFixes puts corrections back ahead of what is pending.
func (in *ingestion) retryFixes(fixes []*appendReq) {
	if len(fixes) == 0 {
		return
	}
	in.jmu.Lock()
	for _, f := range fixes {
		f.done = make(chan error, 1)
		in.db.stats.add(len(f.recs))
		in.appended++
	}
	in.pend = append(append(make([]*appendReq, 0, len(fixes)+len(in.pend)), fixes...), in.pend...)
	in.jmu.Unlock()
	signal(in.urgent)
}

// doubtful reports whether err leaves a commit in doubt.
func doubtful(err error) (*postgres.InDoubt, bool) {
	var e *postgres.InDoubt
	ok := errors.As(err, &e)
	return e, ok
}
