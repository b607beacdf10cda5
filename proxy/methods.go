package proxy

import (
	"slices"

	guard "github.com/guard-mcp/guard"
)

// requests are the methods each protocol revision defines as requests, in
// each direction, as its schema.ts lists them (the ClientRequest and
// ServerRequest unions of schema/REVISION/schema.ts in
// modelcontextprotocol/modelcontextprotocol). A notification is never
// decided on: one that names a request method is dropped, so that a peer
// that would act on it as on the request never sees it.
var requests = map[string]struct{ client, server []string }{
	guard.Rev20241105: {client: clientRequests, server: serverRequests},
	guard.Rev20250326: {client: clientRequests, server: serverRequests},
	guard.Rev20250618: {client: clientRequests, server: slices.Concat(serverRequests, []string{"elicitation/create"})},
	guard.Rev20251125: {
		client: slices.Concat(clientRequests, taskRequests),
		server: slices.Concat(serverRequests, []string{"elicitation/create"}, taskRequests),
	},
	// The server sends no requests: sampling, roots and elicitation are
	// input requests inside a result.
	guard.Rev20260728: {client: []string{"server/discover", "completion/complete", "prompts/get", "prompts/list",
		"resources/list", "resources/templates/list", "resources/read", "subscriptions/listen", "tools/call", "tools/list"}},
}

// The requests of 2024-11-05, which later revisions keep until 2026-07-28,
// and the tasks of 2025-11-25, which either side may send.
var (
	clientRequests = []string{"ping", "initialize", "completion/complete", "logging/setLevel",
		"prompts/get", "prompts/list", "resources/list", "resources/templates/list", "resources/read",
		"resources/subscribe", "resources/unsubscribe", "tools/call", "tools/list"}
	serverRequests = []string{"ping", "sampling/createMessage", "roots/list"}
	taskRequests   = []string{"tasks/get", "tasks/result", "tasks/list", "tasks/cancel"}
)

// isRequestMethod reports whether revision defines method as a request that
// the client sends (toServer) or the server sends. Before the revision is
// known, or for one guard does not know, any revision's request counts.
func isRequestMethod(revision, method string, toServer bool) bool {
	in := func(rev string) bool {
		r := requests[rev]
		if toServer {
			return slices.Contains(r.client, method)
		}
		return slices.Contains(r.server, method)
	}
	if _, known := requests[revision]; known {
		return in(revision)
	}
	for rev := range requests {
		if in(rev) {
			return true
		}
	}
	return false
}
