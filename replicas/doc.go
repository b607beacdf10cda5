// Package replicas tests guard run as several guard serve replicas behind
// a load balancer (HAProxy, with the configuration docs/haproxy.cfg
// documents), all on one database: sessions stay on their replica, a call
// held on one is decided from anywhere, rate limits count across all of
// them, the audit log stays one verifiable chain, and the loss of a
// replica costs only its own sessions. Its tests run real guard
// processes, a real HAProxy and real MCP clients and servers.
package replicas
