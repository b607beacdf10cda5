package proxy

import (
	"encoding/json"
	"os"
	"path"
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

// ServerName derives a server's name from its command line: CommandName,
// except that a script run by node or bun (`node /opt/x/dist/index.js`)
// is named for its package: the "name" of the nearest package.json at or
// above the script that has one, without its scope and made safe as a server name
// (`@acme/mcp-notes` is "mcp-notes"). A script outside any package, or
// whose package has no name, keeps CommandName's.
func ServerName(argv []string) string {
	name := CommandName(argv)
	if len(argv) < 2 || !scriptRunners[commandBase(argv[0])] {
		return name
	}
	for _, a := range argv[1:] {
		if strings.HasPrefix(a, "-") {
			continue
		}
		if pkg := packageName(a); pkg != "" {
			return pkg
		}
		break
	}
	return name
}

// scriptRunners run a JavaScript file given as their first argument that
// is not a flag.
var scriptRunners = map[string]bool{"node": true, "bun": true}

// packageName is the name of the package holding a script file: the
// "name" of the nearest package.json at or above it that has one, as a
// server name; "" when there is none.
func packageName(script string) string {
	abs, err := filepath.Abs(script)
	if err != nil {
		return ""
	}
	if fi, err := os.Stat(abs); err != nil || fi.IsDir() {
		return ""
	}
	for dir := filepath.Dir(abs); ; dir = filepath.Dir(dir) {
		// A package.json without a name ({"type": "module"} beside
		// built files) is not the package's: look further up.
		if b, err := os.ReadFile(filepath.Join(dir, "package.json")); err == nil {
			var pkg struct {
				Name string `json:"name"`
			}
			if json.Unmarshal(b, &pkg) == nil && safeName(pkg.Name) != "" {
				return safeName(pkg.Name)
			}
		}
		if filepath.Dir(dir) == dir {
			return ""
		}
	}
}

// safeName makes a package's name a server name: without its scope, as
// npx's packages are named, and with only letters, digits, '.', '_' and
// '-' (any other character becomes '-'); "" for a name with none of them.
func safeName(pkg string) string {
	if i := strings.LastIndex(pkg, "/"); i >= 0 {
		pkg = pkg[i+1:]
	}
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '-'
	}, pkg)
	if strings.Trim(name, "-.") == "" {
		return ""
	}
	return name
}

// CommandName derives a server's name from its command line alone: the
// basename of the command or, for a launcher (npx, uvx, node, python,
// docker, ...), of its first argument that is not a flag, without a
// version or tag suffix: `npx -y @modelcontextprotocol/server-filesystem@1.0 /srv`
// is "server-filesystem". It is how guard named every server before it
// read package names, and the name a server keeps once its tools are in
// the catalog under it.
func CommandName(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	cmd := commandBase(argv[0])
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

// commandBase is a command's name: the last element of its path, written
// with slashes or backslashes, without the extension of a Windows program
// (node.exe, npx.cmd and C:\Program Files\nodejs\node.exe are node and
// npx).
func commandBase(cmd string) string {
	cmd = strings.TrimRight(cmd, `/\`)
	cmd = cmd[strings.LastIndexAny(cmd, `/\`)+1:]
	if ext := path.Ext(cmd); len(cmd) > len(ext) {
		switch strings.ToLower(ext) {
		case ".exe", ".cmd", ".bat":
			return cmd[:len(cmd)-len(ext)]
		}
	}
	return cmd
}

// stripVersion turns "@scope/name@1.2", "name@latest", "org/image:tag",
// "https://host/x/server.ts" and C:\mcp\server.js into their base name.
func stripVersion(a string) string {
	a = strings.TrimRight(a, `/\`)
	a = a[strings.LastIndexAny(a, `/\`)+1:]
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
