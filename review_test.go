package guard

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestApprovalReview(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	alice := Identity{Subject: "alice", Email: "alice@example.com", Groups: []string{"sre"}}
	bob := Identity{Subject: "bob", Email: "bob@example.com", Groups: []string{"sre"}}
	carol := Identity{Subject: "carol", Email: "carol@example.com"}
	two := Approvers{Groups: []string{"sre"}, Count: 2}
	approve := func(by Identity) ApprovalReview {
		return ApprovalReview{By: by, Via: ViaOIDC, Approve: true, Reason: "ok", Time: at}
	}
	deny := func(by Identity) ApprovalReview {
		return ApprovalReview{By: by, Via: ViaOIDC, Reason: "no", Time: at}
	}
	tests := []struct {
		name    string
		a       Approval
		rv      ApprovalReview
		want    string
		wantErr error
		text    string
	}{
		{name: "pending → approved: one approval needed", a: Approval{State: ApprovalPending}, rv: approve(carol), want: ApprovalApproved},
		{name: "pending → denied", a: Approval{State: ApprovalPending}, rv: deny(carol), want: ApprovalDenied},
		{name: "pending → pending: a second approval is needed", a: Approval{State: ApprovalPending, Approvers: two},
			rv: approve(alice), want: ApprovalPending},
		{name: "pending → approved: the second distinct approval",
			a: Approval{State: ApprovalPending, Approvers: two, Reviews: []ApprovalReview{approve(alice)}}, rv: approve(bob),
			want: ApprovalApproved},
		{name: "pending → denied: one denial of several needed",
			a: Approval{State: ApprovalPending, Approvers: two, Reviews: []ApprovalReview{approve(alice)}}, rv: deny(bob),
			want: ApprovalDenied},
		{name: "the same person counts once",
			a: Approval{State: ApprovalPending, Approvers: two, Reviews: []ApprovalReview{approve(alice)}}, rv: approve(alice),
			wantErr: ErrAlreadyReviewed},
		{name: "outside the approvers", a: Approval{State: ApprovalPending, Approvers: two}, rv: approve(carol),
			wantErr: ErrNotApprover},
		{name: "the caller", a: Approval{State: ApprovalPending, Caller: carol}, rv: approve(carol), wantErr: ErrNotApprover},
		{name: "approved already", a: Approval{State: ApprovalApproved, DecidedBy: "bob", DecidedAt: at}, rv: deny(carol),
			wantErr: ErrAlreadyDecided, text: "approved by bob at 2026-01-02T03:04:05Z"},
		{name: "used already", a: Approval{State: ApprovalUsed, DecidedBy: "bob", DecidedAt: at}, rv: deny(carol),
			wantErr: ErrAlreadyDecided, text: "approved by bob"},
		{name: "denied already", a: Approval{State: ApprovalDenied, DecidedBy: "bob", DecidedAt: at}, rv: approve(carol),
			wantErr: ErrAlreadyDecided, text: "denied by bob"},
		{name: "expired", a: Approval{State: ApprovalExpired, DecidedAt: at}, rv: approve(carol),
			wantErr: ErrAlreadyDecided, text: "expired at 2026-01-02T03:04:05Z with no decision"},
		{name: "withdrawn, why kept", a: Approval{State: ApprovalWithdrawn, DecidedAt: at, Reason: "session ended"},
			rv: approve(carol), wantErr: ErrAlreadyDecided, text: "withdrawn at 2026-01-02T03:04:05Z: session ended"},
		{name: "withdrawn, before why was kept", a: Approval{State: ApprovalWithdrawn, DecidedAt: at}, rv: approve(carol),
			wantErr: ErrAlreadyDecided, text: "withdrawn by the client"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := tt.a
			before := len(a.Reviews)
			got, err := a.Review(tt.rv)
			if !errors.Is(err, tt.wantErr) || tt.wantErr == nil && err != nil {
				t.Fatalf("Review: %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				if !strings.Contains(err.Error(), tt.text) {
					t.Fatalf("Review: %q does not say %q", err, tt.text)
				}
				return
			}
			if got != tt.want {
				t.Fatalf("Review: %s, want %s", got, tt.want)
			}
			if len(a.Reviews) != before || a.State != tt.a.State {
				t.Fatal("Review changed the approval")
			}
			a.Arguments = "{}"
			a.Reviewed(tt.rv, got)
			if len(a.Reviews) != before+1 {
				t.Fatalf("Reviewed kept %d reviews, want %d", len(a.Reviews), before+1)
			}
			switch {
			case got == ApprovalPending && (a.State != ApprovalPending || a.Arguments == ""):
				t.Fatalf("a review that does not decide changed the state to %s or dropped the arguments", a.State)
			case got != ApprovalPending && (a.State != got || a.DecidedBy != tt.rv.By.Name() || a.Reason != tt.rv.Reason ||
				!a.DecidedAt.Equal(at) || a.Arguments != ""):
				t.Fatalf("a deciding review left %+v", a)
			}
		})
	}
}

func TestApprovalEnd(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		state, to string
		wantErr   error
	}{
		{ApprovalPending, ApprovalExpired, nil},
		{ApprovalPending, ApprovalWithdrawn, nil},
		{ApprovalPending, ApprovalApproved, errAny},
		{ApprovalPending, ApprovalUsed, errAny},
		{ApprovalApproved, ApprovalExpired, ErrAlreadyDecided},
		{ApprovalDenied, ApprovalWithdrawn, ErrAlreadyDecided},
		{ApprovalExpired, ApprovalExpired, ErrAlreadyDecided},
		{ApprovalWithdrawn, ApprovalExpired, ErrAlreadyDecided},
	}
	for _, tt := range tests {
		t.Run(tt.state+"→"+tt.to, func(t *testing.T) {
			a := Approval{ID: "h1", State: tt.state, Arguments: "{}"}
			err := a.End(tt.to)
			switch {
			case tt.wantErr == nil && err != nil, tt.wantErr == errAny && err == nil,
				tt.wantErr != nil && tt.wantErr != errAny && !errors.Is(err, tt.wantErr):
				t.Fatalf("End: %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				if a.State != tt.state {
					t.Fatal("a refused end changed the approval")
				}
				return
			}
			a.Ended(tt.to, "why", at)
			if a.State != tt.to || a.Reason != "why" || !a.DecidedAt.Equal(at) || a.Arguments != "" {
				t.Fatalf("Ended left %+v", a)
			}
		})
	}
}

// errAny stands for any error in TestApprovalEnd's table.
var errAny = errors.New("any error")
