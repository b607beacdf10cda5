// Package approvals holds calls for a person's decision: it stores a held
// call, waits for the decision while the relay goes on, enforces the wait
// limit and the expiry, lets an identical call through once after approval,
// and withdraws calls the client cancelled, or whose guard process is gone.
// A held call leaves "pending" exactly once; later decisions are refused
// with who decided and when, or how it ended and why.
package approvals

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	guard "github.com/guard-mcp/guard"
)

// Store keeps approvals; store.Holds implements it. Waiting is the store's,
// so that a decision made by another process or replica is seen too:
// polling on SQLite, LISTEN/NOTIFY on PostgreSQL (a decision made on one
// replica releases a call held on another within milliseconds).
//
// A pending approval leaves "pending" only through ReviewApproval (a
// person) or EndApproval (an expiry, a withdrawal), each of which records
// the decision in the audit log before the state changes and refuses it
// when the record cannot be written; TransitionApproval only uses up an
// approved one.
type Store interface {
	CreateApproval(ctx context.Context, a *guard.Approval) error
	Approval(ctx context.Context, id string) (*guard.Approval, error)
	Approvals(ctx context.Context, state string) ([]*guard.Approval, error)
	ReviewApproval(ctx context.Context, id string, by guard.Identity, via string, approve bool, reason string, before func(*guard.Approval) error) (*guard.Approval, error)
	EndApproval(ctx context.Context, id, to, reason string) (bool, error)
	TransitionApproval(ctx context.Context, id, from, to string) (bool, error)
	ConsumeApproval(ctx context.Context, server, tool, digest, pin, policyVersion, session string, now time.Time) (*guard.Approval, error)
	PendingApproval(ctx context.Context, server, tool, digest, session string) (*guard.Approval, error)
	MarkSessionEnded(ctx context.Context, id string, at time.Time) (bool, error)
	WaitApproval(ctx context.Context, id string) (*guard.Approval, error)
	// GoneProcesses names, by id, the guard processes that pending
	// approvals name (guard.Approval.Process) and that are gone: killed,
	// say, without a chance to settle their holds.
	GoneProcesses(ctx context.Context) (map[string]string, error)
}

// Options configure a Manager.
type Options struct {
	Timeout       time.Duration // an undecided hold expires (default 10m)
	Wait          time.Duration // a call blocks at most this long (default 50s)
	ProgressEvery time.Duration // progress while waiting (default 5s)
	Now           func() time.Time
	Logger        *slog.Logger

	// Scope is which repeated call an approval lets through:
	// guard.ScopeSession (default), only one from the held call's
	// session; guard.ScopeAny, one from any session.
	Scope string

	// Process is the id this guard process beats under in the database
	// (store.Replicas.Heartbeat), which every hold names: once the process is
	// gone, the holds scoped to its sessions are withdrawn (SettleGone).
	// "" holds calls that name no process, which nothing withdraws so.
	Process string

	// RequiredVia says, when a call is held, how whoever decides on it
	// must have been verified, as the configuration in force has it
	// (config.Config.RequiredVia): the hold keeps it, and every process
	// on the database enforces it. nil: a typed name may decide.
	RequiredVia func() string
}

// Manager holds calls.
type Manager struct {
	st   Store
	opts Options
}

// New returns a Manager over a store.
func New(st Store, opts Options) *Manager {
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Minute
	}
	if opts.Wait <= 0 {
		opts.Wait = 50 * time.Second
	}
	if opts.ProgressEvery <= 0 {
		opts.ProgressEvery = 5 * time.Second
	}
	if opts.Scope == "" {
		opts.Scope = guard.ScopeSession
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Manager{st: st, opts: opts}
}

// Hold stores a held call, with the manager's scope, or returns the
// pending approval of an identical call (same server, tool and arguments)
// that the client retried while it was still open: from the same session,
// or from any when that approval's scope is guard.ScopeAny. An identical
// call by another authenticated caller gets an approval of its own: the
// people who decide on one caller's call may include the other, who must
// not decide on their own.
func (m *Manager) Hold(ctx context.Context, a *guard.Approval) (*guard.Approval, bool, error) {
	if p, err := m.st.PendingApproval(ctx, a.Server, a.Tool, a.Digest, a.Session); err == nil {
		switch {
		case p.Caller.Subject != a.Caller.Subject:
		case m.opts.Now().Before(p.ExpiresAt):
			return p, true, nil
		default:
			if _, err := m.st.EndApproval(ctx, p.ID, guard.ApprovalExpired, ExpiredReason); err != nil {
				m.opts.Logger.Error("an expired approval could not be ended", "approval", p.ID, "err", err)
			}
		}
	} else if !errors.Is(err, guard.ErrNotFound) {
		return nil, false, fmt.Errorf("hold: %w", err)
	}
	now := m.opts.Now().UTC()
	a.State, a.Scope, a.Process = guard.ApprovalPending, m.opts.Scope, m.opts.Process
	if m.opts.RequiredVia != nil {
		a.RequiredVia = m.opts.RequiredVia()
	}
	a.CreatedAt = now
	a.ExpiresAt = now.Add(m.opts.Timeout)
	if err := m.st.CreateApproval(ctx, a); err != nil {
		return nil, false, fmt.Errorf("hold: %w", err)
	}
	return a, false, nil
}

// Consume lets an identical call through once after a person approved it:
// same server, tool, argument digest, tool pin and policy version, from a
// session the approval's scope takes in (the held call's own, or any).
func (m *Manager) Consume(ctx context.Context, server, tool, digest, pin, policyVersion, session string) (*guard.Approval, bool, error) {
	a, err := m.st.ConsumeApproval(ctx, server, tool, digest, pin, policyVersion, session, m.opts.Now())
	if errors.Is(err, guard.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return a, true, nil
}

// Await waits for the decision on a held call, up to the wait limit and
// never past its expiry, calling progress every ProgressEvery. An approved
// call is used by this wait: it cannot let a second call through.
func (m *Manager) Await(ctx context.Context, id string, progress func(msg string)) (guard.WaitResult, error) {
	a, err := m.st.Approval(ctx, id)
	if err != nil {
		return guard.WaitResult{}, err
	}
	limit := m.opts.Wait
	if left := a.ExpiresAt.Sub(m.opts.Now()); left < limit {
		limit = left
	}
	wctx, cancel := context.WithTimeout(ctx, max(limit, 0))
	defer cancel()
	type got struct {
		a   *guard.Approval
		err error
	}
	ch := make(chan got, 1)
	go func() {
		a, err := m.st.WaitApproval(wctx, id)
		ch <- got{a, err}
	}()
	t := time.NewTicker(m.opts.ProgressEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if progress != nil {
				progress("waiting for approval at the guard UI; approval id " + id)
			}
		case g := <-ch:
			if g.err != nil && ctx.Err() != nil {
				return guard.WaitResult{Approval: g.a}, ctx.Err()
			}
			if g.err != nil && !errors.Is(g.err, context.DeadlineExceeded) {
				return guard.WaitResult{}, g.err
			}
			return m.settle(ctx, id, g.a)
		}
	}
}

// settle turns the approval's state after a wait into its result.
func (m *Manager) settle(ctx context.Context, id string, a *guard.Approval) (guard.WaitResult, error) {
	bg := context.WithoutCancel(ctx)
	if a == nil || a.State == guard.ApprovalPending {
		cur, err := m.st.Approval(bg, id)
		if err != nil {
			return guard.WaitResult{}, err
		}
		a = cur
	}
	switch a.State {
	case guard.ApprovalPending:
		if !m.opts.Now().Before(a.ExpiresAt) {
			if ok, err := m.st.EndApproval(bg, id, guard.ApprovalExpired, ExpiredReason); err != nil {
				return guard.WaitResult{}, err
			} else if ok {
				a.State = guard.ApprovalExpired
				return guard.WaitResult{End: guard.WaitExpired, Approval: a}, nil
			}
			return m.settle(ctx, id, nil)
		}
		return guard.WaitResult{End: guard.WaitLimit, Approval: a}, nil
	case guard.ApprovalApproved:
		ok, err := m.st.TransitionApproval(bg, id, guard.ApprovalApproved, guard.ApprovalUsed)
		if err != nil {
			return guard.WaitResult{}, err
		}
		if !ok { // used by another call already
			return guard.WaitResult{End: guard.WaitWithdrawn, Approval: a}, nil
		}
		a.State = guard.ApprovalUsed
		return guard.WaitResult{End: guard.WaitApproved, Approval: a}, nil
	case guard.ApprovalDenied:
		return guard.WaitResult{End: guard.WaitDenied, Approval: a}, nil
	case guard.ApprovalExpired:
		return guard.WaitResult{End: guard.WaitExpired, Approval: a}, nil
	default:
		return guard.WaitResult{End: guard.WaitWithdrawn, Approval: a}, nil
	}
}

// Get returns an approval as it stands.
func (m *Manager) Get(ctx context.Context, id string) (*guard.Approval, error) {
	return m.st.Approval(ctx, id)
}

// ExpiredReason is the reason an expiry's record gives.
const ExpiredReason = "no decision within the approval timeout"

// Withdraw withdraws a pending approval (the client cancelled the call,
// or the session ended), for the reason given. The withdrawal is recorded
// in the audit log first; an approval no longer pending is left as it is.
func (m *Manager) Withdraw(ctx context.Context, id, reason string) error {
	_, err := m.st.EndApproval(ctx, id, guard.ApprovalWithdrawn, reason)
	return err
}

// SessionEnded settles the open approvals of a session whose client is
// gone, for the reason given (one that begins with guard.ClientGoneReason). One
// scoped to the session can no longer let any call through: it is
// withdrawn (and recorded so), rather than left looking as if its client
// still waited. One scoped to any session may still let another
// session's identical call through: it stays open, noting when its
// client went, for the approver to see.
func (m *Manager) SessionEnded(ctx context.Context, session, reason string) error {
	list, err := m.st.Approvals(ctx, guard.ApprovalPending)
	if err != nil {
		return fmt.Errorf("session ended: %w", err)
	}
	var errs []error
	for _, a := range list {
		if a.Session != session {
			continue
		}
		if err := m.clientGone(ctx, a, reason); err != nil {
			errs = append(errs, fmt.Errorf("approval %s: %w", a.ID, err))
		}
	}
	return errors.Join(errs...)
}

// ClientGone settles one held call whose client went away while it
// waited: withdrawn when its approval is scoped to the session, marked as
// its client gone when it is scoped to any session.
func (m *Manager) ClientGone(ctx context.Context, id, reason string) error {
	a, err := m.st.Approval(ctx, id)
	if err != nil {
		return fmt.Errorf("client gone: %w", err)
	}
	if a.State != guard.ApprovalPending {
		return nil
	}
	return m.clientGone(ctx, a, reason)
}

func (m *Manager) clientGone(ctx context.Context, a *guard.Approval, reason string) error {
	if a.Scope == guard.ScopeAny {
		_, err := m.st.MarkSessionEnded(ctx, a.ID, m.opts.Now())
		return err
	}
	_, err := m.st.EndApproval(ctx, a.ID, guard.ApprovalWithdrawn, reason)
	return err
}

// ProcessGoneReason is the reason a withdrawal gives when the guard
// process that held a call scoped to its session is gone; the process's
// name follows it.
const ProcessGoneReason = "the guard process that held the call is gone"

// diesWithProcess reports whether a pending approval can be used only
// while the guard process that held it runs: one scoped to its session,
// of a session that lived in that process. A 2026-07-28 hold belongs to
// its client (guard.ClientHold), which may come back through any
// process; one scoped to any session may let another session's call
// through; one that names no process was held before guard kept it.
func diesWithProcess(a *guard.Approval) bool {
	return a.Process != "" && a.Scope == guard.ScopeSession && !clientHold(a)
}

// clientHold reports whether a is a 2026-07-28 hold, the client's.
func clientHold(a *guard.Approval) bool { return strings.HasPrefix(a.Session, guard.ClientHold) }

// SettleGone settles the pending approvals whose guard process is gone
// (killed, say, before its sessions could end theirs: see SessionEnded).
// One scoped to its session is withdrawn, recorded with the process's
// name; one scoped to any session stays open for another session's
// identical call, noting that its client went; a 2026-07-28 hold belongs
// to its client and is left as it is. It returns how many it withdrew.
func (m *Manager) SettleGone(ctx context.Context) (int, error) {
	gone, err := m.st.GoneProcesses(ctx)
	if err != nil || len(gone) == 0 {
		return 0, err
	}
	list, err := m.st.Approvals(ctx, guard.ApprovalPending)
	if err != nil {
		return 0, fmt.Errorf("settle holds of gone processes: %w", err)
	}
	n := 0
	var errs []error
	for _, a := range list {
		who, ok := gone[a.Process]
		switch {
		case !ok || a.Process == m.opts.Process:
			continue
		case diesWithProcess(a):
			var ended bool
			ended, err = m.st.EndApproval(ctx, a.ID, guard.ApprovalWithdrawn, processGone(who))
			if ended {
				n++
			}
		case a.Scope == guard.ScopeAny && a.SessionEnded.IsZero() && !clientHold(a):
			_, err = m.st.MarkSessionEnded(ctx, a.ID, m.opts.Now())
		default:
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("approval %s: %w", a.ID, err))
		}
	}
	return n, errors.Join(errs...)
}

// processGone is the reason of a withdrawal whose process, named who, is
// gone.
func processGone(who string) string { return ProcessGoneReason + ": " + who }

// endIfProcessGone withdraws a, pending and scoped to its session, when
// the guard process that held it is gone, and returns it as it ended with
// an error wrapping guard.ErrAlreadyDecided that says so: no call could
// use an approval, and a denial would tell no one. It returns nil, nil
// while the process runs, and when someone else ended the approval first
// (the review that follows says how).
func (m *Manager) endIfProcessGone(ctx context.Context, a *guard.Approval) (*guard.Approval, error) {
	gone, err := m.st.GoneProcesses(ctx)
	if err != nil {
		return nil, fmt.Errorf("review %s: %w", a.ID, err)
	}
	who, ok := gone[a.Process]
	if !ok {
		return nil, nil
	}
	ended, err := m.st.EndApproval(ctx, a.ID, guard.ApprovalWithdrawn, processGone(who))
	if err != nil || !ended {
		return nil, err
	}
	if cur, err := m.st.Approval(ctx, a.ID); err == nil {
		a = cur
	}
	return a, fmt.Errorf("%w: the call's guard process is gone (%s), so no call can use this approval: it was withdrawn",
		guard.ErrAlreadyDecided, who)
}

// Reviewer is who approves or denies a held call, and how guard knows:
// Via is "" for a name typed after the UI's token link or given to the
// command line (an unverified identity, its Subject the name),
// guard.ViaOIDC for the organisation's identity provider, guard.ViaPasskey
// for a passkey.
type Reviewer struct {
	Identity guard.Identity
	Via      string
}

// Named is the reviewer of a typed name: unverified.
func Named(name string) Reviewer { return Reviewer{Identity: guard.Identity{Subject: name}} }

// Decide records a person's decision, by a name as typed (see Review). A
// denial needs a reason. A hold past its expiry is expired, not decided.
func (m *Manager) Decide(ctx context.Context, id string, approve bool, by, reason string) (*guard.Approval, error) {
	return m.Review(ctx, id, Named(by), approve, reason, nil)
}

// DecideWith is Decide with before run first, once the approval is known
// to be pending and under the same lock as the decision: the decision is
// recorded only if before succeeds (see store.Holds.ReviewApproval).
func (m *Manager) DecideWith(ctx context.Context, id string, approve bool, by, reason string, before func(*guard.Approval) error) (*guard.Approval, error) {
	return m.Review(ctx, id, Named(by), approve, reason, before)
}

// Review records one person's review of a held call. Without approvers
// the first review decides, as Decide does. With them (guard.Approvers),
// the call stays pending until Needed distinct people they allow have
// approved, and the first denial by one of them ends it; a review by
// someone they do not allow, by a typed name where they need verified
// identities, or by the caller whose call is held is refused (the error
// wraps guard.ErrNotApprover and says who may), as is a second review by
// one person (guard.ErrAlreadyReviewed). Each review is in the audit log
// before it counts. A review of a hold scoped to its session whose guard
// process is gone is refused too: the hold is withdrawn (recorded so) and
// the error wraps guard.ErrAlreadyDecided, saying the call's guard process
// is gone. before, as for DecideWith, runs only with the review
// that decides; an approval with approvers takes none: one person's
// "allow from now on" would let later calls past the people it needs.
func (m *Manager) Review(ctx context.Context, id string, by Reviewer, approve bool, reason string, before func(*guard.Approval) error) (*guard.Approval, error) {
	if !approve && strings.TrimSpace(reason) == "" {
		return nil, errors.New("a denial needs a reason")
	}
	if strings.TrimSpace(by.Identity.Subject) == "" {
		return nil, errors.New("a decision needs the name of who decides")
	}
	a, err := m.st.Approval(ctx, id)
	if err != nil {
		return nil, err
	}
	if a.State == guard.ApprovalPending && !m.opts.Now().Before(a.ExpiresAt) {
		if _, err := m.st.EndApproval(ctx, id, guard.ApprovalExpired, ExpiredReason); err != nil {
			return nil, err
		}
	}
	if a.State == guard.ApprovalPending && diesWithProcess(a) {
		if ended, err := m.endIfProcessGone(ctx, a); err != nil || ended != nil {
			return ended, err
		}
	}
	if before != nil && !a.Approvers.IsZero() {
		return nil, fmt.Errorf("%w: this call needs %s; a rule that allows its tool from now on cannot be learned from it",
			guard.ErrNotApprover, a.Approvers)
	}
	return m.st.ReviewApproval(ctx, id, by.Identity, by.Via, approve, reason, before)
}

// Waiting says, for people, what a pending approval with approvers still
// needs: "1 more approval from members of sre", or "" when it has none
// (one decision by anyone).
func Waiting(a *guard.Approval) string {
	if a.Approvers.IsZero() {
		return ""
	}
	left := a.Approvers.Needed() - guard.Approvals(a.Reviews)
	if left <= 0 {
		return ""
	}
	n := "1 more approval"
	if left > 1 {
		n = fmt.Sprintf("%d more approvals", left)
	}
	who := a.Approvers.Who()
	if who == "anyone" {
		who = "anyone else"
	}
	return n + " from " + who + ", each a verified identity"
}

// ExpireDue expires pending approvals past their expiry.
func (m *Manager) ExpireDue(ctx context.Context) (int, error) {
	list, err := m.st.Approvals(ctx, guard.ApprovalPending)
	if err != nil {
		return 0, err
	}
	n := 0
	now := m.opts.Now()
	for _, a := range list {
		if now.Before(a.ExpiresAt) {
			continue
		}
		ok, err := m.st.EndApproval(ctx, a.ID, guard.ApprovalExpired, ExpiredReason)
		if err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	return n, nil
}

// HeldForReview reports whether a is a call held for the review of one
// tool definition (server, tool, pin).
func HeldForReview(a *guard.Approval, server, tool, pin string) bool {
	return a.Rule == guard.ToolReviewRule && a.Server == server && a.Tool == tool && a.Pin == pin
}

// ReviewDecider decides one held call, as a person whose identity was
// verified as Reviewer says (Manager.Review).
type ReviewDecider interface {
	Review(ctx context.Context, id string, by Reviewer, approve bool, reason string, before func(*guard.Approval) error) (*guard.Approval, error)
}

// ReleasesHeld reports whether accepting a tool definition releases the
// calls held for its review to the rules, and when it does not, why. It
// does not when the change from the definition accepted before (changes,
// guard.DiffTools) weakens a hint the rules read (Change.Weakens), or
// when the scanner flagged the definition (r's cause, or its flags): the
// rules would judge those calls by a claim of less caution, or the model
// made them after reading instructions aimed at it. Accepting the
// definition says it may be used from now on, not that each call made
// while it was in doubt should run: each of those needs a person's own
// decision.
func ReleasesHeld(changes []guard.Change, r *guard.Review) (bool, string) {
	var hints []string
	for _, c := range changes {
		if c.Weakens {
			hints = append(hints, strings.TrimPrefix(c.Member, "annotations."))
		}
	}
	var why []string
	if len(hints) > 0 {
		why = append(why, "the change weakens "+andList(hints))
	}
	if r != nil && (r.Cause == guard.CauseFlagged || len(r.Flags) > 0) {
		why = append(why, "the scanner flagged its descriptions")
	}
	return len(why) == 0, strings.Join(why, "; ")
}

// andList joins words as a sentence lists them: "a", "a and b", "a, b and c".
func andList(ws []string) string {
	if len(ws) < 2 {
		return strings.Join(ws, "")
	}
	return strings.Join(ws[:len(ws)-1], ", ") + " and " + ws[len(ws)-1]
}

// Settled is what deciding on a tool definition did with the calls held
// for its review.
type Settled struct {
	Accepted bool
	// Decided are the calls released to the rules (accepted) or denied
	// (rejected).
	Decided int
	// Kept are the calls left pending when accepting did not release them
	// (ReleasesHeld), Why says why: each waits for its own decision.
	Kept int
	Why  string
}

// String says it for people, as guard tools accept prints it and the UI
// shows it: "2 held call(s) released to the rules"; "" when no call was
// held for the definition.
func (s Settled) String() string {
	var out []string
	if s.Decided > 0 {
		verb := "denied"
		if s.Accepted {
			verb = "released to the rules"
		}
		out = append(out, fmt.Sprintf("%d held call(s) %s", s.Decided, verb))
	}
	if s.Kept > 0 {
		out = append(out, fmt.Sprintf("%d held call(s) still wait: %s; each needs its own decision", s.Kept, s.Why))
	}
	return strings.Join(out, "; ")
}

// SettleReview settles the calls of pending held for the review of one
// tool definition, once a person has decided on it (r, accepted or
// rejected): rejected, they are denied; accepted, they go on to the rules
// unless ReleasesHeld(changes, r) says otherwise, when each stays pending
// for its own decision. reason is the decisions' reason, by who decides
// (a typed name, or a verified identity: a call held where decisions need
// one takes only that, and is left pending otherwise, with an error). A
// call someone else decided meanwhile is skipped; other failures are
// returned together.
func SettleReview(ctx context.Context, d ReviewDecider, pending []*guard.Approval, r *guard.Review, changes []guard.Change, by Reviewer, reason string) (Settled, error) {
	s := Settled{Accepted: r.State == guard.ReviewAccepted}
	release := !s.Accepted
	if s.Accepted {
		release, s.Why = ReleasesHeld(changes, r)
	}
	var errs []error
	for _, a := range pending {
		if !HeldForReview(a, r.Server, r.Name, r.Pin) {
			continue
		}
		if !release {
			s.Kept++
			continue
		}
		if _, err := d.Review(ctx, a.ID, by, s.Accepted, reason, nil); err != nil {
			if !errors.Is(err, guard.ErrAlreadyDecided) {
				errs = append(errs, fmt.Errorf("held call %s: %w", a.ID, err))
			}
			continue
		}
		s.Decided++
	}
	return s, errors.Join(errs...)
}

// Definitions are the tool definitions DecideDefinition reads and
// decides on; store.DB implements it.
type Definitions interface {
	// AcceptedTool returns the definition accepted most recently, nil
	// when none is; ToolByPin one definition, nil when unknown.
	AcceptedTool(ctx context.Context, server, name string) (*guard.Tool, error)
	ToolByPin(ctx context.Context, server, name, pin string) (*guard.Tool, error)
	DecideTool(ctx context.Context, server, name, pin string, accept bool, by string) (*guard.Review, error)
}

// Held lists the held calls in a state, which DecideDefinition settles;
// store.Holds implements it.
type Held interface {
	Approvals(ctx context.Context, state string) ([]*guard.Approval, error)
}

// DecideDefinition records a person's acceptance or rejection of one
// definition of a tool (pin), then settles the calls held for its review
// (SettleReview), with reason ("" says the definition was accepted or
// rejected). What changed since the definition accepted before is read
// first: once this one is accepted, it is the accepted one. It returns
// the review as decided; an error with a nil review means nothing was
// decided, one with a review that held calls could not all be settled.
func DecideDefinition(ctx context.Context, st Definitions, held Held, d ReviewDecider, server, name, pin string, accept bool, by Reviewer, reason string) (*guard.Review, Settled, error) {
	if pin == "" {
		// What changed is read from the definition decided: without
		// its pin, a weakening change would release its calls.
		return nil, Settled{}, fmt.Errorf("decide %s/%s: which definition (its pin) is not given", server, name)
	}
	changes, err := changesSinceAccepted(ctx, st, server, name, pin)
	if err != nil {
		return nil, Settled{}, err
	}
	r, err := st.DecideTool(ctx, server, name, pin, accept, by.Identity.Name())
	if err != nil {
		return nil, Settled{}, err
	}
	pending, err := held.Approvals(ctx, guard.ApprovalPending)
	if err != nil {
		return r, Settled{Accepted: accept}, fmt.Errorf("held calls: %w", err)
	}
	if reason == "" {
		reason = "the tool's definition was " + r.State
	}
	s, err := SettleReview(ctx, d, pending, r, changes, by, reason)
	return r, s, err
}

// changesSinceAccepted lists what changed from the definition of a tool
// accepted most recently to the one with pin: none when no other was
// ever accepted.
func changesSinceAccepted(ctx context.Context, st Definitions, server, name, pin string) ([]guard.Change, error) {
	old, err := st.AcceptedTool(ctx, server, name)
	if err != nil {
		return nil, fmt.Errorf("accepted definition of %s/%s: %w", server, name, err)
	}
	cur, err := st.ToolByPin(ctx, server, name, pin)
	if err != nil {
		return nil, fmt.Errorf("definition of %s/%s: %w", server, name, err)
	}
	if old == nil || cur == nil || old.Pin == cur.Pin {
		return nil, nil
	}
	return guard.DiffTools(old.Def, cur.Def), nil
}

// ClientGoneText says what approving a pending approval whose client has
// gone does, when it stays open for that (approval.scope: any): it does
// not run the call, which nobody waits for; it lets the same call through
// once when a client makes it again. at writes the time the client went.
// It is "" for any other approval.
func ClientGoneText(a *guard.Approval, at func(time.Time) string) string {
	if a.State != guard.ApprovalPending || a.SessionEnded.IsZero() || a.Scope != guard.ScopeAny {
		return ""
	}
	return "Its client is gone (at " + at(a.SessionEnded) + "). Approving does not run this call: it lets the same call " +
		"through once when a client makes it again (same server, tool and arguments, any session; approval.scope: any)."
}

// KeptAfterReview says, for a call held for the review of its tool's
// definition (r) that a person accepted without releasing it
// (ReleasesHeld), that it needs its own decision; at writes the time of
// the acceptance. It is "" for any other call or review.
func KeptAfterReview(a *guard.Approval, r *guard.Review, at func(time.Time) string) string {
	if a.State != guard.ApprovalPending || r == nil || r.State != guard.ReviewAccepted || !HeldForReview(a, r.Server, r.Name, r.Pin) {
		return ""
	}
	return "Held for the review of its tool's definition, which was accepted at " + at(r.DecidedAt) + " by " + r.DecidedBy +
		"; this call needs its own decision. Approving lets it go on to the rules, which judge it by the accepted definition."
}
