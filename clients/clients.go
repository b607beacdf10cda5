package clients

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Client is an MCP client whose configuration guard knows how to edit.
type Client struct {
	// Name is how the command line names it (claude-desktop).
	Name string
	// Title is how people know it (Claude Desktop).
	Title string
	// toml: the file is TOML (Codex); else JSON with comments and
	// trailing commas, which hujson edits in place.
	toml bool
	// servers is the member of the file, or of a project's section of it,
	// that maps server names to entries.
	servers string
	// user lists the user-level files on an OS: glob patterns.
	user func(e Env) []string
	// project lists a project's files, relative to its directory.
	project []string
	// Note is what a person should know about the client's servers that
	// the file does not say ("" when nothing).
	Note string
	// rewrites: the client writes its file while it runs, so a change
	// made meanwhile may be lost.
	rewrites bool
	// remote reads an entry that reaches its server over HTTP.
	remote func(v map[string]any) (remote, bool)
}

// all are the clients guard knows, in the order they are listed.
var all = []*Client{
	{
		Name: "claude-desktop", Title: "Claude Desktop", servers: "mcpServers",
		user: func(e Env) []string {
			switch e.GOOS {
			case "darwin":
				return []string{filepath.Join(e.appSupport(), "Claude", "claude_desktop_config.json")}
			case "windows":
				return []string{
					filepath.Join(e.appData(), "Claude", "claude_desktop_config.json"),
					// A Store (MSIX) install writes to its virtualised
					// copy of the roaming folder.
					filepath.Join(e.localAppData(), "Packages", "Claude_*", "LocalCache", "Roaming", "Claude", "claude_desktop_config.json"),
				}
			}
			return []string{filepath.Join(e.xdgConfig(), "Claude", "claude_desktop_config.json")}
		},
		Note:   "Servers installed as Desktop Extensions are not in this file (Settings > Extensions lists them): guard cannot wrap them.",
		remote: jsonRemote("url"),
	},
	{
		Name: "claude-code", Title: "Claude Code", servers: "mcpServers",
		user: func(e Env) []string {
			// CLAUDE_CONFIG_DIR moves the whole of Claude Code's
			// configuration, this file with it.
			if d := e.Getenv("CLAUDE_CONFIG_DIR"); d != "" {
				return []string{filepath.Join(d, ".claude.json")}
			}
			return []string{filepath.Join(e.Home, ".claude.json")}
		},
		project:  []string{".mcp.json"},
		rewrites: true,
		remote:   jsonRemote("url"),
	},
	{
		Name: "cursor", Title: "Cursor", servers: "mcpServers",
		user:    func(e Env) []string { return []string{filepath.Join(e.Home, ".cursor", "mcp.json")} },
		project: []string{filepath.Join(".cursor", "mcp.json")},
		remote:  jsonRemote("url"),
	},
	{
		Name: "vscode", Title: "VS Code", servers: "servers",
		user: func(e Env) []string {
			var out []string
			for _, app := range []string{"Code", "Code - Insiders"} {
				var user string
				switch e.GOOS {
				case "darwin":
					user = filepath.Join(e.appSupport(), app, "User")
				case "windows":
					user = filepath.Join(e.appData(), app, "User")
				default:
					user = filepath.Join(e.xdgConfig(), app, "User")
				}
				out = append(out, filepath.Join(user, "mcp.json"), filepath.Join(user, "profiles", "*", "mcp.json"))
			}
			return out
		},
		project: []string{filepath.Join(".vscode", "mcp.json")},
		remote:  jsonRemote("url"),
	},
	{
		Name: "windsurf", Title: "Windsurf", servers: "mcpServers",
		user: func(e Env) []string {
			return []string{filepath.Join(e.Home, ".codeium", "windsurf", "mcp_config.json")}
		},
		remote: jsonRemote("serverUrl", "url"),
	},
	{
		Name: "gemini-cli", Title: "Gemini CLI", servers: "mcpServers",
		user:    func(e Env) []string { return []string{filepath.Join(e.Home, ".gemini", "settings.json")} },
		project: []string{filepath.Join(".gemini", "settings.json")},
		remote:  geminiRemote,
	},
	{
		Name: "codex", Title: "Codex", servers: "mcp_servers", toml: true,
		user: func(e Env) []string {
			if d := e.Getenv("CODEX_HOME"); d != "" {
				return []string{filepath.Join(d, "config.toml")}
			}
			return []string{filepath.Join(e.Home, ".codex", "config.toml")}
		},
		remote: codexRemote,
	},
}

// Names lists the clients' names.
func Names() []string {
	out := make([]string, len(all))
	for i, c := range all {
		out[i] = c.Name
	}
	return out
}

// Lookup returns the client of that name.
func Lookup(name string) (*Client, error) {
	for _, c := range all {
		if c.Name == name {
			return c, nil
		}
	}
	return nil, fmt.Errorf("unknown client %q (want one of %s)", name, strings.Join(Names(), ", "))
}

// Env is what the places of clients' files depend on: the operating
// system (a GOOS value), the environment and the home directory.
type Env struct {
	// GOOS is linux, darwin or windows (another is taken as Linux).
	GOOS string
	// Getenv reads the environment (XDG_CONFIG_HOME, APPDATA, CODEX_HOME,
	// ...).
	Getenv func(string) string
	// Home is the user's home directory (%USERPROFILE% on Windows).
	Home string
}

// UserFiles returns where the client keeps its user-level files on e's
// system: paths, some of them glob patterns (VS Code's profiles, the
// Store install of Claude Desktop).
func (c *Client) UserFiles(e Env) []string { return c.user(e) }

// ProjectFiles returns the client's files of the project in dir (none
// for a client without project files).
func (c *Client) ProjectFiles(dir string) []string {
	out := make([]string, len(c.project))
	for i, p := range c.project {
		out[i] = filepath.Join(dir, p)
	}
	return out
}

// Rewrites reports whether the client writes its file while it runs, so
// that it may put back what guard changes meanwhile.
func (c *Client) Rewrites() bool { return c.rewrites }

// HasProjectFiles reports whether the client reads files of a project.
func (c *Client) HasProjectFiles() bool { return len(c.project) > 0 || c.Name == "claude-code" }

func (e Env) getenvAbs(name string) string {
	// The XDG specification ignores a relative value, and so do the
	// clients.
	if v := e.Getenv(name); v != "" && (filepath.IsAbs(v) || e.GOOS == "windows") {
		return v
	}
	return ""
}

// xdgConfig is $XDG_CONFIG_HOME, by default ~/.config.
func (e Env) xdgConfig() string {
	if v := e.getenvAbs("XDG_CONFIG_HOME"); v != "" {
		return v
	}
	return filepath.Join(e.Home, ".config")
}

// appSupport is macOS's per-user application data.
func (e Env) appSupport() string { return filepath.Join(e.Home, "Library", "Application Support") }

// appData is Windows's roaming application data, %APPDATA%.
func (e Env) appData() string {
	if v := e.Getenv("APPDATA"); v != "" {
		return v
	}
	return filepath.Join(e.Home, "AppData", "Roaming")
}

// localAppData is Windows's local application data, %LOCALAPPDATA%.
func (e Env) localAppData() string {
	if v := e.Getenv("LOCALAPPDATA"); v != "" {
		return v
	}
	return filepath.Join(e.Home, "AppData", "Local")
}

// File is one configuration file of a client, with the sections of it
// that list servers.
type File struct {
	// Client is the client that reads the file.
	Client *Client
	// Path is the file's path as found (a link stays a link: its target
	// is what guard edits).
	Path string
	// Project: the file belongs to a project, which is usually committed
	// and shared.
	Project bool
	// sections are the paths of keys to each server map in the file:
	// [mcpServers], or Claude Code's [projects DIR mcpServers].
	sections [][]string
}

// Sections are the paths of keys in the file to each map of servers that
// guard reads and edits.
func (f *File) Sections() [][]string { return slices.Clone(f.sections) }

// Find returns the files of the named clients (every client when names
// is empty) that exist: the user-level files, and with project, an
// absolute directory, that project's files (and, of Claude Code's user
// file, the project's own section).
func Find(e Env, names []string, project string) ([]*File, error) {
	cs := all
	if len(names) > 0 {
		cs = nil
		for _, n := range names {
			c, err := Lookup(n)
			if err != nil {
				return nil, err
			}
			if !slices.Contains(cs, c) {
				cs = append(cs, c)
			}
		}
	}
	var out []*File
	seen := map[string]bool{}
	add := func(c *Client, patterns []string, isProject bool) error {
		for _, pat := range patterns {
			matches, err := expand(pat)
			if err != nil {
				return fmt.Errorf("looking for %s's files: %w", c.Title, err)
			}
			for _, m := range matches {
				if seen[m] || !isFile(m) {
					continue
				}
				seen[m] = true
				f := &File{Client: c, Path: m, Project: isProject, sections: [][]string{{c.servers}}}
				if c.Name == "claude-code" && !isProject && project != "" {
					f.sections = append(f.sections, []string{"projects", project, c.servers})
				}
				out = append(out, f)
			}
		}
		return nil
	}
	for _, c := range cs {
		if err := add(c, c.UserFiles(e), false); err != nil {
			return nil, err
		}
		if project != "" {
			if err := add(c, c.ProjectFiles(project), true); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// expand returns the files that pattern names, sorted: its elements that
// hold a '*' are matched against the directory's entries, the others
// taken as they are (a home directory may hold any character that
// filepath.Glob would read as a pattern).
func expand(pattern string) ([]string, error) {
	dir, rest := pattern, []string(nil)
	for strings.Contains(dir, "*") {
		rest = append([]string{filepath.Base(dir)}, rest...)
		dir = filepath.Dir(dir)
	}
	paths := []string{dir}
	for _, elem := range rest {
		var next []string
		for _, p := range paths {
			if !strings.Contains(elem, "*") {
				next = append(next, filepath.Join(p, elem))
				continue
			}
			entries, err := os.ReadDir(p)
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
					continue
				}
				return nil, err
			}
			for _, de := range entries {
				if ok, err := filepath.Match(elem, de.Name()); err != nil {
					return nil, fmt.Errorf("%s: %w", pattern, err)
				} else if ok {
					next = append(next, filepath.Join(p, de.Name()))
				}
			}
		}
		paths = next
	}
	slices.Sort(paths)
	return paths, nil
}

// isFile reports whether p is a regular file, or a link to one.
func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}
