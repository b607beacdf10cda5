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
// request may go on; otherwise it has answered the sender with the denial
// (to the server when toServer) and recorded both. Only tool calls can be
// held: "approve" on another method denies, and says so.
func (s *Session) gate(msg wire.Message, c *call, toServer bool) bool {
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
	data := wire.ErrorResponse(c.origID, CodeDenied, text, nil)
	if !toServer {
		s.conclude(c, true, guard.OutcomeDenied, data)
		return false
	}
	out := s.record(guard.KindOutcome, c)
	out.Outcome = guard.OutcomeDenied
	wait := s.opts.Recorder.AppendAsync(s.record(guard.KindRequest, c), out)
	s.toServer.push(item{msg: built(data), wait: wait, fail: refusal(c.origID)})
	return false
}
