package wire

// Refusal is an answer guard gives a request in the server's place: a
// JSON-RPC error, or, for a tools/call whose refusal the model should read
// (Tool), a result with isError set. Every such answer becomes bytes in
// Answer, from the cases of DESIGN.md's "What the client reads": the
// constructors below are those cases.
type Refusal struct {
	// Code is the JSON-RPC error code (not used for a tool result).
	Code int
	// Text is what the client, and so the model, reads.
	Text string
	// Data is the error's data (omitted when nil).
	Data any
	// Tool answers with a tools/call result, isError: true, Text its one
	// text content.
	Tool bool
	// Outcome is what the call's audit record says of it (guard's
	// Outcome*), for whoever records the refusal; Answer does not use it.
	Outcome string
}

// Answer is the response to the request of id (nil: null) that refuses it.
func (r Refusal) Answer(id []byte) []byte {
	if r.Tool {
		b, err := Response(id, map[string]any{
			"content": []map[string]any{{"type": "text", "text": r.Text}},
			"isError": true,
		})
		if err == nil {
			return b
		}
		// Cannot happen for this shape; the text still reaches the client.
	}
	return ErrorResponse(id, r.Code, r.Text, r.Data)
}

// ToolError refuses a tools/call with a result the model reads: a denial,
// an expiry, a result refused.
func ToolError(text string) Refusal { return Refusal{Tool: true, Text: text} }

// ParseError refuses text that is not JSON (-32700; its id is null).
func ParseError(why string) Refusal {
	return Refusal{Code: CodeParseError, Text: "Parse error: " + why}
}

// InvalidRequest refuses a message that is not a request guard relays
// (-32600): one over max_message, with members named twice or differing
// only in case, or invalid UTF-8.
func InvalidRequest(reason string) Refusal {
	return Refusal{Code: CodeInvalidRequest, Text: "Invalid request: " + reason}
}

// InvalidParams refuses a request whose params do not say what it needs
// (-32602).
func InvalidParams(reason string) Refusal {
	return Refusal{Code: CodeInvalidParams, Text: "Invalid params: " + reason}
}

// MethodNotFound refuses a method that is not offered (-32601); text says
// what to do instead.
func MethodNotFound(text string) Refusal {
	return Refusal{Code: CodeMethodNotFound, Text: text}
}

// Internal refuses a request guard cannot get answered (-32603): the audit
// log not written, the server gone or unreachable.
func Internal(text string) Refusal { return Refusal{Code: CodeInternalError, Text: text} }

// CodeResourceNotFound is MCP's error code for a resource no server has.
const CodeResourceNotFound = -32002

// Unknown refuses a tools/call or prompts/get whose name no server offers
// (-32602); text names it ("Unknown tool: NAME") and may say more.
func Unknown(text string) Refusal { return Refusal{Code: CodeInvalidParams, Text: text} }

// ResourceNotFound refuses a request about a resource no server lists
// (-32002): text says so, and the error's data names uri.
func ResourceNotFound(uri, text string) Refusal {
	return Refusal{Code: CodeResourceNotFound, Text: text, Data: map[string]string{"uri": uri}}
}
