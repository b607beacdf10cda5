package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/guard-mcp/guard/internal/filelock"
)

// Verification is one verification of the audit log on a schedule.
type Verification struct {
	Time    time.Time
	OK      bool
	Records int64
	// Problem is what Verify found, or why it could not run.
	Problem string
	Took    time.Duration
}

// verifyLock is the suffix of the file lock a process holds while it
// verifies on schedule: the others skip that round.
const verifyLock = ".verify.lock"

// LastVerification returns the latest scheduled verification by any
// process on the database, or nil when there was none.
func (vr Verifier) LastVerification(ctx context.Context) (*Verification, error) {
	var v Verification
	var at string
	var took int64
	err := vr.db.r.QueryRowContext(ctx, `SELECT time, ok, records, problem, took_ms FROM audit_verifications
		ORDER BY id DESC LIMIT 1`).Scan(&at, &v.OK, &v.Records, &v.Problem, &took)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("last verification: %w", err)
	}
	v.Time, v.Took = parseTime(at), time.Duration(took)*time.Millisecond
	return &v, nil
}

// VerificationFailures counts the scheduled verifications that failed, by
// every process on the database, ever: a counter an alert can watch.
func (vr Verifier) VerificationFailures(ctx context.Context) (int64, error) {
	var n int64
	if err := vr.db.r.QueryRowContext(ctx, `SELECT count(*) FROM audit_verifications WHERE ok = 0`).Scan(&n); err != nil {
		return 0, fmt.Errorf("verification failures: %w", err)
	}
	return n, nil
}

// VerifyIfDue verifies the audit log (Verify) unless a process on the
// database did within every, and keeps the result for LastVerification.
// Processes sharing the database take turns: one that finds another
// verifying skips. It returns the verification it made, or nil. A failure
// is logged at error level, naming the problem.
func (vr Verifier) VerifyIfDue(ctx context.Context, every time.Duration) (*Verification, error) {
	unlock, ok, err := vr.db.tryLock(ctx, verifyLock)
	if err != nil || !ok {
		return nil, err // another process verifies now
	}
	defer unlock()
	last, err := vr.LastVerification(ctx)
	if err != nil {
		return nil, err
	}
	now := vr.db.opts.Now()
	if last != nil && !last.Time.After(now.Add(clockSkew)) && now.Sub(last.Time) < every {
		return nil, nil
	}
	if last != nil && last.Time.After(now.Add(clockSkew)) {
		// A time to come cannot put the next round off: the table is
		// not part of the chain, and whoever could write it would
		// otherwise switch verification off.
		vr.db.opts.Logger.Warn("the last audit log verification is dated in the future; verifying now", "dated", last.Time)
	}
	start := time.Now()
	rep, err := vr.Verify(ctx)
	if ctx.Err() != nil {
		return nil, ctx.Err() // stopped, not failed
	}
	v := &Verification{Time: now.UTC(), OK: err == nil && rep.OK, Records: rep.Records, Problem: rep.Why(), Took: time.Since(start)}
	if err != nil {
		v.Problem = "the log could not be verified: " + err.Error()
	}
	if !v.OK {
		vr.db.opts.Logger.Error("audit log verification failed", "problem", v.Problem, "records", v.Records)
	} else {
		vr.db.opts.Logger.Info("audit log verified", "records", v.Records, "took", v.Took.Round(time.Millisecond))
	}
	if _, err := vr.db.w.ExecContext(ctx, `INSERT INTO audit_verifications (time, ok, records, problem, took_ms) VALUES (?, ?, ?, ?, ?)`,
		fmtTime(v.Time), boolInt(v.OK), v.Records, v.Problem, v.Took.Milliseconds()); err != nil {
		return v, fmt.Errorf("verification: keep its result: %w", err)
	}
	return v, nil
}

// RunVerifier verifies the audit log every period (audit.verify_every)
// until ctx ends, in turn with the other processes on the database (see
// VerifyIfDue): a round comes once the last verification of any process
// is a period old, or a period after the start when there was none (the
// records a new log starts with have a checkpoint by then). done, when
// set, is given each verification this process made.
func (vr Verifier) RunVerifier(ctx context.Context, every time.Duration, done func(Verification)) {
	if every <= 0 {
		return
	}
	first := every
	if last, err := vr.LastVerification(ctx); err == nil && last != nil {
		first = min(max(time.Until(last.Time.Add(every)), 0), every)
	}
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		v, err := vr.VerifyIfDue(ctx, every)
		if err != nil && ctx.Err() == nil {
			vr.db.opts.Logger.Error("audit log verification", "err", err)
		}
		if v != nil && done != nil {
			done(*v)
		}
		next := every
		if last, err := vr.LastVerification(ctx); err == nil && last != nil {
			next = min(max(time.Until(last.Time.Add(every)), time.Second), every)
		}
		t.Reset(next)
	}
}

// clockSkew is how far in the future a verification's time may be (the
// clocks of processes on one database differ) before it counts as none.
const clockSkew = time.Minute

// tryLockFile takes an exclusive advisory lock on path if no one holds
// it; ok is false when someone does.
func tryLockFile(path string) (unlock func(), ok bool, err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := filelock.TryLock(f); err != nil {
		f.Close()
		if errors.Is(err, filelock.ErrLocked) {
			return nil, false, nil
		}
		return nil, false, err
	}
	return func() {
		_ = filelock.Unlock(f)
		f.Close()
	}, true, nil
}

// boolInt is a truth as the schema keeps it, 1 or 0: an integer on both
// engines.
func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
