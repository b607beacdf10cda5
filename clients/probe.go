package clients

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// ProbeOAuth reports whether the MCP server at rawURL asks for OAuth: it
// answers a first request with 401 and points to its OAuth
// protected-resource metadata (RFC 9728), in WWW-Authenticate or at the
// well-known address, or serves authorization-server metadata at its
// origin (the 2025-03-26 revision). Such a server's client authorises
// it, in a browser, and guard in the client's place could not. A server
// that cannot be reached does not ask. client nil is
// http.DefaultClient; ctx bounds the whole probe.
func ProbeOAuth(ctx context.Context, client *http.Client, rawURL string, sse bool, headers map[string]string) bool {
	if client == nil {
		client = http.DefaultClient
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return false
	}
	var req *http.Request
	if sse {
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
		if err == nil {
			req.Header.Set("Accept", "text/event-stream")
		}
	} else {
		body := `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"guard-wrap","version":"1"}}}`
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, rawURL, strings.NewReader(body))
		if err == nil {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
		}
	}
	if err != nil {
		return false
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	// Only the status and headers count: an event stream or a session
	// that the server opened ends here.
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		return false
	}
	for _, h := range resp.Header.Values("WWW-Authenticate") {
		if strings.Contains(strings.ToLower(h), "resource_metadata") {
			return true
		}
	}
	origin := u.Scheme + "://" + u.Host
	path := strings.TrimSuffix(u.Path, "/")
	for _, m := range []struct{ url, member string }{
		{origin + "/.well-known/oauth-protected-resource" + path, "authorization_servers"},
		{origin + "/.well-known/oauth-protected-resource", "authorization_servers"},
		{origin + "/.well-known/oauth-authorization-server", "authorization_endpoint"},
	} {
		if metadata(ctx, client, m.url, m.member) {
			return true
		}
	}
	return false
}

// metadata reports whether url serves a JSON object with the member.
func metadata(ctx context.Context, client *http.Client, url, member string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false
	}
	var m map[string]json.RawMessage
	if json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&m) != nil {
		return false
	}
	_, ok := m[member]
	return ok
}
