package remote

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/guard-mcp/guard/proxy"
	"github.com/guard-mcp/guard/proxy/mcpheader"
	"github.com/guard-mcp/guard/wire"
)

// The rules of the 2026-07-28 revision toward an HTTP upstream: the request
// headers that mirror the body (Mcp-Method, Mcp-Name, Mcp-Param-*), and
// cancellation by closing a request's stream.

// modernCall is a 2026-07-28 request in flight to the upstream, whose
// stream closing is its cancellation.
type modernCall struct{ cancel context.CancelFunc }

// cancelModern passes on the relay's cancellation of a 2026-07-28 request
// as that revision's server expects it: its request's stream is closed,
// and no notifications/cancelled is sent. It reports whether the
// cancellation named such a request in flight.
func (u *upstream) cancelModern(m wire.Message) bool {
	rid := wire.ParamsMember(m.Params, "requestId")
	if rid == nil {
		return false
	}
	key := wire.IDKey(rid)
	u.mu.Lock()
	c := u.modern[key]
	delete(u.modern, key)
	u.mu.Unlock()
	if c == nil {
		return false
	}
	c.cancel()
	return true
}

// modernHeaders sets the headers a 2026-07-28 request carries over HTTP:
// its revision, method, name, and the arguments its tool mirrors. It
// reports whether the message is of that revision.
func (u *upstream) modernHeaders(req *http.Request, m wire.Message) bool {
	v, ok := wire.String(wire.MetaMember(m.Params, proxy.MetaProtocol))
	if !ok || v < "2026-07-28" {
		return false
	}
	req.Header.Set("Mcp-Protocol-Version", v)
	if m.Method != "" {
		req.Header.Set("Mcp-Method", m.Method)
	}
	name := mcpheader.Name(m)
	if name != "" {
		req.Header.Set("Mcp-Name", name)
	}
	if m.Method != "tools/call" {
		return true
	}
	params := u.headers.Of(name)
	if len(params) == 0 {
		return true
	}
	var args map[string]json.RawMessage
	_ = json.Unmarshal(wire.ParamsMember(m.Params, "arguments"), &args)
	for arg, header := range params {
		raw, ok := args[arg]
		if !ok {
			continue
		}
		val, isStr := wire.String(raw)
		if !isStr {
			val = string(raw)
		}
		// Values that are not plain ASCII travel Base64-encoded.
		if !printableASCII(val) {
			val = "=?base64?" + base64.StdEncoding.EncodeToString([]byte(val)) + "?="
		}
		req.Header.Set("Mcp-Param-"+header, val)
	}
	return true
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return s == strings.TrimSpace(s)
}
