// Package intercept is the tools/call pipeline's state machine: the states
// a call guard intercepts goes through (classify, strict, schema, review,
// policy, hold, record, forward), the events that move it, and one pure
// transition function, Step, from a state and an event to the next state
// and the one thing the relay must do next. Every decision on a call (its
// decision, the rule, the reason, the approval) is made here, and so is
// every way it ends inside guard: the relay (package proxy) reads the
// catalog, the store and the person's answer, turns what it found into an
// event, and carries out the Effect. A call guard answers itself is
// recorded, then answered (Effect End); one it lets through is recorded,
// then forwarded (Effect Forward); one whose record cannot be written is
// refused, never forwarded (Effect Refuse).
//
// The requests the rules decide besides tools/call (resources/read,
// prompts/get, and the server's sampling/createMessage and
// elicitation/create) take the same path, shortened: read, decided, then
// forwarded or refused; only a tool call can be held.
package intercept

import (
	"fmt"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/wire"
)

// CodeDenied is the JSON-RPC error code of a request other than a tool
// call that policy denied.
const CodeDenied = -32001

// State is where a call stands in the pipeline.
type State uint8

// A call's states, in the order it may go through them.
const (
	// Arrived: read from its sender, not yet checked.
	Arrived State = iota
	// Checked: strict, named, its arguments an object; its tool is looked
	// up (an earlier round of the same call, then the catalog).
	Checked
	// Listing: its tool is not in the catalog; guard lists the server's
	// tools.
	Listing
	// Reviewing: its tool's review is read from the store.
	Reviewing
	// Deciding: the rules decide it.
	Deciding
	// Holding: it waits for a person's decision.
	Holding
	// Forwarded: it goes to the server once its request is recorded; the
	// server's answer ends it.
	Forwarded
	// Ended: guard ended it itself (recorded, then answered, or left
	// unanswered when cancelled).
	Ended
)

var stateNames = [...]string{"arrived", "checked", "listing", "reviewing", "deciding", "holding", "forwarded", "ended"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// Call is a call's state: where it stands and what guard decided on it.
// Only Step changes it.
type Call struct {
	State State
	// Recorded: its request record is written (it was held).
	Recorded bool
	// ReviewHold: it is held for its tool's review (guard.ToolReviewRule).
	ReviewHold bool
	// Method is the request's method: tools/call, or another method the
	// rules decide.
	Method string
	// Tool and Args are the tool named and its arguments ({} when none
	// were given), once Checked.
	Tool string
	Args []byte
	// Decision, DecidedBy, Reason and Approval are what its records say.
	Decision, DecidedBy, Reason, Approval string
	// Detail is added to its records' detail (monitor mode's verdict).
	Detail map[string]any
}

// New is a call just read from its sender.
func New(method string) Call { return Call{Method: method} }

// EventKind names what happened to a call.
type EventKind uint8

// The events. Each names the Event fields it carries.
const (
	_ EventKind = iota
	// Read: the call as read. Err is wire.Strict's refusal; Name and
	// Args are params.name and params.arguments as sent (tools/call).
	Read
	// RoundFound: the call continues an earlier round guard let through
	// (Round).
	RoundFound
	// InRound: the client's next round of a call guard asked the person
	// at the client about. Valid: the requestState is guard's for this
	// call; Approval (ID at least) the approval as read, or Err.
	InRound
	// ToolFound: the catalog has its tool; Err is the inputSchema's
	// refusal (Server names the server for it), NeedsReview whether the
	// definition's review must be read.
	ToolFound
	// ToolMissing: the catalog does not have its tool. Once listed,
	// NoAnswer says the server did not answer tools/list within Timeout.
	ToolMissing
	// ReviewRead: the tool's review was read, or Err.
	ReviewRead
	// Decided: the rules' Verdict. SameHeld: an identical call of the
	// session waits for its tool's review; Protocol is the session's
	// revision.
	Decided
	// Withdrawn: the client cancelled it before it was forwarded.
	Withdrawn
	// HoldRefused: it cannot be held: its arguments did not digest
	// (Err), or approvals are not available.
	HoldRefused
	// PriorApproval: a person approved the same call before (Approval);
	// Session is this session's id.
	PriorApproval
	// ClientGone: its client went away (Why) before or while it waited.
	ClientGone
	// PendingFull: Max calls of the session wait already.
	PendingFull
	// Stored: its approval was stored (Approval), or Err.
	Stored
	// Recorded: its request record is written.
	Recorded
	// RecordFailed: its request record could not be written.
	RecordFailed
	// AskedInRound: guard asks the person at the client in the client's
	// next round (2026-07-28); Answer is the input_required result, for
	// Approval.
	AskedInRound
	// SessionEnded: the session ended while it waited (the server's exit
	// answered it).
	SessionEnded
	// Waited: the wait ended (Wait), or Err; Timeout is the approval
	// timeout.
	Waited
)

// Event is what happened to a call: a finding of the relay's. Kind says
// which fields it carries.
type Event struct {
	Kind        EventKind
	Err         error
	Name, Args  []byte
	Round       *guard.Round
	Valid       bool
	Approval    *guard.Approval
	Server      string
	NeedsReview bool
	NoAnswer    bool
	Timeout     time.Duration
	Verdict     guard.Verdict
	SameHeld    bool
	Protocol    string
	Session     string
	Why         string
	Max         int
	Answer      []byte
	Wait        guard.WaitResult
}

// EffectKind names what the relay does next.
type EffectKind uint8

// The effects.
const (
	// None: nothing now (the call waits for its next event, or is over).
	None EffectKind = iota
	// Continue: look for an earlier round of the call, then its tool.
	Continue
	// Find: look its tool up in the catalog.
	Find
	// List: list the server's tools, then look its tool up again.
	List
	// Review: read its tool's review.
	Review
	// Decide: ask the rules; Trusted: on the tool's accepted definition
	// (the call was released from its tool's review).
	Decide
	// Hold: hold it for a person under Verdict.
	Hold
	// Forward: record its request (unless Recorded), then forward it.
	Forward
	// End: record it (its request too when WithRequest), then answer
	// it with Answer; no Answer for a cancelled call. Gone, when set, is
	// why its client went away.
	End
	// Refuse: its request could not be recorded: withdraw its approval
	// and answer with guard's refusal, never forwarding it.
	Refuse
)

// Effect is what the relay does after a transition.
type Effect struct {
	Kind        EffectKind
	Trusted     bool
	Verdict     guard.Verdict
	Recorded    bool
	Outcome     string
	Answer      Answer
	WithRequest bool
	Gone        string
}

// AnswerKind is the form of guard's own answer.
type AnswerKind uint8

// The forms of an answer.
const (
	// NoAnswer: a cancelled call gets none.
	NoAnswer AnswerKind = iota
	// ErrorAnswer: a JSON-RPC error (Code, Text, Data).
	ErrorAnswer
	// ToolErrorAnswer: a tools/call result with isError, Text for the
	// model.
	ToolErrorAnswer
	// RawAnswer: Raw is the answer, made by the relay.
	RawAnswer
)

// Answer is what the client reads of a call guard ends.
type Answer struct {
	Kind AnswerKind
	Code int
	Text string
	Data any
	Raw  []byte
}

// Bytes is the answer as the client reads it, with the id it sent; nil for
// NoAnswer.
func (a Answer) Bytes(id []byte) []byte {
	switch a.Kind {
	case ErrorAnswer:
		return wire.Refusal{Code: a.Code, Text: a.Text, Data: a.Data}.Answer(id)
	case ToolErrorAnswer:
		return ToolError(id, a.Text)
	case RawAnswer:
		return a.Raw
	}
	return nil
}

// ToolError is a tools/call result that reports an error to the model.
func ToolError(id []byte, text string) []byte { return wire.ToolError(text).Answer(id) }

func rpcError(code int, text string) Answer { return Answer{Kind: ErrorAnswer, Code: code, Text: text} }

// refused is the answer that refuses a call as r says (wire's refusals
// are DESIGN.md's "What the client reads").
func refused(r wire.Refusal) Answer {
	if r.Tool {
		return toolError(r.Text)
	}
	return Answer{Kind: ErrorAnswer, Code: r.Code, Text: r.Text, Data: r.Data}
}

func toolError(text string) Answer { return Answer{Kind: ToolErrorAnswer, Text: text} }

// Step is the pipeline's one transition function: from a call's state and
// what happened to it, the call's next state and what the relay does next.
// An event the state does not expect changes nothing (Effect None).
func Step(c Call, e Event) (Call, Effect) {
	if e.Kind == Withdrawn && c.State < Forwarded {
		return end(c, guard.OutcomeCancelled, Answer{}, false)
	}
	switch c.State {
	case Arrived:
		if e.Kind == Read {
			return read(c, e)
		}
	case Checked, Listing:
		switch e.Kind {
		case RoundFound:
			if c.State == Checked {
				r := e.Round
				c.Decision, c.DecidedBy, c.Reason = r.Decision, r.DecidedBy, r.Reason
				return forward(c)
			}
		case InRound:
			if c.State == Checked {
				return inRound(c, e)
			}
		case ToolFound:
			return toolFound(c, e)
		case ToolMissing:
			return toolMissing(c, e)
		}
	case Reviewing:
		if e.Kind == ReviewRead {
			if e.Err != nil {
				c.Decision, c.DecidedBy, c.Reason = guard.DecisionDenied, guard.ToolReviewRule, e.Err.Error()
				return end(c, guard.OutcomeDenied, toolError("Refused: the tool's review could not be read"), true)
			}
			c.State = Deciding
			return c, Effect{Kind: Decide}
		}
	case Deciding:
		if e.Kind == Decided {
			return decided(c, e)
		}
	case Holding:
		return holding(c, e)
	}
	return c, Effect{}
}

// read checks a call as read: guard decides on exactly what the server
// will read, so a message Strict refuses is refused before anything found
// in it is used.
func read(c Call, e Event) (Call, Effect) {
	if e.Err != nil {
		c.Reason = e.Err.Error()
		return end(c, guard.OutcomeInvalid, refused(wire.InvalidRequest(e.Err.Error())), true)
	}
	if c.Method != "tools/call" {
		c.State = Deciding
		return c, Effect{Kind: Decide}
	}
	name, ok := wire.String(e.Name)
	if !ok || name == "" {
		c.Reason = "Invalid params: tools/call needs a tool name"
		return end(c, guard.OutcomeInvalid, rpcError(wire.CodeInvalidParams, c.Reason), true)
	}
	c.Tool, c.Args = name, e.Args
	if len(c.Args) == 0 || string(c.Args) == "null" {
		c.Args = []byte("{}")
	} else if c.Args[0] != '{' {
		c.Reason = "Invalid params: arguments must be an object"
		return end(c, guard.OutcomeInvalid, rpcError(wire.CodeInvalidParams, c.Reason), true)
	}
	c.State = Checked
	return c, Effect{Kind: Continue}
}

// inRound takes the person's answer that the client's next round carries:
// the first decision wins, and a call still open is decided by the rules.
func inRound(c Call, e Event) (Call, Effect) {
	if !e.Valid {
		c.Decision, c.DecidedBy, c.Reason = guard.DecisionDenied, "guard", "a requestState of guard's that this call does not match"
		return end(c, guard.OutcomeInvalid, refused(wire.InvalidParams("the requestState does not belong to this call")), true)
	}
	a := e.Approval
	c.Approval = a.ID
	if e.Err != nil {
		c.Decision, c.Reason = guard.DecisionDenied, "approval "+a.ID+" not readable: "+e.Err.Error()
		return end(c, guard.OutcomeProtocolError, refused(wire.Internal("Refused: the decision on this call could not be read")), true)
	}
	switch a.State {
	case guard.ApprovalDenied:
		c.Decision, c.DecidedBy, c.Reason = guard.DecisionDenied, a.DecidedBy, a.Reason
		return end(c, guard.OutcomeDenied, toolError(guard.DeniedByPersonText(a)), true)
	case guard.ApprovalExpired, guard.ApprovalWithdrawn, guard.ApprovalUsed:
		c.Decision, c.Reason = guard.DecisionDenied, "approval "+a.State
		return end(c, guard.OutcomeExpired, toolError(guard.ExpiredText(e.Timeout)), true)
	}
	return c, Effect{Kind: Find}
}

// toolFound goes on with a call whose tool the catalog has: an unusable
// inputSchema fails closed.
func toolFound(c Call, e Event) (Call, Effect) {
	if e.Err != nil {
		c.Decision, c.DecidedBy, c.Reason = guard.DecisionDenied, guard.InputSchemaRule, e.Err.Error()
		return end(c, guard.OutcomeDenied, toolError(fmt.Sprintf(
			"Refused: the inputSchema of tool %q on server %q cannot be used: %v", c.Tool, e.Server, e.Err)), true)
	}
	if e.NeedsReview {
		c.State = Reviewing
		return c, Effect{Kind: Review}
	}
	c.State = Deciding
	return c, Effect{Kind: Decide}
}

// toolMissing lists the server's tools once; a tool still missing then is
// unknown, or (the server did not answer) may exist, and guard says so.
func toolMissing(c Call, e Event) (Call, Effect) {
	if c.State == Checked {
		c.State = Listing
		return c, Effect{Kind: List}
	}
	if e.NoAnswer {
		c.Reason = fmt.Sprintf("the server did not answer tools/list within %v", e.Timeout)
		return end(c, guard.OutcomeUpstreamFailed, rpcError(wire.CodeInternalError,
			fmt.Sprintf("Refused: the server did not answer tools/list within %v, so guard cannot judge a call of %q", e.Timeout, c.Tool)), true)
	}
	c.Reason = "unknown tool"
	return end(c, guard.OutcomeInvalid, rpcError(wire.CodeInvalidParams, "Unknown tool: "+c.Tool), true)
}

// decided acts on the rules' verdict. A tool call may be held; any other
// request is let through or refused ("approve" denies it, and says so).
func decided(c Call, e Event) (Call, Effect) {
	v := e.Verdict
	c.DecidedBy, c.Reason = v.Rule, v.Reason
	if v.Would != "" {
		c.Reason = "monitor mode: enforcement would " + v.Would + " (" + v.Rule + "): " + v.Reason
		c.Detail = map[string]any{"monitor": map[string]string{"would": v.Would, "rule": v.Rule}}
	}
	if c.Method != "tools/call" {
		if v.Action == guard.ActionAllow {
			c.Decision = guard.DecisionAllowed
			return forward(c)
		}
		c.Decision = guard.DecisionDenied
		text := guard.DenialText(v)
		if v.Action == guard.ActionApprove {
			text = "Denied: rule " + v.Rule + " holds " + c.Method + " for approval, and only tool calls can wait for one"
			c.Reason = text
		}
		return end(c, guard.OutcomeDenied, rpcError(CodeDenied, text), true)
	}
	switch v.Action {
	case guard.ActionAllow:
		if e.SameHeld {
			// The same call waits, held for its tool's review, for a
			// person's own decision: this one waits for it too.
			return hold(c, guard.Verdict{Action: guard.ActionApprove, Rule: guard.ToolReviewRule, PolicyVersion: v.PolicyVersion,
				Reason: "the same call is held for its tool's review and waits for a person's decision"})
		}
		c.Decision = guard.DecisionAllowed
		return forward(c)
	case guard.ActionDeny:
		c.Decision = guard.DecisionDenied
		if v.Rule == guard.InputSchemaRule {
			return end(c, guard.OutcomeInvalid, invalidArguments(c.Tool, v.Reason, e.Protocol), !c.Recorded)
		}
		return end(c, guard.OutcomeDenied, toolError(guard.DenialText(v)), !c.Recorded)
	}
	return hold(c, v)
}

// invalidArguments is the answer to arguments that break the inputSchema:
// a tool error the model can read from 2025-11-25 on, -32602 before.
func invalidArguments(tool, violations, protocol string) Answer {
	text := "Invalid arguments for " + tool + ": " + violations
	if protocol >= guard.Rev20251125 {
		return toolError(text)
	}
	return Answer{Kind: ErrorAnswer, Code: wire.CodeInvalidParams, Text: text, Data: map[string]string{"tool": tool, "violations": violations}}
}

// holding moves a held call through its wait: a prior approval used
// once, or a slot among the session's pending calls, the approval stored,
// the request recorded, then the person's decision (or the wait's end).
func holding(c Call, e Event) (Call, Effect) {
	switch e.Kind {
	case HoldRefused:
		c.Decision = guard.DecisionDenied
		text := "Refused: this call needs a person's approval, and approvals are not available"
		if e.Err != nil {
			text = "Refused: the arguments could not be digested: " + e.Err.Error()
		}
		return end(c, guard.OutcomeDenied, toolError(text), true)
	case PriorApproval:
		a := e.Approval
		if c.ReviewHold {
			// A person let this call past the tool's review: the rules
			// decide it now, on the definition a person accepted.
			c.Approval = a.ID
			return redecide(c)
		}
		c.Decision, c.DecidedBy, c.Approval = guard.DecisionAllowed, a.DecidedBy, a.ID
		c.Reason = "approved (approval " + a.ID + ")"
		if a.Session != e.Session {
			// approval.scope: any, and the record says so.
			c.Reason = "approved (approval " + a.ID + ", given to a call of session " + a.Session + "; scope: any session)"
		}
		if a.Reason != "" {
			c.Reason += ": " + a.Reason
		}
		return forward(c)
	case ClientGone:
		// Nobody could use a decision on it: recorded cancelled,
		// unanswered.
		c.Reason = e.Why
		c, eff := end(c, guard.OutcomeCancelled, Answer{}, false)
		eff.Gone = e.Why
		return c, eff
	case PendingFull:
		c.Decision, c.DecidedBy = guard.DecisionDenied, guard.PendingLimitRule
		c.Reason = fmt.Sprintf("%d calls of this session are already waiting for approval", e.Max)
		return end(c, guard.OutcomeDenied, toolError(fmt.Sprintf(
			"Refused: %d calls of this session are already waiting for approval; wait for a decision before making more", e.Max)), !c.Recorded)
	case Stored:
		c.Decision = guard.DecisionHeld
		if e.Err != nil {
			return end(c, guard.OutcomeProtocolError, rpcError(wire.CodeInternalError, "Refused: the approval could not be stored"), true)
		}
		c.Approval = e.Approval.ID
	case Recorded:
		c.Recorded = true
	case RecordFailed:
		c.State = Ended
		return c, Effect{Kind: Refuse}
	case AskedInRound:
		c.Reason = "asked the person at the client (approval " + e.Approval.ID + ")"
		return end(c, guard.OutcomeInputRequired, Answer{Kind: RawAnswer, Raw: e.Answer}, false)
	case SessionEnded:
		// The server's exit answered it.
		c.State = Ended
	case Waited:
		return waited(c, e)
	}
	return c, Effect{}
}

// waited acts on the person's decision, or on how the wait ended.
func waited(c Call, e Event) (Call, Effect) {
	if e.Err != nil {
		return end(c, guard.OutcomeProtocolError, refused(wire.Internal("Refused: the decision on this call could not be read")), false)
	}
	a := e.Wait.Approval
	if a == nil {
		a = e.Approval
	}
	switch e.Wait.End {
	case guard.WaitApproved:
		if c.ReviewHold {
			// Released from the tool's review (by a person, or by
			// accepting the definition): the rules decide it now, on the
			// definition a person accepted.
			return redecide(c)
		}
		c.Decision, c.DecidedBy, c.Reason = guard.DecisionAllowed, a.DecidedBy, a.Reason
		return forward(c)
	case guard.WaitDenied:
		c.Decision, c.DecidedBy, c.Reason = guard.DecisionDenied, a.DecidedBy, a.Reason
		return end(c, guard.OutcomeDenied, toolError(guard.DeniedByPersonText(a)), false)
	case guard.WaitExpired:
		c.Reason = "no decision within the approval timeout"
		return end(c, guard.OutcomeExpired, toolError(guard.ExpiredText(e.Timeout)), false)
	case guard.WaitWithdrawn:
		c.Reason = "withdrawn"
		return end(c, guard.OutcomeCancelled, toolError("Withdrawn: this call was withdrawn before anyone decided on it"), false)
	}
	// The wait's limit: the approval stays open.
	return end(c, guard.OutcomeAwaitingApproval, toolError(guard.RetryText(a)), false)
}

func hold(c Call, v guard.Verdict) (Call, Effect) {
	c.State, c.ReviewHold = Holding, v.Rule == guard.ToolReviewRule
	return c, Effect{Kind: Hold, Verdict: v}
}

func redecide(c Call) (Call, Effect) {
	c.State, c.ReviewHold = Deciding, false
	return c, Effect{Kind: Decide, Trusted: true}
}

func forward(c Call) (Call, Effect) {
	c.State = Forwarded
	return c, Effect{Kind: Forward, Recorded: c.Recorded}
}

func end(c Call, outcome string, a Answer, withRequest bool) (Call, Effect) {
	c.State = Ended
	return c, Effect{Kind: End, Outcome: outcome, Answer: a, WithRequest: withRequest}
}
