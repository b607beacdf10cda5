// Package e2e tests guard end to end against real MCP peers: the official
// TypeScript SDK client, the reference servers from npm, and the go-sdk's
// clients and conformance server, each run directly and through `guard run`
// and compared. The peers are installed by scripts/test.
package e2e
