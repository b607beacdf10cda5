package proxy

import "testing"

func TestServerName(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"npx", "-y", "@modelcontextprotocol/server-filesystem", "/home/me"}, "server-filesystem"},
		{[]string{"npx", "-y", "@modelcontextprotocol/server-filesystem@2025.1.14", "/srv"}, "server-filesystem"},
		{[]string{"/usr/local/bin/my-server", "--port", "1"}, "my-server"},
		{[]string{"uvx", "mcp-server-fetch@0.6"}, "mcp-server-fetch"},
		{[]string{"python3", "-u", "-m", "mcp_server_git", "--repo", "."}, "mcp_server_git"},
		{[]string{"node", "/opt/srv/dist/index.js"}, "index.js"},
		{[]string{"docker", "run", "-i", "--rm", "-e", "TOKEN=x", "mcp/github:latest"}, "github"},
		{[]string{"npx"}, "npx"},
		{[]string{"node", "node_modules/@modelcontextprotocol/server-everything/dist/index.js", "stdio"}, "index.js"},
		{[]string{"/usr/local/bin/guard", "example-server"}, "example-server"},
	} {
		if got := ServerName(tc.argv); got != tc.want {
			t.Errorf("ServerName(%q) = %q, want %q", tc.argv, got, tc.want)
		}
	}
}
