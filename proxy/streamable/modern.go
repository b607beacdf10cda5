package streamable

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/guard-mcp/guard/proxy"
	"github.com/guard-mcp/guard/proxy/mcpheader"
	"github.com/guard-mcp/guard/wire"
)

// The rules of the 2026-07-28 revision over HTTP: no sessions (a client's
// requests share one relay session, their ids made unique), the request
// headers that mirror the body (Mcp-Method, Mcp-Name, Mcp-Param-*), the
// HTTP status of an answer, and cancellation by closing a request's
// stream.

// uniqueID is the id, as sent, of a unique id's key (see uniqueIDs).
func uniqueID(key string) []byte {
	return []byte(strconv.Quote(strings.TrimPrefix(key, "s")))
}

// abandon ends a 2026-07-28 POST's stream whose client went before every
// answer was written, and returns the ids (as sent to the relay) of the
// requests left unanswered; none once the session has ended.
func (rt *router) abandon(st *stream) [][]byte {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.ended {
		return nil
	}
	st.mu.Lock()
	keys := make([]string, 0, len(st.pending))
	for k := range st.pending {
		keys = append(keys, k)
	}
	st.mu.Unlock()
	var ids [][]byte
	for _, k := range keys {
		if _, _, ok := rt.renamed.Take(k); !ok {
			continue
		}
		rt.answered(st, k)
		ids = append(ids, uniqueID(k))
	}
	return ids
}

// cancelUnanswered cancels the requests of a 2026-07-28 POST whose
// response ended before their answers were written. In that revision the
// close of a request's stream is the client's cancellation (no
// notifications/cancelled is expected): the relay gets one, as from the
// client, and records the call cancelled, withdraws a hold, and tells the
// server. In earlier revisions a disconnect is not a cancellation, and
// this is not called.
func (h *Server) cancelUnanswered(s *httpSession, st *stream) {
	ids := s.router.abandon(st)
	if len(ids) == 0 {
		return
	}
	msgs := make([]wire.Message, len(ids))
	for i, id := range ids {
		msgs[i] = proxy.Unparsed([]byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + string(id) +
			`,"reason":"the client closed the request's stream"}}`))
	}
	if err := s.send(msgs); err != nil {
		h.opts.Logger.Info("cancellation not passed on: the session ended", "session", s.id, "err", err)
	}
}

// uniqueIDs gives a POST's requests ids no other POST uses (requests of
// the session-less revision share one relay session), registering them
// for its stream; responses get the client's ids back.
func (rt *router) uniqueIDs(st *stream, parts []wire.Message) []wire.Message {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	out := make([]wire.Message, len(parts))
	for i, m := range parts {
		if m.Kind != wire.KindRequest {
			out[i] = m
			continue
		}
		id, k, _ := rt.renamed.Add(m.ID, st)
		old := wire.IDKey(m.ID)
		delete(rt.byID, old)
		rt.byID[k] = st
		st.mu.Lock()
		delete(st.pending, old)
		st.pending[k] = true
		st.mu.Unlock()
		out[i] = wire.WithID(m, id)
	}
	return out
}

// sharedSession is the relay session of the session-less revision for a
// caller, started on first use.
func (h *Server) sharedSession(ctx context.Context, c Caller) (*httpSession, error) {
	key := c.key()
	h.mu.Lock()
	s := h.shared[key]
	if s != nil {
		s.noteToken(c)
	}
	h.mu.Unlock()
	if s != nil {
		return s, nil
	}
	s, err := h.start(ctx, c, true)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	delete(h.sessions, s.id) // not reachable by Mcp-Session-Id
	if prev := h.shared[key]; prev != nil {
		prev.noteToken(c)
		h.mu.Unlock()
		s.in.Close()
		return prev, nil
	}
	s.router.mu.Lock()
	s.router.modern = true
	s.router.mu.Unlock()
	h.shared[key] = s
	h.mu.Unlock()
	return s, nil
}

// isModern reports whether a POST speaks the session-less revision
// (2026-07-28 or later), by its MCP-Protocol-Version header or its
// requests' _meta.
func isModern(r *http.Request, reqs []wire.Message, initialize bool) bool {
	if v := strings.TrimSpace(r.Header.Get("Mcp-Protocol-Version")); v != "" {
		return v >= "2026-07-28"
	}
	if initialize {
		return false
	}
	for _, m := range reqs {
		if v, ok := wire.String(wire.MetaMember(m.Params, proxy.MetaProtocol)); ok && v >= "2026-07-28" {
			return true
		}
	}
	return false
}

// codeHeaderMismatch is the JSON-RPC error of request headers that do not
// agree with the body (2026-07-28).
const codeHeaderMismatch = -32020

func writeHeaderMismatch(w http.ResponseWriter, id []byte, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write(wire.Refusal{Code: codeHeaderMismatch, Text: "Header mismatch: " + msg}.Answer(id))
}

// checkHeaders checks a 2026-07-28 request's Mcp-Method, Mcp-Name and
// Mcp-Param-* headers against its body, as the server behind guard would:
// guard is the HTTP server its clients see. It returns what is wrong.
func (h *Server) checkHeaders(r *http.Request, m wire.Message) string {
	if v, ok := wire.String(wire.MetaMember(m.Params, proxy.MetaProtocol)); ok {
		if hv := strings.TrimSpace(r.Header.Get("Mcp-Protocol-Version")); hv != "" && hv != v {
			return fmt.Sprintf("MCP-Protocol-Version %q does not match the request's _meta %q", hv, v)
		}
	}
	method := strings.TrimSpace(r.Header.Get("Mcp-Method"))
	if method == "" {
		return "the Mcp-Method header is missing"
	}
	if method != m.Method {
		return fmt.Sprintf("Mcp-Method %q does not match the body's method %q", method, m.Method)
	}
	name := mcpheader.Name(m)
	if name != "" {
		got := strings.TrimSpace(r.Header.Get("Mcp-Name"))
		if got == "" {
			return "the Mcp-Name header is missing"
		}
		if got != name {
			return fmt.Sprintf("Mcp-Name %q does not match the body's %q", got, name)
		}
	}
	if m.Method != "tools/call" {
		return ""
	}
	params := h.headers.Of(name)
	var args map[string]json.RawMessage
	_ = json.Unmarshal(wire.ParamsMember(m.Params, "arguments"), &args)
	for arg, header := range params {
		raw, inBody := args[arg]
		hv, inHeader := r.Header[http.CanonicalHeaderKey("Mcp-Param-"+header)]
		if !inBody {
			continue
		}
		if !inHeader || len(hv) == 0 {
			return fmt.Sprintf("the Mcp-Param-%s header is missing for argument %q", header, arg)
		}
		v := strings.TrimSpace(hv[0])
		if strings.HasPrefix(v, "=?base64?") && strings.HasSuffix(v, "?=") {
			b, err := base64.StdEncoding.Strict().DecodeString(v[len("=?base64?") : len(v)-2])
			if err != nil {
				return fmt.Sprintf("Mcp-Param-%s is not valid Base64", header)
			}
			v = string(b)
		}
		var want string
		if s, ok := wire.String(raw); ok {
			want = s
		} else {
			want = string(raw)
		}
		if v != want {
			return fmt.Sprintf("Mcp-Param-%s does not match argument %q", header, arg)
		}
	}
	return ""
}

// statusOf is the HTTP status of a session-less answer: its error's.
func statusOf(m wire.Message) int {
	if m.Error == nil {
		return http.StatusOK
	}
	switch wire.ErrorCode(m.Error) {
	case wire.CodeMethodNotFound:
		return http.StatusNotFound
	case wire.CodeInvalidParams, codeHeaderMismatch, -32021, -32022, wire.CodeInvalidRequest, wire.CodeParseError:
		return http.StatusBadRequest
	}
	return http.StatusOK
}

// missingMeta says what a session-less request lacks of the _meta every
// request carries: the revision and the client's capabilities.
func missingMeta(m wire.Message) string {
	if wire.ParamsMember(m.Params, "_meta") == nil {
		return "the request has no _meta (io.modelcontextprotocol/protocolVersion, clientCapabilities)"
	}
	if wire.MetaMember(m.Params, proxy.MetaProtocol) == nil {
		return "_meta lacks " + proxy.MetaProtocol
	}
	if wire.MetaMember(m.Params, proxy.MetaCapabilities) == nil {
		return "_meta lacks " + proxy.MetaCapabilities
	}
	return ""
}

// withMeta returns the message with one member of params._meta replaced.
func withMeta(m wire.Message, key string, value []byte) []byte {
	var p map[string]json.RawMessage
	if json.Unmarshal(m.Params, &p) != nil {
		return m.Raw
	}
	var meta map[string]json.RawMessage
	if json.Unmarshal(p["_meta"], &meta) != nil {
		return m.Raw
	}
	meta[key] = value
	b, err := json.Marshal(meta)
	if err != nil {
		return m.Raw
	}
	p["_meta"] = b
	return proxy.ReplaceParams(m, p)
}
