package policy

import (
	"bytes"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Protected lists guard's own files: its database, configuration, rules,
// keys and data directory. A call whose arguments name one of them, or run
// guard's own command line, is denied: a model must not approve its own
// calls or rewrite the record through its tools.
type Protected struct {
	// Paths are files and directories (absolute); a path under a
	// directory is protected too.
	Paths []string
	// Home is the user's home directory, for "~/" in arguments.
	Home string
	// Dir resolves relative paths in arguments (guard's working directory).
	Dir string
}

// NewProtected cleans the paths and adds the forms an argument may use.
func NewProtected(paths ...string) *Protected {
	p := &Protected{}
	p.Home, _ = os.UserHomeDir()
	p.Dir, _ = os.Getwd()
	for _, x := range paths {
		if x == "" {
			continue
		}
		if abs, err := filepath.Abs(x); err == nil {
			x = abs
		}
		p.Paths = append(p.Paths, filepath.Clean(x))
		// The real path too, when a link leads to it.
		if real, err := filepath.EvalSymlinks(x); err == nil && real != x {
			p.Paths = append(p.Paths, real)
		}
	}
	return p
}

// guardCommand matches a command line that runs guard with one of its
// subcommands, by name or by path.
var guardCommand = regexp.MustCompile(`(?:^|[\s;&|("'` + "`" + `/=])guard(?:\.exe)?\s+(?:run|serve|approvals|audit|tools|policy|ui|demo|example-server|bench)\b`)

// Check returns why arguments are refused, or "".
func (p *Protected) Check(args []byte) string {
	if p == nil || len(args) == 0 || len(p.Paths) == 0 {
		return ""
	}
	if !p.mayName(args) {
		return ""
	}
	var v any
	if json.Unmarshal(args, &v) != nil {
		return ""
	}
	reason := ""
	walkStrings(v, func(s string) bool {
		if guardCommand.MatchString(s) {
			reason = "arguments run guard's own command line"
			return false
		}
		if p.names(s) {
			reason = "arguments name guard's own files"
			return false
		}
		return true
	})
	return reason
}

// CheckURI is Check for the URI of a resource read: its text, and its
// path decoded (percent-escapes undone, a file: URI's host ignored), must
// not name guard's files.
func (p *Protected) CheckURI(uri string) string {
	if p == nil || uri == "" || len(p.Paths) == 0 {
		return ""
	}
	texts := []string{uri}
	if u, err := url.Parse(uri); err == nil {
		texts = append(texts, u.Path, u.Opaque)
	}
	if s, err := url.PathUnescape(uri); err == nil {
		texts = append(texts, s)
	}
	for _, s := range texts {
		if s != "" && p.names(s) {
			return "the resource is one of guard's own files"
		}
	}
	return ""
}

// mayName is a cheap first look: arguments with no path separator, no
// "~", no "guard" and none of the protected files' names cannot name
// them, nor run guard's command line.
func (p *Protected) mayName(args []byte) bool {
	if bytes.ContainsAny(args, "/~") || containsFoldASCII(args, "guard") {
		return true
	}
	for _, x := range p.Paths {
		if bytes.Contains(args, []byte(filepath.Base(x))) {
			return true
		}
	}
	return false
}

// containsFoldASCII reports whether b holds s (ASCII), ignoring case.
func containsFoldASCII(b []byte, s string) bool {
	for i := 0; i+len(s) <= len(b); i++ {
		j := 0
		for j < len(s) && lower(b[i+j]) == s[j] {
			j++
		}
		if j == len(s) {
			return true
		}
	}
	return false
}

// names reports whether s names a protected path: as a path of its own
// (absolute, relative, with ~ or ..), or as a word of a longer text such
// as a shell command.
func (p *Protected) names(s string) bool {
	if len(s) <= 4096 && p.protects(p.resolve(s)) {
		return true
	}
	if !strings.ContainsAny(s, "/~") {
		return false
	}
	// Each word of a longer text, without copying the text.
	for start := 0; start < len(s); {
		for start < len(s) && isSeparator(rune(s[start])) {
			start++
		}
		end := start
		for end < len(s) && !isSeparator(rune(s[end])) {
			end++
		}
		if w := s[start:end]; w != "" && strings.ContainsAny(w, "/~.") && p.protects(p.resolve(w)) {
			return true
		}
		start = end
	}
	return false
}

func isSeparator(r rune) bool { return strings.ContainsRune(" \t\n;&|<>\"'`()=,:", r) }

// resolve turns a path as an argument writes it into a clean absolute one.
func (p *Protected) resolve(w string) string {
	if p.Home != "" {
		for _, pre := range []string{"~/", "$HOME/", "${HOME}/"} {
			if strings.HasPrefix(w, pre) {
				w = p.Home + "/" + w[len(pre):]
				break
			}
		}
	}
	if !filepath.IsAbs(w) {
		if p.Dir == "" {
			return ""
		}
		w = filepath.Join(p.Dir, w)
	}
	return filepath.Clean(w)
}

func (p *Protected) protects(path string) bool {
	if path == "" {
		return false
	}
	for _, x := range p.Paths {
		if path == x || strings.HasPrefix(path, x) && len(path) > len(x) && path[len(x)] == '/' {
			return true
		}
	}
	return false
}

func walkStrings(v any, fn func(string) bool) bool {
	switch x := v.(type) {
	case string:
		return fn(x)
	case map[string]any:
		for k, e := range x {
			if !fn(k) || !walkStrings(e, fn) {
				return false
			}
		}
	case []any:
		for _, e := range x {
			if !walkStrings(e, fn) {
				return false
			}
		}
	}
	return true
}
