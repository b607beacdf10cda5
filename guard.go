// Package guard holds the domain types that guard's packages share: audit
// records, tool definitions, policy decisions and held calls. It has no
// behaviour of its own beyond small helpers on those types, so that the relay
// (proxy), the rules (policy), the holds (approvals) and the storage (store)
// can depend on it without depending on each other.
package guard

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/google/uuid"
)

// Protocol revisions guard knows. Comparisons between revisions are plain
// string comparisons: the dates sort.
const (
	Rev20241105 = "2024-11-05"
	Rev20250326 = "2025-03-26"
	Rev20250618 = "2025-06-18"
	Rev20251125 = "2025-11-25"
	Rev20260728 = "2026-07-28"
)

// Record kinds. Every request in either direction has a request record
// (committed before the request is forwarded) and an outcome record
// (committed before the answer is delivered), linked by CallID. Events are
// things guard noticed that belong to no invocation: a line it refused, a
// response with an unknown id, a server that exited.
const (
	KindRequest = "request"
	KindOutcome = "outcome"
	KindEvent   = "event"
	// KindDecision is a person's approve or deny of a held call, or its
	// expiry or withdrawal; its CallID is the held call's, Approval the
	// approval's id.
	KindDecision = "decision"
	// KindToolReview is a tool definition accepted or rejected.
	KindToolReview = "tool_review"
	// KindRuleAdded is a policy rule learned from an approval.
	KindRuleAdded = "rule_added"
	// KindConfig is a configuration loaded, with its digest.
	KindConfig = "config"
	// KindLifecycle is guard starting or stopping.
	KindLifecycle = "lifecycle"
	// KindRetention is the retention job removing the bodies of records
	// past audit.retention, after archiving them: its Detail names the
	// records, the archive file and its SHA-256.
	KindRetention = "retention"
)

// Directions of a request.
const (
	ClientToServer = "client_to_server"
	ServerToClient = "server_to_client"
)

// Decisions on a tools/call (and, later, other gated methods).
const (
	DecisionAllowed = "allowed"
	DecisionDenied  = "denied"
	DecisionHeld    = "held"
)

// Outcomes of an invocation.
const (
	OutcomeOK             = "ok"
	OutcomeToolError      = "tool_error"
	OutcomeProtocolError  = "protocol_error"
	OutcomeDenied         = "denied"
	OutcomeExpired        = "expired"
	OutcomeCancelled      = "cancelled"
	OutcomeInvalid        = "invalid"
	OutcomeUpstreamFailed = "upstream_failed"
	// OutcomeInputRequired marks one round of a 2026-07-28 call that the
	// server answered with resultType "input_required": the call goes on.
	OutcomeInputRequired = "input_required"
	// OutcomeAwaitingApproval ends a held call that waited approval.wait
	// without a decision: the client was told to retry once the person
	// has decided, and the approval stays open until it expires.
	OutcomeAwaitingApproval = "awaiting_approval"
)

// Identity is who a caller or an approver is, as an identity provider
// vouched for it (a verified access token, an OIDC login): its subject,
// email and groups. The zero Identity is no one: nobody authenticated.
type Identity struct {
	Subject string   `json:"sub,omitempty"`
	Email   string   `json:"email,omitempty"`
	Groups  []string `json:"groups,omitempty"`
}

// IsZero reports whether no one authenticated.
func (i Identity) IsZero() bool { return i.Subject == "" }

// Record is one append-only audit record. The store assigns Seq, PrevHash and
// Hash when it commits the record; everything else is filled in by the
// writer of the record. Text fields that hold JSON (Arguments, Result,
// Detail) hold it as text, exactly as it is stored and hashed.
type Record struct {
	Seq     int64     `json:"seq"`
	ID      string    `json:"id"`      // UUIDv7 of this record
	CallID  string    `json:"call_id"` // UUIDv7 shared by the request and outcome of one invocation
	Kind    string    `json:"kind"`    // KindRequest, KindOutcome, KindEvent
	Time    time.Time `json:"time"`
	Session string    `json:"session"`
	Client  string    `json:"client"` // bearer token name, else clientInfo "name/version"
	// User, UserEmail and UserGroups are the caller the front
	// authenticated (a verified access token): empty where no one did.
	User       string   `json:"user,omitempty"`
	UserEmail  string   `json:"user_email,omitempty"`
	UserGroups []string `json:"user_groups,omitempty"`
	Protocol   string   `json:"protocol"` // negotiated revision
	Server     string   `json:"server"`
	Direction  string   `json:"direction"`
	Method     string   `json:"method"`
	Tool       string   `json:"tool,omitempty"`
	Arguments  string   `json:"arguments,omitempty"` // redacted JSON text
	Pin        string   `json:"pin,omitempty"`
	Decision   string   `json:"decision,omitempty"`
	DecidedBy  string   `json:"decided_by,omitempty"` // rule name, "default", or a person
	// Approval is the id of the approval a held call waited on, or that a
	// decision record decides.
	Approval string `json:"approval,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Outcome  string `json:"outcome,omitempty"`
	Result   string `json:"result,omitempty"` // redacted, truncated JSON text
	// RequestSize and ResponseSize are the sizes in bytes of the message as
	// it crossed guard.
	RequestSize  int64 `json:"request_size,omitempty"`
	ResponseSize int64 `json:"response_size,omitempty"`
	DurationMS   int64 `json:"duration_ms,omitempty"`
	// Detail is a JSON object for what has no column of its own yet
	// (error codes, the id of a dropped response, an exit status).
	Detail   string `json:"detail,omitempty"`
	PrevHash string `json:"prev_hash"`
	Hash     string `json:"hash"`
	// Pruned is set once retention removed the record's body: only Seq,
	// ID, CallID, Kind, Time, PrevHash and Hash are left, and the body
	// is in an archive. It is not part of the hashed form.
	Pruned bool `json:"pruned,omitempty"`
}

// Tool is one tool definition as a server listed it. Def is the tool object
// exactly as received; Pin is computed over its pinned members (see
// policy.Pin / store). Annotations are decoded from Def for policy.
type Tool struct {
	Server      string
	Name        string
	Def         json.RawMessage
	Pin         string
	Annotations Annotations
	// Flags are what a scan of the definition's descriptions found:
	// instructions aimed at the model rather than a description.
	Flags []Flag
}

// Flag is one finding of the description scan.
type Flag struct {
	Kind     string `json:"kind"`
	Where    string `json:"where"`
	Evidence string `json:"evidence"`
}

// Review states: whether a tool definition (by pin) may be used.
const (
	ReviewAccepted = "accepted"
	ReviewPending  = "pending"
	ReviewRejected = "rejected"
)

// Review causes: why a definition needed (or did not need) a person.
const (
	CauseBaseline = "baseline" // in the server's first listing
	CauseNew      = "new"      // a tool that appeared after the baseline
	CauseChanged  = "changed"  // a tool whose definition changed
	CauseFlagged  = "flagged"  // descriptions that carry instructions for the model
)

// Review is how one tool definition stands.
type Review struct {
	Server    string
	Name      string
	Pin       string
	State     string
	Cause     string
	Flags     []Flag
	DecidedBy string
	DecidedAt time.Time
	CreatedAt time.Time
}

// Annotations are a tool's behaviour hints as the server declared them. A nil
// pointer means the hint is absent; Effective fills in the spec's defaults.
type Annotations struct {
	ReadOnlyHint    *bool `json:"readOnlyHint,omitempty"`
	DestructiveHint *bool `json:"destructiveHint,omitempty"`
	IdempotentHint  *bool `json:"idempotentHint,omitempty"`
	OpenWorldHint   *bool `json:"openWorldHint,omitempty"`
}

// Effective returns the hints with the specification's defaults filled in:
// readOnly false, destructive true, idempotent false, openWorld true.
func (a Annotations) Effective() (readOnly, destructive, idempotent, openWorld bool) {
	readOnly, destructive, idempotent, openWorld = false, true, false, true
	if a.ReadOnlyHint != nil {
		readOnly = *a.ReadOnlyHint
	}
	if a.DestructiveHint != nil {
		destructive = *a.DestructiveHint
	}
	if a.IdempotentHint != nil {
		idempotent = *a.IdempotentHint
	}
	if a.OpenWorldHint != nil {
		openWorld = *a.OpenWorldHint
	}
	return
}

// Call is what policy decides on: one request from a client, with the
// definition the catalog holds for its tool (nil when the method is not a
// tool call or the tool is unknown).
type Call struct {
	Server    string
	Method    string
	ToolName  string
	Arguments json.RawMessage // the arguments exactly as the server will read them
	// Args are the arguments decoded (objects as map[string]any, numbers
	// as json.Number), by whoever needed them first; nil until then.
	Args any
	URI  string    // the resource of a resources/read
	Time time.Time // when the call was made (now when zero)
	Tool *Tool
	// Violations lists how the arguments break the tool's inputSchema
	// ("" when they do not): such a call is refused before any rule.
	Violations string
	// Review is how the tool's definition stands (nil: accepted, or not
	// reviewed); ReviewReason says, for a pending one, what needs a look.
	Review       *Review
	ReviewReason string
	Client       ClientInfo
	// User is who the front authenticated for the call's session (a
	// verified access token); zero where no one did.
	User Identity
}

// ClientInfo identifies the client of a session.
type ClientInfo struct {
	Name     string
	Version  string
	Protocol string
}

// String renders the client as it appears in the audit log.
func (c ClientInfo) String() string {
	switch {
	case c.Name == "":
		return ""
	case c.Version == "":
		return c.Name
	}
	return c.Name + "/" + c.Version
}

// Actions a rule or the default can take.
const (
	ActionAllow   = "allow"
	ActionDeny    = "deny"
	ActionApprove = "approve" // hold for a person
)

// Verdict is the outcome of policy evaluation: an action, the rule that
// decided it ("default" for the default, "guard-self-protection" for the
// built-in rule) and a reason for people.
type Verdict struct {
	Action string
	Rule   string
	Reason string
	// Would is what enforcement would have done when policy.mode is
	// monitor and it differs from Action (which is then allow): "deny" or
	// "approve". Empty otherwise.
	Would string
	// PolicyVersion identifies the rules in force (a digest of the loaded
	// configuration), so that an approval is bound to the policy it was
	// given under.
	PolicyVersion string
	// Approvers says who may approve a call the verdict holds, and how
	// many must: the rule's approvers, else its server's (zero: anyone,
	// once).
	Approvers Approvers
}

// Approval states. A held call starts pending and leaves it exactly once.
// An approved approval is consumed (used) by the one call it lets through.
const (
	ApprovalPending   = "pending"
	ApprovalApproved  = "approved"
	ApprovalDenied    = "denied"
	ApprovalExpired   = "expired"
	ApprovalWithdrawn = "withdrawn"
	ApprovalUsed      = "used"
)

// Round is a 2026-07-28 tool call that its server answered
// input_required: what the client's next round continues, as the same call
// under the same decision, on whichever replica it lands.
type Round struct {
	CallID     string
	Tool       string
	ArgsDigest string // guard.Digest of the call's arguments
	Pin        string
	Decision   string
	DecidedBy  string
	Reason     string
}

// Approval is a held call waiting for, or having had, a person's decision.
// Its ID is the held call's id. Arguments are complete (the approver must
// see what they approve); the audit log keeps only the redacted form.
type Approval struct {
	ID string
	// CallID is the held call's id: the approval's own id unless the call
	// was held before (after its tool's review). Empty for approvals
	// stored before it was kept; ID stands for it then.
	CallID  string
	Session string
	Client  string
	// Caller is who the front authenticated for the held call's
	// session, zero where no one did: the records of its decision name
	// it, as the call's own records do.
	Caller        Identity
	Server        string
	Tool          string
	Arguments     string // complete JSON text
	Digest        string // sha256 over the canonical arguments
	Pin           string
	PolicyVersion string
	Rule          string // the rule (or "default") that held it
	HeldReason    string // why it was held, for people
	State         string
	DecidedBy     string
	Reason        string // the decider's reason
	CreatedAt     time.Time
	ExpiresAt     time.Time
	DecidedAt     time.Time
	UsedAt        time.Time
	// Approvers says who may decide and how many must approve; the
	// verdict that held the call gave it (zero: anyone, once). Whoever
	// they allow, the Caller cannot decide on their own call.
	Approvers Approvers
	// Reviews are the people's approvals and denials so far, oldest
	// first; DecidedBy is the one whose review decided.
	Reviews []ApprovalReview
	// Scope is which repeated call the approval lets through, once:
	// ScopeSession, only one from the held call's session; ScopeAny,
	// one from any session.
	Scope string
	// SessionEnded is when the held call's session ended while the
	// approval was still open (zero while it goes on).
	SessionEnded time.Time
	// Process is the id of the guard process that held the call, the
	// one it beats under in the database; "" for approvals held before
	// guard kept it. A session before 2026-07-28 lives in that process
	// alone: once it is gone, nothing can use a hold scoped to the
	// session.
	Process string
	// RequiredVia is how whoever decides must have been verified, as the
	// configuration of the process that held the call required then:
	// ViaPasskey (ui.passkey: required), ViaOIDC (the UI logs in only
	// through the identity provider), "" where a typed name may decide.
	// It is fixed with the hold, as Approvers are: a process with
	// another configuration (a command run with another --config) may
	// not decide it otherwise.
	RequiredVia string
}

// The scopes of an approval (approval.scope).
const (
	ScopeSession = "session"
	ScopeAny     = "any"
)

// ClientHold begins the Session of a 2026-07-28 hold: that revision has
// no session, and the hold belongs to the client (the rest is the
// client's key), whichever process relays its next call.
const ClientHold = "client:"

// Errors callers branch on.
var (
	// ErrAlreadyDecided is returned when a decision arrives for an approval
	// that is no longer pending; the error wrapping it says who decided
	// and when.
	ErrAlreadyDecided = errors.New("already decided")
	// ErrNotFound is returned for an unknown approval, record or tool.
	ErrNotFound = errors.New("not found")
	// ErrAuditWrite is returned when the audit log could not be written;
	// the call it belongs to must not go on.
	ErrAuditWrite = errors.New("the audit log could not be written")
)

// NewID returns a new identifier for a record, a call or a session: a
// UUIDv7, so that identifiers sort by creation time.
func NewID() string {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString()
	}
	return id.String()
}
