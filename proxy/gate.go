package proxy

import (
	guard "github.com/guard-mcp/guard"
	"github.com/guard-mcp/guard/proxy/intercept"
	"github.com/guard-mcp/guard/wire"
)

// CodeDenied is the JSON-RPC error code of a request other than a tool
// call that policy denied.
const CodeDenied = intercept.CodeDenied

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
// "approve" on another method denies, and says so (intercept.Step).
func (pl *pipeline) gate(msg wire.Message, c *call, toServer bool) bool {
	s := pl.s
	// The client's are decided on what they name (a uri, a prompt and its
	// arguments), which must be what the server reads, as for a tools/call:
	// a uri given twice is the first to the rules and the last to a
	// JavaScript server, "URI" is uri to a case-insensitive Go one. (The
	// rules read nothing of a server's request but its method.)
	var strict error
	if !toServer {
		strict = wire.CheckStrict(msg)
	}
	var eff intercept.Effect
	c.st, eff = intercept.Step(c.st, intercept.Event{Kind: intercept.Read, Err: strict})
	if eff.Kind == intercept.Decide {
		ci, proto := s.clientInfo()
		ci.Protocol = proto
		pc := &guard.Call{Server: s.opts.Server, Method: c.st.Method, Client: ci, User: s.opts.Caller}
		switch c.st.Method {
		case "resources/read":
			pc.URI, _ = wire.String(wire.ParamsMember(msg.Params, "uri"))
		case "prompts/get":
			pc.ToolName, _ = wire.String(wire.ParamsMember(msg.Params, "name"))
			pc.Arguments = wire.ParamsMember(msg.Params, "arguments")
		}
		sp := c.decideSpan(s)
		v := s.opts.Decider.Decide(pc)
		decidedSpan(sp, v)
		c.st, eff = intercept.Step(c.st, intercept.Event{Kind: intercept.Decided, Verdict: v})
	}
	if eff.Kind == intercept.Forward {
		return true
	}
	pl.refuseGated(c, toServer, eff)
	return false
}

// refuseGated answers a gated request with guard's refusal, and records it
// with its outcome (eff, an intercept.End): the client's, or the server's
// (toServer).
func (pl *pipeline) refuseGated(c *call, toServer bool, eff intercept.Effect) {
	s := pl.s
	data := eff.Answer.Bytes(c.origID)
	if !toServer {
		s.settle(c, ending{outcome: eff.Outcome, answer: data, withRequest: eff.WithRequest})
		return
	}
	out := s.record(guard.KindOutcome, c)
	out.Outcome = eff.Outcome
	wait := s.appendRecords(c, true, data, s.record(guard.KindRequest, c), out)
	s.toServer.push(item{msg: built(data), wait: wait, fail: refusal(c.origID)})
}
