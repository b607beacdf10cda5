package proxy

import (
	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/wire"
)

// CodeDenied is the JSON-RPC error code of a request other than a tool
// call that policy denied.
const CodeDenied = -32001

// gatedClient reports the client's requests, besides tools/call, that
// rules decide; gatedServer the server's.
func gatedClient(method string) bool { return method == "resources/read" || method == "prompts/get" }

func gatedServer(method string) bool {
	return method == "sampling/createMessage" || method == "elicitation/create"
}

// gate decides a request that is not a tool call. It returns true when the
// request may go on; otherwise it has answered the sender with the denial,
// or the refusal of a request the server would read differently (to the
// server when toServer), and recorded both. Only tool calls can be held:
// "approve" on another method denies, and says so.
func (s *Session) gate(msg wire.Message, c *call, toServer bool) bool {
	// The client's are decided on what they name (a uri, a prompt and its
	// arguments), which must be what the server reads, as for a tools/call:
	// a uri given twice is the first to the rules and the last to a
	// JavaScript server, "URI" is uri to a case-insensitive Go one. (The
	// rules read nothing of a server's request but its method.)
	if !toServer {
		if err := wire.CheckStrict(msg); err != nil {
			c.reason = err.Error()
			s.refuseGated(c, false, guard.OutcomeInvalid, wire.ErrorResponse(c.origID, wire.CodeInvalidRequest, "Invalid request: "+err.Error(), nil))
			return false
		}
	}
	ci, proto := s.clientInfo()
	ci.Protocol = proto
	pc := &guard.Call{Server: s.opts.Server, Method: c.method, Client: ci, User: s.opts.Caller}
	switch c.method {
	case "resources/read":
		pc.URI, _ = wire.String(wire.ParamsMember(msg.Params, "uri"))
	case "prompts/get":
		pc.ToolName, _ = wire.String(wire.ParamsMember(msg.Params, "name"))
		pc.Arguments = wire.ParamsMember(msg.Params, "arguments")
	}
	v := s.opts.Decider.Decide(pc)
	c.decidedBy, c.reason = v.Rule, v.Reason
	if v.Would != "" {
		c.reason = "monitor mode: enforcement would " + v.Would + " (" + v.Rule + "): " + v.Reason
		c.detail = map[string]any{"monitor": map[string]string{"would": v.Would, "rule": v.Rule}}
	}
	if v.Action == guard.ActionAllow {
		c.decision = guard.DecisionAllowed
		return true
	}
	c.decision = guard.DecisionDenied
	text := guard.DenialText(v)
	if v.Action == guard.ActionApprove {
		text = "Denied: rule " + v.Rule + " holds " + c.method + " for approval, and only tool calls can wait for one"
		c.reason = text
	}
	s.refuseGated(c, toServer, guard.OutcomeDenied, wire.ErrorResponse(c.origID, CodeDenied, text, nil))
	return false
}

// refuseGated answers a gated request with data, guard's refusal, and
// records it with its outcome: the client's, or the server's (toServer).
func (s *Session) refuseGated(c *call, toServer bool, outcome string, data []byte) {
	if !toServer {
		s.conclude(c, true, outcome, data)
		return
	}
	out := s.record(guard.KindOutcome, c)
	out.Outcome = outcome
	wait := s.opts.Recorder.AppendAsync(s.record(guard.KindRequest, c), out)
	s.toServer.push(item{msg: built(data), wait: wait, fail: refusal(c.origID)})
}
