package proxy

import (
	"path/filepath"
	"strings"
)

// launchers run the server named by their first argument that is not a flag.
var launchers = map[string]bool{
	"npx": true, "uvx": true, "node": true, "python": true, "python3": true,
	"deno": true, "bun": true, "docker": true, "pnpm": true, "bunx": true,
}

// dockerValueFlags are docker run flags that take a separate value.
var dockerValueFlags = map[string]bool{
	"-e": true, "--env": true, "-v": true, "--volume": true, "--name": true, "--network": true,
	"-p": true, "--publish": true, "--mount": true, "--entrypoint": true, "-w": true, "--workdir": true,
	"-u": true, "--user": true, "--env-file": true, "-l": true, "--label": true, "--platform": true,
}

// ServerName derives a server's name from its command line: the basename of
// the command or, for a launcher (npx, uvx, node, python, docker, ...), of
// its first argument that is not a flag, without a version or tag suffix:
// `npx -y @modelcontextprotocol/server-filesystem@1.0 /srv` is
// "server-filesystem".
func ServerName(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	cmd := filepath.Base(argv[0])
	if cmd == "guard" && len(argv) > 1 && argv[1] == "example-server" {
		return "example-server"
	}
	if !launchers[cmd] {
		return cmd
	}
	args := argv[1:]
	if cmd == "docker" || cmd == "deno" || cmd == "pnpm" {
		// `docker run [flags] IMAGE`, `deno run [flags] URL`, `pnpm dlx PKG`
		if len(args) > 0 && (args[0] == "run" || args[0] == "dlx" || args[0] == "exec") {
			args = args[1:]
		}
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "-") {
			if cmd == "docker" && dockerValueFlags[a] {
				i++
			}
			if (cmd == "python" || cmd == "python3") && a == "-m" && i+1 < len(args) {
				return args[i+1]
			}
			continue
		}
		return stripVersion(a)
	}
	return cmd
}

// stripVersion turns "@scope/name@1.2", "name@latest", "org/image:tag" and
// "https://host/x/server.ts" into their base name.
func stripVersion(a string) string {
	a = strings.TrimRight(a, "/")
	a = a[strings.LastIndex(a, "/")+1:]
	if i := strings.LastIndex(a, "@"); i > 0 {
		a = a[:i]
	}
	if i := strings.Index(a, ":"); i > 0 {
		a = a[:i]
	}
	if a == "" || a == "@" {
		return "server"
	}
	return a
}
