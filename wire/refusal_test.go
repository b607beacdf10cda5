package wire

import "testing"

func TestRefusalAnswers(t *testing.T) {
	for _, tc := range []struct {
		r    Refusal
		id   string
		want string
	}{
		{ToolError(`Denied by policy rule "x"`), `7`, `{"jsonrpc":"2.0","id":7,"result":{"content":[{"text":"Denied by policy rule \"x\"","type":"text"}],"isError":true}}`},
		{InvalidRequest("member \"method\" appears twice"), ``, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid request: member \"method\" appears twice"}}`},
		{ParseError("the message is not valid JSON"), ``, `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error: the message is not valid JSON"}}`},
		{InvalidParams("tools/call needs a name"), `"a"`, `{"jsonrpc":"2.0","id":"a","error":{"code":-32602,"message":"Invalid params: tools/call needs a name"}}`},
		{Internal("Refused: the audit log could not be written"), `1`, `{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"Refused: the audit log could not be written"}}`},
		{Refusal{Code: -32002, Text: "Resource not found", Data: map[string]string{"uri": "u"}}, `2`, `{"jsonrpc":"2.0","id":2,"error":{"code":-32002,"message":"Resource not found","data":{"uri":"u"}}}`},
		{ResourceNotFound("u", "Resource not found"), `2`, `{"jsonrpc":"2.0","id":2,"error":{"code":-32002,"message":"Resource not found","data":{"uri":"u"}}}`},
		{Unknown("Unknown tool: c__who"), `3`, `{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"Unknown tool: c__who"}}`},
	} {
		var id []byte
		if tc.id != "" {
			id = []byte(tc.id)
		}
		if got := string(tc.r.Answer(id)); got != tc.want {
			t.Errorf("%+v:\n got %s\nwant %s", tc.r, got, tc.want)
		}
	}
}

// A server's error object goes on as it came, under the id given.
func TestErrorFrom(t *testing.T) {
	for _, tc := range []struct {
		id, errObj, want string
	}{
		{`"a"`, `{"code":-1,"message":"<no>","data":{"x":[1, 2]}}`, `{"jsonrpc":"2.0","id":"a","error":{"code":-1,"message":"<no>","data":{"x":[1, 2]}}}`},
		{``, `{"code":-32601,"message":"m"}`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32601,"message":"m"}}`},
	} {
		var id []byte
		if tc.id != "" {
			id = []byte(tc.id)
		}
		if got := string(ErrorFrom(id, []byte(tc.errObj))); got != tc.want {
			t.Errorf("got %s\nwant %s", got, tc.want)
		}
	}
}
