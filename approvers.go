package guard

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Approvers says who may decide on a held call and how many distinct people
// must approve it: a rule's or a server's `approvers:`. Users match an
// identity's subject or email; Groups its groups. The zero Approvers is one
// decision by anyone who can reach the UI or the command line.
type Approvers struct {
	Groups []string `json:"groups,omitempty"`
	Users  []string `json:"users,omitempty"`
	Count  int      `json:"count,omitempty"`
}

// IsZero reports whether a does not restrict who decides nor ask for more
// than one approval.
func (a Approvers) IsZero() bool { return len(a.Groups) == 0 && len(a.Users) == 0 && a.Count <= 1 }

// Needed is how many distinct people must approve: Count, at least one.
func (a Approvers) Needed() int { return max(a.Count, 1) }

// NeedsVerified reports whether only verified identities (an OIDC login, a
// passkey) may decide: whenever a says who may, or asks for more than one
// approval. A typed name proves nothing about who typed it, so it can
// neither count as one of several people nor stand for a member of a group.
func (a Approvers) NeedsVerified() bool { return !a.IsZero() }

// Allows reports whether id may decide under a: anyone when a names no
// groups and no users, else a member of one of its groups, or one of its
// users by subject or (case aside) email.
func (a Approvers) Allows(id Identity) bool {
	if len(a.Groups) == 0 && len(a.Users) == 0 {
		return true
	}
	for _, u := range a.Users {
		if u == id.Subject || id.Email != "" && strings.EqualFold(u, id.Email) {
			return true
		}
	}
	for _, g := range a.Groups {
		if slices.Contains(id.Groups, g) {
			return true
		}
	}
	return false
}

// Who says, for people, who may decide under a: "anyone", or the groups
// and users it names ("members of sre, or alice@example.com").
func (a Approvers) Who() string {
	var parts []string
	if len(a.Groups) > 0 {
		parts = append(parts, "members of "+strings.Join(a.Groups, ", "))
	}
	if len(a.Users) > 0 {
		parts = append(parts, strings.Join(a.Users, ", "))
	}
	if len(parts) == 0 {
		return "anyone"
	}
	return strings.Join(parts, ", or ")
}

// String says what a asks for: "2 approvals from members of sre".
func (a Approvers) String() string {
	n := "1 approval"
	if a.Needed() > 1 {
		n = fmt.Sprintf("%d approvals", a.Needed())
	}
	if len(a.Groups) == 0 && len(a.Users) == 0 {
		return n + " from distinct verified people"
	}
	return n + " from " + a.Who()
}

// Name is how an identity is shown and recorded as a decider: its email
// when it has one, else its subject.
func (i Identity) Name() string {
	if i.Email != "" {
		return i.Email
	}
	return i.Subject
}

// Same reports whether i and o are one person: the same subject, or the
// same email (case aside). Two identity providers (the front's, the UI's)
// may give one person different subjects but the same email.
func (i Identity) Same(o Identity) bool {
	if i.IsZero() || o.IsZero() {
		return false
	}
	return i.Subject == o.Subject || i.Email != "" && strings.EqualFold(i.Email, o.Email)
}

// Ways an approver's identity was verified (ApprovalReview.Via): a name
// typed after the UI's token link proves nothing and is "".
const (
	ViaOIDC    = "oidc"
	ViaPasskey = "passkey"
)

// ApprovalReview is one person's approve or deny of a held call. A held
// call with Approvers stays pending until enough distinct allowed people
// approved; the first denial by an allowed person ends it.
type ApprovalReview struct {
	By      Identity  `json:"by"`
	Via     string    `json:"via,omitempty"`
	Approve bool      `json:"approve"`
	Reason  string    `json:"reason,omitempty"`
	Time    time.Time `json:"time"`
}

// Approvals counts the distinct people whose reviews approve.
func Approvals(reviews []ApprovalReview) int {
	n := 0
	for _, r := range reviews {
		if r.Approve {
			n++
		}
	}
	return n
}

// MayReview refuses, with an error that says why and who may decide, a
// review of a by a person the approval's rules do not allow: the caller
// whose call is held, an identity not verified as RequiredVia says, an
// unverified identity (via "") where Approvers need verified ones,
// someone outside its groups and users, or someone who reviewed it
// already. It does not look at a's state.
func (a *Approval) MayReview(by Identity, via string) error {
	switch {
	case by.Same(a.Caller):
		return fmt.Errorf("%w: %s made this call, and cannot decide on it: someone else must", ErrNotApprover, by.Name())
	case a.RequiredVia != "" && via != a.RequiredVia:
		what, where := RequiredViaText(a.RequiredVia)
		return fmt.Errorf("%w: this call was held where decisions need %s, and %s: %s",
			ErrNotApprover, what, reviewerIs(by, via), where)
	case a.Approvers.NeedsVerified() && via == "":
		return fmt.Errorf("%w: this call needs %s, and %q is a typed name, not a verified identity: log in to the UI through the identity provider, or with a passkey",
			ErrNotApprover, a.Approvers, by.Name())
	case !a.Approvers.Allows(by):
		return fmt.Errorf("%w: %s may not decide on this call; %s may", ErrNotApprover, by.Name(), a.Approvers.Who())
	}
	for _, r := range a.Reviews {
		if r.By.Same(by) {
			left := a.Approvers.Needed() - Approvals(a.Reviews)
			return fmt.Errorf("%w: %s approved this call at %s, and counts once; it needs %d more approval(s) from someone else",
				ErrAlreadyReviewed, by.Name(), r.Time.UTC().Format(time.RFC3339), left)
		}
	}
	return nil
}

// RequiredViaText says, for people, what a held call's RequiredVia asks
// for, with the setting that asked for it, and where a person decides so;
// "" for none.
func RequiredViaText(via string) (what, where string) {
	switch via {
	case "":
		return "", ""
	case ViaPasskey:
		return "the approver's passkey (ui.passkey: required)", "decide in the UI, with your passkey"
	case ViaOIDC:
		return "a login through the identity provider (ui.oidc with ui.token_login: false)",
			"log in to the UI through the identity provider, and decide there"
	}
	return "an identity verified by " + via, "decide in the UI"
}

// reviewerIs says who a refused reviewer is and how guard knows: a typed
// name, quoted as typed, or an identity and how it was verified.
func reviewerIs(by Identity, via string) string {
	switch via {
	case "":
		return fmt.Sprintf("%q is a typed name, not a verified identity", by.Name())
	case ViaOIDC:
		return by.Name() + " was verified by the identity provider"
	case ViaPasskey:
		return by.Name() + " was verified with a passkey"
	}
	return by.Name() + " was verified by " + via
}

// Errors a review is refused with. The error wrapping one says why, and
// who may decide.
var (
	// ErrNotApprover refuses a review by someone the approval's
	// Approvers do not allow: outside its groups and users, an
	// unverified identity where a verified one is needed, an identity
	// not verified as its RequiredVia says, or the caller whose call is
	// held.
	ErrNotApprover = errors.New("not allowed to decide on this call")
	// ErrAlreadyReviewed refuses a second review by the same person.
	ErrAlreadyReviewed = errors.New("already reviewed")
)
