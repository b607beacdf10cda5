package clients

import (
	"net/url"
	"slices"
	"sort"
	"strings"
)

// kind is what an entry is to guard.
type kind int

const (
	kindUnknown kind = iota // neither a command nor a URL guard can read
	kindStdio               // a command the client starts
	kindHTTP                // a URL the client reaches
)

// entry is one server of a client's file, read.
type entry struct {
	docEntry
	kind kind
	// guard is, for an entry already wrapped, the command that wraps it.
	guard string
	// disabled: the client does not start the server.
	disabled bool
	remote   remote
}

// remote is how an entry reaches its server over HTTP, in its client's
// words.
type remote struct {
	url string
	// urlKey is the member that holds the URL.
	urlKey string
	sse    bool
	// headers are sent as they are (their values may hold references the
	// client expands, ${env:NAME}, ${input:ID}, which it expands in an
	// env as well).
	headers []member
	// envHeaders map a header to the variable that holds its value
	// (Codex's env_http_headers); bearerEnv is the variable of a bearer
	// token (Codex's bearer_token_env_var).
	envHeaders []member
	bearerEnv  string
	// drop are the members of the entry that only an HTTP entry has.
	drop []string
	// clientAuth, when not "", says how the client authenticates itself
	// to the server (its subject is the client), which guard in its place
	// could not.
	clientAuth string
}

// authorization reports whether the entry gives the server a credential
// of its own (so that its client does no OAuth).
func (r remote) authorization() bool {
	if r.bearerEnv != "" {
		return true
	}
	for _, h := range append(slices.Clone(r.headers), r.envHeaders...) {
		if strings.EqualFold(h.key, "Authorization") {
			return true
		}
	}
	return false
}

// read classifies a file's entry for its client.
func (c *Client) read(d docEntry) entry {
	e := entry{docEntry: d}
	v := d.value
	if v == nil {
		return e
	}
	e.disabled = v["disabled"] == true || v["enabled"] == false
	if cmd, ok := v["command"].(string); ok && cmd != "" {
		e.kind = kindStdio
		if isGuard(cmd) {
			if args, _ := v["args"].([]any); len(args) > 0 && args[0] == "run" {
				e.guard = cmd
			}
		}
		return e
	}
	if r, ok := c.remote(v); ok {
		e.kind, e.remote = kindHTTP, r
	}
	return e
}

// isGuard reports whether a command is a guard binary, named as on any
// system.
func isGuard(cmd string) bool {
	base := cmd[strings.LastIndexAny(cmd, `/\`)+1:]
	return base == "guard" || strings.EqualFold(base, "guard.exe")
}

// jsonRemote reads the HTTP entries of a JSON client whose URL is in the
// first of keys present: `type` says sse or http (streamable-http), else
// a path that ends in /sse is the legacy transport.
func jsonRemote(keys ...string) func(v map[string]any) (remote, bool) {
	return func(v map[string]any) (remote, bool) {
		for _, k := range keys {
			u, ok := v[k].(string)
			if !ok || u == "" {
				continue
			}
			r := remote{url: u, urlKey: k, headers: stringMembers(v["headers"])}
			switch t, _ := v["type"].(string); t {
			case "sse":
				r.sse = true
			case "":
				r.sse = strings.HasSuffix(urlPath(u), "/sse")
			}
			for _, d := range append(slices.Clone(keys), "headers") {
				if _, ok := v[d]; ok {
					r.drop = append(r.drop, d)
				}
			}
			r.clientAuth = clientAuth(v)
			return r, true
		}
		return remote{}, false
	}
}

// geminiRemote reads Gemini CLI's HTTP entries: httpUrl is Streamable
// HTTP, url the legacy SSE transport (unless type says http).
func geminiRemote(v map[string]any) (remote, bool) {
	r, ok := jsonRemote("httpUrl", "url")(v)
	if !ok {
		return r, false
	}
	t, _ := v["type"].(string)
	r.sse = r.urlKey == "url" && t != "http"
	return r, true
}

// codexRemote reads Codex's HTTP entries (Streamable HTTP only): url,
// with headers given as they are (http_headers), by the variable that
// holds each (env_http_headers), and a bearer token's variable
// (bearer_token_env_var).
func codexRemote(v map[string]any) (remote, bool) {
	u, ok := v["url"].(string)
	if !ok || u == "" {
		return remote{}, false
	}
	r := remote{url: u, urlKey: "url", headers: stringMembers(v["http_headers"]), envHeaders: stringMembers(v["env_http_headers"])}
	r.bearerEnv, _ = v["bearer_token_env_var"].(string)
	for _, d := range []string{"url", "bearer_token_env_var", "http_headers", "env_http_headers"} {
		if _, ok := v[d]; ok {
			r.drop = append(r.drop, d)
		}
	}
	return r, true
}

// clientAuth says why a client's own authentication keeps an entry from
// guard: OAuth it configures (Claude Code's and Gemini CLI's oauth),
// Google credentials (Gemini CLI's authProviderType), headers a command
// of the client's makes (Claude Code's headersHelper).
func clientAuth(v map[string]any) string {
	switch {
	case v["oauth"] != nil:
		return "authorises it with OAuth (oauth)"
	case v["authProviderType"] != nil:
		return "authenticates to it (authProviderType)"
	case v["headersHelper"] != nil:
		return "makes its headers with a command (headersHelper)"
	}
	return ""
}

// stringMembers are an object's string members, by name.
func stringMembers(v any) []member {
	m, _ := v.(map[string]any)
	var out []member
	for k, x := range m {
		if s, ok := x.(string); ok {
			out = append(out, member{k, s})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}

func urlPath(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(p.Path, "/")
}

// headerVariable names the variable of a wrapped entry's env that carries
// a header's value to guard: GUARD_HEADER_ and the header's name in
// capitals, other characters as underscores.
func headerVariable(header string) string {
	b := []byte("GUARD_HEADER_" + strings.ToUpper(header))
	for i, c := range b {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}
