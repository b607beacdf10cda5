package intercept

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/wire"
)

// at is a tools/call in state s, its tool and arguments checked.
func at(s State) Call {
	return Call{State: s, Method: "tools/call", Tool: "write", Args: []byte(`{"path":"a"}`)}
}

// with returns c changed by f: the state a test expects.
func with(c Call, f func(*Call)) Call {
	f(&c)
	return c
}

// ended is c ended, with its decision fields as given.
func ended(c Call, decision, by, reason string) Call {
	c.State, c.Decision, c.DecidedBy, c.Reason = Ended, decision, by, reason
	return c
}

func endWith(outcome string, a Answer, withRequest bool) Effect {
	return Effect{Kind: End, Outcome: outcome, Answer: a, WithRequest: withRequest}
}

func TestStep(t *testing.T) {
	errBad := errors.New("duplicate member \"name\"")
	person := &guard.Approval{ID: "ap1", Session: "s1", DecidedBy: "alice", Reason: "fine"}
	held := with(at(Holding), func(c *Call) {
		c.Decision = guard.DecisionHeld
		c.Approval = "ap1"
		c.Recorded = true
	})
	reviewHeld := with(held, func(c *Call) { c.ReviewHold = true })
	recordedDeciding := with(at(Deciding), func(c *Call) { c.Recorded = true })
	tests := []struct {
		name string
		in   Call
		ev   Event
		want Call
		eff  Effect
	}{
		// Arrived
		{"arrived: strict refuses", New("tools/call"), Event{Kind: Read, Err: errBad},
			Call{State: Ended, Method: "tools/call", Reason: errBad.Error()},
			endWith(guard.OutcomeInvalid, rpcError(wire.CodeInvalidRequest, "Invalid request: "+errBad.Error()), true)},
		{"arrived: no name", New("tools/call"), Event{Kind: Read, Name: []byte(`""`)},
			Call{State: Ended, Method: "tools/call", Reason: "Invalid params: tools/call needs a tool name"},
			endWith(guard.OutcomeInvalid, rpcError(wire.CodeInvalidParams, "Invalid params: tools/call needs a tool name"), true)},
		{"arrived: a name not a string", New("tools/call"), Event{Kind: Read, Name: []byte(`7`)},
			Call{State: Ended, Method: "tools/call", Reason: "Invalid params: tools/call needs a tool name"},
			endWith(guard.OutcomeInvalid, rpcError(wire.CodeInvalidParams, "Invalid params: tools/call needs a tool name"), true)},
		{"arrived: arguments not an object", New("tools/call"), Event{Kind: Read, Name: []byte(`"write"`), Args: []byte(`[1]`)},
			Call{State: Ended, Method: "tools/call", Tool: "write", Args: []byte(`[1]`), Reason: "Invalid params: arguments must be an object"},
			endWith(guard.OutcomeInvalid, rpcError(wire.CodeInvalidParams, "Invalid params: arguments must be an object"), true)},
		{"arrived: no arguments are {}", New("tools/call"), Event{Kind: Read, Name: []byte(`"write"`), Args: []byte(`null`)},
			Call{State: Checked, Method: "tools/call", Tool: "write", Args: []byte(`{}`)}, Effect{Kind: Continue}},
		{"arrived: checked", New("tools/call"), Event{Kind: Read, Name: []byte(`"write"`), Args: []byte(`{"path":"a"}`)},
			at(Checked), Effect{Kind: Continue}},
		{"arrived: another method is decided", New("resources/read"), Event{Kind: Read},
			Call{State: Deciding, Method: "resources/read"}, Effect{Kind: Decide}},
		{"arrived: another method refused by strict", New("prompts/get"), Event{Kind: Read, Err: errBad},
			Call{State: Ended, Method: "prompts/get", Reason: errBad.Error()},
			endWith(guard.OutcomeInvalid, rpcError(wire.CodeInvalidRequest, "Invalid request: "+errBad.Error()), true)},

		// Checked
		{"checked: an earlier round goes on", at(Checked), Event{Kind: RoundFound, Round: &guard.Round{Decision: guard.DecisionAllowed, DecidedBy: "reads", Reason: "r"}},
			with(at(Forwarded), func(c *Call) { c.Decision, c.DecidedBy, c.Reason = guard.DecisionAllowed, "reads", "r" }), Effect{Kind: Forward}},
		{"checked: guard's requestState not this call's", at(Checked), Event{Kind: InRound, Approval: &guard.Approval{ID: "ap1"}},
			ended(at(Checked), guard.DecisionDenied, "guard", "a requestState of guard's that this call does not match"),
			endWith(guard.OutcomeInvalid, rpcError(wire.CodeInvalidParams, "Invalid params: the requestState does not belong to this call"), true)},
		{"checked: in-round approval unreadable", at(Checked), Event{Kind: InRound, Valid: true, Approval: &guard.Approval{ID: "ap1"}, Err: errors.New("disk")},
			with(ended(at(Checked), guard.DecisionDenied, "", "approval ap1 not readable: disk"), func(c *Call) { c.Approval = "ap1" }),
			endWith(guard.OutcomeProtocolError, rpcError(wire.CodeInternalError, "Refused: the decision on this call could not be read"), true)},
		{"checked: denied in round", at(Checked), Event{Kind: InRound, Valid: true, Approval: &guard.Approval{ID: "ap1", State: guard.ApprovalDenied, DecidedBy: "bob", Reason: "no"}},
			with(ended(at(Checked), guard.DecisionDenied, "bob", "no"), func(c *Call) { c.Approval = "ap1" }),
			endWith(guard.OutcomeDenied, toolError("Denied by bob: no"), true)},
		{"checked: expired in round", at(Checked), Event{Kind: InRound, Valid: true, Approval: &guard.Approval{ID: "ap1", State: guard.ApprovalUsed}, Timeout: time.Minute},
			with(ended(at(Checked), guard.DecisionDenied, "", "approval used"), func(c *Call) { c.Approval = "ap1" }),
			endWith(guard.OutcomeExpired, toolError(guard.ExpiredText(time.Minute)), true)},
		{"checked: approved in round", at(Checked), Event{Kind: InRound, Valid: true, Approval: &guard.Approval{ID: "ap1", State: guard.ApprovalApproved}},
			with(at(Checked), func(c *Call) { c.Approval = "ap1" }), Effect{Kind: Find}},
		{"checked: unusable inputSchema", at(Checked), Event{Kind: ToolFound, Err: errors.New("bad $ref"), Server: "fs"},
			ended(at(Checked), guard.DecisionDenied, guard.InputSchemaRule, "bad $ref"),
			endWith(guard.OutcomeDenied, toolError(`Refused: the inputSchema of tool "write" on server "fs" cannot be used: bad $ref`), true)},
		{"checked: review needed", at(Checked), Event{Kind: ToolFound, NeedsReview: true}, at(Reviewing), Effect{Kind: Review}},
		{"checked: found", at(Checked), Event{Kind: ToolFound}, at(Deciding), Effect{Kind: Decide}},
		{"checked: missing is listed", at(Checked), Event{Kind: ToolMissing}, at(Listing), Effect{Kind: List}},
		{"checked: withdrawn", at(Checked), Event{Kind: Withdrawn}, at(Ended), endWith(guard.OutcomeCancelled, Answer{}, false)},

		// Listing
		{"listing: no answer", at(Listing), Event{Kind: ToolMissing, NoAnswer: true, Timeout: time.Second},
			ended(at(Listing), "", "", "the server did not answer tools/list within 1s"),
			endWith(guard.OutcomeUpstreamFailed, rpcError(wire.CodeInternalError, `Refused: the server did not answer tools/list within 1s, so guard cannot judge a call of "write"`), true)},
		{"listing: unknown tool", at(Listing), Event{Kind: ToolMissing},
			ended(at(Listing), "", "", "unknown tool"), endWith(guard.OutcomeInvalid, rpcError(wire.CodeInvalidParams, "Unknown tool: write"), true)},
		{"listing: found", at(Listing), Event{Kind: ToolFound}, at(Deciding), Effect{Kind: Decide}},
		{"listing: withdrawn", at(Listing), Event{Kind: Withdrawn}, at(Ended), endWith(guard.OutcomeCancelled, Answer{}, false)},
		{"listing: no round now", at(Listing), Event{Kind: RoundFound, Round: &guard.Round{}}, at(Listing), Effect{}},

		// Reviewing
		{"reviewing: unreadable", at(Reviewing), Event{Kind: ReviewRead, Err: errors.New("disk")},
			ended(at(Reviewing), guard.DecisionDenied, guard.ToolReviewRule, "disk"),
			endWith(guard.OutcomeDenied, toolError("Refused: the tool's review could not be read"), true)},
		{"reviewing: read", at(Reviewing), Event{Kind: ReviewRead}, at(Deciding), Effect{Kind: Decide}},

		// Deciding
		{"deciding: allowed", at(Deciding), Event{Kind: Decided, Verdict: guard.Verdict{Action: guard.ActionAllow, Rule: "reads", Reason: "r"}},
			with(at(Forwarded), func(c *Call) { c.Decision, c.DecidedBy, c.Reason = guard.DecisionAllowed, "reads", "r" }), Effect{Kind: Forward}},
		{"deciding: allowed once recorded", recordedDeciding, Event{Kind: Decided, Verdict: guard.Verdict{Action: guard.ActionAllow, Rule: "reads"}},
			with(recordedDeciding, func(c *Call) { c.State, c.Decision, c.DecidedBy = Forwarded, guard.DecisionAllowed, "reads" }), Effect{Kind: Forward, Recorded: true}},
		{"deciding: monitor mode", at(Deciding), Event{Kind: Decided, Verdict: guard.Verdict{Action: guard.ActionAllow, Would: "deny", Rule: "no-writes", Reason: "writes"}},
			with(at(Forwarded), func(c *Call) {
				c.Decision, c.DecidedBy = guard.DecisionAllowed, "no-writes"
				c.Reason = "monitor mode: enforcement would deny (no-writes): writes"
				c.Detail = map[string]any{"monitor": map[string]string{"would": "deny", "rule": "no-writes"}}
			}), Effect{Kind: Forward}},
		{"deciding: the same call waits for its review", at(Deciding), Event{Kind: Decided, SameHeld: true, Verdict: guard.Verdict{Action: guard.ActionAllow, Rule: "reads", PolicyVersion: "v1"}},
			with(at(Holding), func(c *Call) { c.DecidedBy, c.Reason, c.ReviewHold = "reads", "", true }),
			Effect{Kind: Hold, Verdict: guard.Verdict{Action: guard.ActionApprove, Rule: guard.ToolReviewRule, PolicyVersion: "v1",
				Reason: "the same call is held for its tool's review and waits for a person's decision"}}},
		{"deciding: denied", at(Deciding), Event{Kind: Decided, Verdict: guard.Verdict{Action: guard.ActionDeny, Rule: "no-writes", Reason: "writes"}},
			ended(at(Deciding), guard.DecisionDenied, "no-writes", "writes"),
			endWith(guard.OutcomeDenied, toolError(`Denied by policy rule "no-writes": writes`), true)},
		{"deciding: denied once recorded", recordedDeciding, Event{Kind: Decided, Verdict: guard.Verdict{Action: guard.ActionDeny, Rule: "default"}},
			ended(recordedDeciding, guard.DecisionDenied, "default", ""),
			endWith(guard.OutcomeDenied, toolError("Denied by the default policy (deny)"), false)},
		{"deciding: invalid arguments, 2025-11-25", at(Deciding), Event{Kind: Decided, Protocol: guard.Rev20251125, Verdict: guard.Verdict{Action: guard.ActionDeny, Rule: guard.InputSchemaRule, Reason: "path: required"}},
			ended(at(Deciding), guard.DecisionDenied, guard.InputSchemaRule, "path: required"),
			endWith(guard.OutcomeInvalid, toolError("Invalid arguments for write: path: required"), true)},
		{"deciding: invalid arguments, before", at(Deciding), Event{Kind: Decided, Protocol: "2025-06-18", Verdict: guard.Verdict{Action: guard.ActionDeny, Rule: guard.InputSchemaRule, Reason: "path: required"}},
			ended(at(Deciding), guard.DecisionDenied, guard.InputSchemaRule, "path: required"),
			endWith(guard.OutcomeInvalid, Answer{Kind: ErrorAnswer, Code: wire.CodeInvalidParams, Text: "Invalid arguments for write: path: required",
				Data: map[string]string{"tool": "write", "violations": "path: required"}}, true)},
		{"deciding: held", at(Deciding), Event{Kind: Decided, Verdict: guard.Verdict{Action: guard.ActionApprove, Rule: "writes", Reason: "w"}},
			with(at(Holding), func(c *Call) { c.DecidedBy, c.Reason = "writes", "w" }),
			Effect{Kind: Hold, Verdict: guard.Verdict{Action: guard.ActionApprove, Rule: "writes", Reason: "w"}}},
		{"deciding: another method allowed", Call{State: Deciding, Method: "resources/read"}, Event{Kind: Decided, Verdict: guard.Verdict{Action: guard.ActionAllow, Rule: "default"}},
			Call{State: Forwarded, Method: "resources/read", Decision: guard.DecisionAllowed, DecidedBy: "default"}, Effect{Kind: Forward}},
		{"deciding: another method denied", Call{State: Deciding, Method: "prompts/get"}, Event{Kind: Decided, Verdict: guard.Verdict{Action: guard.ActionDeny, Rule: "p", Reason: "no"}},
			Call{State: Ended, Method: "prompts/get", Decision: guard.DecisionDenied, DecidedBy: "p", Reason: "no"},
			endWith(guard.OutcomeDenied, rpcError(CodeDenied, `Denied by policy rule "p": no`), true)},
		{"deciding: another method cannot wait", Call{State: Deciding, Method: "sampling/createMessage"}, Event{Kind: Decided, Verdict: guard.Verdict{Action: guard.ActionApprove, Rule: "s"}},
			Call{State: Ended, Method: "sampling/createMessage", Decision: guard.DecisionDenied, DecidedBy: "s",
				Reason: "Denied: rule s holds sampling/createMessage for approval, and only tool calls can wait for one"},
			endWith(guard.OutcomeDenied, rpcError(CodeDenied, "Denied: rule s holds sampling/createMessage for approval, and only tool calls can wait for one"), true)},

		// Holding
		{"holding: approvals not available", at(Holding), Event{Kind: HoldRefused},
			with(at(Ended), func(c *Call) { c.Decision = guard.DecisionDenied }),
			endWith(guard.OutcomeDenied, toolError("Refused: this call needs a person's approval, and approvals are not available"), true)},
		{"holding: arguments not digested", at(Holding), Event{Kind: HoldRefused, Err: errors.New("too deep")},
			with(at(Ended), func(c *Call) { c.Decision = guard.DecisionDenied }),
			endWith(guard.OutcomeDenied, toolError("Refused: the arguments could not be digested: too deep"), true)},
		{"holding: a prior approval", at(Holding), Event{Kind: PriorApproval, Approval: person, Session: "s1"},
			with(at(Forwarded), func(c *Call) {
				c.Decision, c.DecidedBy, c.Approval, c.Reason = guard.DecisionAllowed, "alice", "ap1", "approved (approval ap1): fine"
			}), Effect{Kind: Forward}},
		{"holding: a prior approval of another session", at(Holding), Event{Kind: PriorApproval, Approval: person, Session: "s2"},
			with(at(Forwarded), func(c *Call) {
				c.Decision, c.DecidedBy, c.Approval = guard.DecisionAllowed, "alice", "ap1"
				c.Reason = "approved (approval ap1, given to a call of session s1; scope: any session): fine"
			}), Effect{Kind: Forward}},
		{"holding: a prior release from review", with(at(Holding), func(c *Call) { c.ReviewHold = true }), Event{Kind: PriorApproval, Approval: person},
			with(at(Deciding), func(c *Call) { c.Approval = "ap1" }), Effect{Kind: Decide, Trusted: true}},
		{"holding: client gone", at(Holding), Event{Kind: ClientGone, Why: "the call's client is gone: its input ended"},
			with(at(Ended), func(c *Call) { c.Reason = "the call's client is gone: its input ended" }),
			Effect{Kind: End, Outcome: guard.OutcomeCancelled, Gone: "the call's client is gone: its input ended"}},
		{"holding: pending full", at(Holding), Event{Kind: PendingFull, Max: 3},
			ended(at(Holding), guard.DecisionDenied, guard.PendingLimitRule, "3 calls of this session are already waiting for approval"),
			endWith(guard.OutcomeDenied, toolError("Refused: 3 calls of this session are already waiting for approval; wait for a decision before making more"), true)},
		{"holding: pending full, recorded", with(at(Holding), func(c *Call) { c.Recorded = true }), Event{Kind: PendingFull, Max: 3},
			with(ended(at(Holding), guard.DecisionDenied, guard.PendingLimitRule, "3 calls of this session are already waiting for approval"), func(c *Call) { c.Recorded = true }),
			endWith(guard.OutcomeDenied, toolError("Refused: 3 calls of this session are already waiting for approval; wait for a decision before making more"), false)},
		{"holding: not stored", at(Holding), Event{Kind: Stored, Err: errors.New("disk")},
			with(at(Ended), func(c *Call) { c.Decision = guard.DecisionHeld }),
			endWith(guard.OutcomeProtocolError, rpcError(wire.CodeInternalError, "Refused: the approval could not be stored"), true)},
		{"holding: stored", at(Holding), Event{Kind: Stored, Approval: person},
			with(at(Holding), func(c *Call) { c.Decision, c.Approval = guard.DecisionHeld, "ap1" }), Effect{}},
		{"holding: recorded", at(Holding), Event{Kind: Recorded}, with(at(Holding), func(c *Call) { c.Recorded = true }), Effect{}},
		{"holding: not recorded", at(Holding), Event{Kind: RecordFailed}, at(Ended), Effect{Kind: Refuse}},
		{"holding: asked in round", held, Event{Kind: AskedInRound, Approval: person, Answer: []byte(`{"id":1}`)},
			with(held, func(c *Call) { c.State, c.Reason = Ended, "asked the person at the client (approval ap1)" }),
			endWith(guard.OutcomeInputRequired, Answer{Kind: RawAnswer, Raw: []byte(`{"id":1}`)}, false)},
		{"holding: withdrawn", held, Event{Kind: Withdrawn}, with(held, func(c *Call) { c.State = Ended }), endWith(guard.OutcomeCancelled, Answer{}, false)},
		{"holding: session ended", held, Event{Kind: SessionEnded}, with(held, func(c *Call) { c.State = Ended }), Effect{}},
		{"holding: wait failed", held, Event{Kind: Waited, Err: errors.New("disk"), Approval: person},
			with(held, func(c *Call) { c.State = Ended }),
			endWith(guard.OutcomeProtocolError, rpcError(wire.CodeInternalError, "Refused: the decision on this call could not be read"), false)},
		{"holding: approved", held, Event{Kind: Waited, Wait: guard.WaitResult{End: guard.WaitApproved, Approval: person}},
			with(held, func(c *Call) {
				c.State, c.Decision, c.DecidedBy, c.Reason = Forwarded, guard.DecisionAllowed, "alice", "fine"
			}),
			Effect{Kind: Forward, Recorded: true}},
		{"holding: released from review", reviewHeld, Event{Kind: Waited, Wait: guard.WaitResult{End: guard.WaitApproved}, Approval: person},
			with(reviewHeld, func(c *Call) { c.State, c.ReviewHold = Deciding, false }), Effect{Kind: Decide, Trusted: true}},
		{"holding: denied by a person", held, Event{Kind: Waited, Wait: guard.WaitResult{End: guard.WaitDenied}, Approval: person},
			with(held, func(c *Call) {
				c.State, c.Decision, c.DecidedBy, c.Reason = Ended, guard.DecisionDenied, "alice", "fine"
			}),
			endWith(guard.OutcomeDenied, toolError("Denied by alice: fine"), false)},
		{"holding: expired", held, Event{Kind: Waited, Wait: guard.WaitResult{End: guard.WaitExpired}, Approval: person, Timeout: time.Hour},
			with(held, func(c *Call) { c.State, c.Reason = Ended, "no decision within the approval timeout" }),
			endWith(guard.OutcomeExpired, toolError(guard.ExpiredText(time.Hour)), false)},
		{"holding: approval withdrawn", held, Event{Kind: Waited, Wait: guard.WaitResult{End: guard.WaitWithdrawn}, Approval: person},
			with(held, func(c *Call) { c.State, c.Reason = Ended, "withdrawn" }),
			endWith(guard.OutcomeCancelled, toolError("Withdrawn: this call was withdrawn before anyone decided on it"), false)},
		{"holding: the wait's limit", held, Event{Kind: Waited, Wait: guard.WaitResult{End: guard.WaitLimit}, Approval: person},
			with(held, func(c *Call) { c.State = Ended }),
			endWith(guard.OutcomeAwaitingApproval, toolError(guard.RetryText(person)), false)},

		// Forwarded and Ended: nothing moves them.
		{"forwarded: not withdrawn", at(Forwarded), Event{Kind: Withdrawn}, at(Forwarded), Effect{}},
		{"forwarded: not decided again", at(Forwarded), Event{Kind: Decided, Verdict: guard.Verdict{Action: guard.ActionDeny}}, at(Forwarded), Effect{}},
		{"ended: not read again", at(Ended), Event{Kind: Read, Err: errBad}, at(Ended), Effect{}},
		{"ended: not waited on", at(Ended), Event{Kind: Waited, Wait: guard.WaitResult{End: guard.WaitApproved}, Approval: person}, at(Ended), Effect{}},
	}
	seen := map[State]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, eff := Step(tt.in, tt.ev)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("state\n got %+v\nwant %+v", got, tt.want)
			}
			if !reflect.DeepEqual(eff, tt.eff) {
				t.Errorf("effect\n got %+v\nwant %+v", eff, tt.eff)
			}
			// Record, then answer (or forward) is the one way a call
			// ends; a call whose record failed is refused; one the
			// server's exit answered has nothing left to do.
			if tt.in.State != got.State {
				switch got.State {
				case Ended:
					if eff.Kind != End && eff.Kind != Refuse && tt.ev.Kind != SessionEnded {
						t.Errorf("ended with %v", eff.Kind)
					}
				case Forwarded:
					if eff.Kind != Forward {
						t.Errorf("forwarded with %v", eff.Kind)
					}
				}
			}
		})
		seen[tt.in.State] = true
	}
	for s := Arrived; s <= Ended; s++ {
		if !seen[s] {
			t.Errorf("no transition from %v is tested", s)
		}
	}
}

// An event a state does not expect changes nothing: the relay can never
// move a call backwards, nor past a step it did not take.
func TestStepIgnoresUnexpectedEvents(t *testing.T) {
	expects := map[State][]EventKind{
		Arrived:   {Read, Withdrawn},
		Checked:   {RoundFound, InRound, ToolFound, ToolMissing, Withdrawn},
		Listing:   {ToolFound, ToolMissing, Withdrawn},
		Reviewing: {ReviewRead, Withdrawn},
		Deciding:  {Decided, Withdrawn},
		Holding:   {HoldRefused, PriorApproval, ClientGone, PendingFull, Stored, Recorded, RecordFailed, AskedInRound, SessionEnded, Waited, Withdrawn},
	}
	for s := Arrived; s <= Ended; s++ {
		for k := Read; k <= Waited; k++ {
			if slices.Contains(expects[s], k) {
				continue
			}
			in := at(s)
			got, eff := Step(in, Event{Kind: k, Approval: &guard.Approval{ID: "x"}, Round: &guard.Round{}})
			if !reflect.DeepEqual(got, in) || !reflect.DeepEqual(eff, Effect{}) {
				t.Errorf("%v, event %d: moved to %v with %+v", s, k, got.State, eff)
			}
		}
	}
}

func TestAnswerBytes(t *testing.T) {
	id := []byte(`7`)
	if b := (Answer{}).Bytes(id); b != nil {
		t.Errorf("no answer: %s", b)
	}
	if b := string(toolError("no").Bytes(id)); !strings.Contains(b, `"isError":true`) || !strings.Contains(b, `"id":7`) {
		t.Errorf("tool error: %s", b)
	}
	if b := string(rpcError(CodeDenied, "Denied").Bytes(id)); !strings.Contains(b, `"code":-32001`) {
		t.Errorf("error: %s", b)
	}
	if b := string((Answer{Kind: RawAnswer, Raw: []byte(`{}`)}).Bytes(id)); b != `{}` {
		t.Errorf("raw: %s", b)
	}
	if s := Holding.String(); s != "holding" {
		t.Errorf("Holding is %q", s)
	}
}
