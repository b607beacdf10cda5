package policy

import (
	"bytes"
	"encoding/json"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Protected lists guard's own files: its database, configuration, rules,
// keys and data directory. A call whose arguments name one of them, or run
// guard's own command line, is denied: a model must not approve its own
// calls or rewrite the record through its tools.
//
// Paths are compared as the file systems of OS compare them: exactly on
// Linux; on macOS (APFS) and Windows (NTFS) without regard to case, and on
// macOS to Unicode normalization. On Windows an argument may also write a
// path with backslashes, a drive letter, a \\?\ or \\.\ prefix, as a UNC
// path (an administrative share such as \\host\C$ counts as that drive),
// with a stream (guard.db::$DATA) or trailing dots and spaces, which
// Windows ignores, and with 8.3 short names: a component such as GUARD~1
// matches any protected component it could be the short name of. Set OS
// and Paths before the first check.
type Protected struct {
	// Paths are files and directories (absolute); a path under a
	// directory is protected too.
	Paths []string
	// Home is the user's home directory, for "~/" in arguments.
	Home string
	// Dir resolves relative paths in arguments (guard's working directory).
	Dir string
	// OS is the GOOS whose paths arguments write (runtime.GOOS unless a
	// test says otherwise).
	OS string
	// Vars are environment variables an argument may write a path with
	// ($XDG_DATA_HOME/guard, %LOCALAPPDATA%\guard), by name.
	Vars map[string]string

	once   sync.Once
	exact  []string   // Paths, clean, where names compare exactly (Linux)
	keys   [][]string // Paths as compared elsewhere
	bases  []string   // each path's last component, for mayName
	spaces int        // the most spaces in one of Paths

}

// pathVars are the variables whose values guard's files are under, or
// which name them.
var pathVars = []string{"HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "USERPROFILE", "APPDATA", "LOCALAPPDATA",
	"HOMEDRIVE", "HOMEPATH", "GUARD_DB", "GUARD_CONFIG"}

// NewProtected cleans the paths and adds the forms an argument may use,
// for this OS, this process's home and working directories and
// environment.
func NewProtected(paths ...string) *Protected {
	p := &Protected{OS: runtime.GOOS, Vars: map[string]string{}}
	p.Home, _ = os.UserHomeDir()
	p.Dir, _ = os.Getwd()
	for _, name := range pathVars {
		if v := os.Getenv(name); v != "" {
			p.Vars[name] = v
		}
	}
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
// subcommands, by name or by path, perhaps quoted, perhaps with flags
// before the subcommand. guard wrap and unwrap rewrite every client's
// servers, guard store copies the log away: an agent's shell tool must not
// run them any more than guard approvals approve.
var guardCommand = regexp.MustCompile(`(?:^|[\s;&|("'` + "`" + `/\\=])guard(?:\.exe)?["']?(?:\s+--?[\w-]+(?:[= ]\S+)?)*\s+` +
	`(?:run|serve|approvals|audit|tools|policy|ui|demo|example-server|bench|wrap|unwrap|store)\b`)

// guardCommandFold is guardCommand where file names ignore case: GUARD.EXE
// runs guard there.
var guardCommandFold = regexp.MustCompile(`(?i)` + guardCommand.String())

// Check returns why arguments are refused, or "".
func (p *Protected) Check(args []byte) string {
	if p == nil || len(args) == 0 || len(p.Paths) == 0 {
		return ""
	}
	p.once.Do(p.prepare)
	if !p.mayName(args) {
		return ""
	}
	var v any
	if json.Unmarshal(args, &v) != nil {
		return ""
	}
	command := guardCommand
	if p.fold() {
		command = guardCommandFold
	}
	reason := ""
	walkStrings(v, func(s string) bool {
		if command.MatchString(s) {
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
	p.once.Do(p.prepare)
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

// prepare makes the protected paths' compared forms.
func (p *Protected) prepare() {
	for _, x := range p.Paths {
		if !p.fold() {
			if clean, ok := unixClean(x, ""); ok {
				p.exact = append(p.exact, clean)
			}
		}
		if k := p.components(x); len(k) > 0 {
			p.keys = append(p.keys, k)
			p.bases = append(p.bases, k[len(k)-1])
			p.spaces = max(p.spaces, strings.Count(x, " "))
		}
	}
}

// fold reports whether file names compare without regard to case.
func (p *Protected) fold() bool { return p.OS == "darwin" || p.OS == "windows" }

// namesPath reports whether the path w, as an argument writes it, is a
// protected path or under one. Where names compare byte for byte (Linux),
// the path is compared whole, not split, as every call's arguments are.
func (p *Protected) namesPath(w string) bool {
	if p.fold() {
		return p.protects(p.components(w))
	}
	clean, ok := unixClean(p.expand(w), p.Dir)
	if !ok {
		return false
	}
	for _, x := range p.exact {
		if clean == x || strings.HasPrefix(clean, x) && len(clean) > len(x) && (clean[len(x)] == '/' || x == "/") {
			return true
		}
	}
	return false
}

// separators are the characters that make a text a path.
func (p *Protected) separators() string {
	if p.OS == "windows" {
		return `/~\`
	}
	return "/~"
}

// mayName is a cheap first look: arguments with no path separator, no
// "~", no "guard" and none of the protected files' names cannot name
// them, nor run guard's command line.
func (p *Protected) mayName(args []byte) bool {
	if bytes.ContainsAny(args, p.separators()) || containsFoldASCII(args, "guard") {
		return true
	}
	for _, name := range p.bases {
		switch {
		case !p.fold():
			if bytes.Contains(args, []byte(name)) {
				return true
			}
		case !isASCII(name):
			return true // a case-insensitive look for it costs what the check does
		case containsFoldASCII(args, strings.ToLower(name)):
			return true
		}
	}
	return false
}

// containsFoldASCII reports whether b holds s (lower-case ASCII),
// ignoring case.
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

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// names reports whether s names a protected path: as a path of its own
// (absolute, relative, with ~, a variable or ..), or as a word of a longer
// text such as a shell command, quoted or not. Where a protected path has
// spaces (~/Library/Application Support, C:\Users\Long Name), so many
// words joined by spaces count as one.
func (p *Protected) names(s string) bool {
	if len(s) <= 4096 && p.namesPath(s) {
		return true
	}
	if !strings.ContainsAny(s, p.separators()) {
		return false
	}
	if p.namesIn(s) {
		return true
	}
	if u := p.unquote(s); u != s {
		return p.namesIn(u)
	}
	return false
}

// namesIn looks at each word of s, and at each run of words that only
// spaces separate, as long as a protected path's spaces allow.
func (p *Protected) namesIn(s string) bool {
	windows := p.OS == "windows"
	wordEnd := func(i int) int {
		for i < len(s) && !isSeparator(s[i], windows) {
			i++
		}
		return i
	}
	for start := 0; start < len(s); {
		for start < len(s) && isSeparator(s[start], windows) {
			start++
		}
		end := wordEnd(start)
		if end == start {
			break
		}
		for e, joins := end, 0; ; joins++ {
			if w := s[start:e]; strings.ContainsAny(w, p.separators()+".") && p.namesWord(w) {
				return true
			}
			next := e
			for next < len(s) && s[next] == ' ' {
				next++
			}
			if joins == p.spaces || next == e || next == len(s) || isSeparator(s[next], windows) {
				break // joined across spaces only
			}
			e = wordEnd(next)
		}
		start = end
	}
	return false
}

// unquote is s as a shell reads its words: without quotes, and on Unix a
// backslash keeping the character after it as it is (Application\ Support).
func (p *Protected) unquote(s string) string {
	if p.OS == "windows" {
		if !strings.ContainsAny(s, `"'`) {
			return s
		}
		return strings.NewReplacer(`"`, "", `'`, "").Replace(s)
	}
	if !strings.ContainsAny(s, `"'\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\'':
		case c == '\\' && i+1 < len(s):
			i++
			b.WriteByte(s[i])
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// namesWord reports whether one word names a protected path. On Windows,
// where a colon is a drive's, a word is also read from each drive it
// names (C:/ or C:\, as in file:///C:/... or sqlite:%LOCALAPPDATA%\...).
func (p *Protected) namesWord(w string) bool {
	if p.namesPath(w) {
		return true
	}
	if p.OS != "windows" {
		return false
	}
	if w = p.expand(w); !strings.Contains(w, ":") {
		return false
	}
	for i := 1; i+1 < len(w); i++ {
		if w[i] == ':' && isLetter(w[i-1]) && (w[i+1] == '/' || w[i+1] == '\\') && (i == 1 || !isLetter(w[i-2]) && !isDigit(w[i-2])) {
			if p.namesPath(w[i-1:]) {
				return true
			}
		}
	}
	return false
}

func isSeparator(c byte, windows bool) bool {
	if c == ':' {
		return !windows
	}
	return strings.IndexByte(" \t\n;&|<>\"'`()=,", c) >= 0
}

func isLetter(c byte) bool { return 'a' <= lower(c) && lower(c) <= 'z' }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// components returns the path w, as an argument writes it, made absolute
// and clean, as the components compared (a Windows path's first is its
// drive, "c:", or UNC share, "//host/share"), or nil when it cannot be
// made absolute.
func (p *Protected) components(w string) []string {
	w = p.expand(w)
	var parts []string
	if p.OS == "windows" {
		parts = windowsComponents(w, p.Dir)
	} else {
		parts = unixComponents(w, p.Dir)
	}
	if p.OS == "darwin" {
		// APFS finds a name whatever its Unicode normalization.
		for i, c := range parts {
			parts[i] = norm.NFC.String(c)
		}
	}
	return parts
}

// expand writes out a leading "~" (the home directory) and the variables
// of Vars ($NAME, ${NAME}, and on Windows %NAME% and PowerShell's
// $env:NAME, names without regard to case).
func (p *Protected) expand(w string) string {
	if p.Home != "" && len(w) >= 2 && w[0] == '~' && (w[1] == '/' || p.OS == "windows" && w[1] == '\\') {
		w = p.Home + w[1:]
	}
	if len(p.Vars) == 0 && p.Home == "" || !strings.ContainsAny(w, "$%") {
		return w
	}
	var b strings.Builder
	for i := 0; i < len(w); {
		name, n := varAt(w[i:], p.OS == "windows")
		v, ok := p.lookup(name)
		if n == 0 || !ok {
			b.WriteByte(w[i])
			i++
			continue
		}
		b.WriteString(v)
		i += n
	}
	return b.String()
}

// lookup returns the value of the variable name.
func (p *Protected) lookup(name string) (string, bool) {
	if name == "" {
		return "", false
	}
	if name == "HOME" && p.Home != "" {
		return p.Home, true
	}
	if v, ok := p.Vars[name]; ok {
		return v, true
	}
	if p.OS == "windows" {
		for k, v := range p.Vars {
			if strings.EqualFold(k, name) {
				return v, true
			}
		}
	}
	return "", false
}

// varAt reads a variable's reference at the start of s: its name and
// length, or a length of 0.
func varAt(s string, windows bool) (name string, n int) {
	word := func(s string) int {
		i := 0
		for i < len(s) && (isLetter(s[i]) || s[i] == '_' || i > 0 && isDigit(s[i])) {
			i++
		}
		return i
	}
	switch {
	case strings.HasPrefix(s, "${"):
		if end := strings.IndexByte(s, '}'); end > 2 {
			return s[2:end], end + 1
		}
	case windows && len(s) > 5 && strings.EqualFold(s[:5], "$env:"):
		k := word(s[5:])
		return s[5 : 5+k], 5 + k
	case s != "" && s[0] == '$':
		k := word(s[1:])
		return s[1 : 1+k], 1 + k
	case windows && s != "" && s[0] == '%':
		if end := strings.IndexByte(s[1:], '%'); end > 0 {
			return s[1 : 1+end], end + 2
		}
	}
	return "", 0
}

// unixComponents is w, absolute (from dir) and clean, split at its
// slashes.
func unixComponents(w, dir string) []string {
	w, ok := unixClean(w, dir)
	switch {
	case !ok:
		return nil
	case w == "/":
		return []string{}
	}
	return strings.Split(w[1:], "/")
}

// unixClean is w absolute (from dir) and clean; false when it cannot be
// made absolute.
func unixClean(w, dir string) (string, bool) {
	if !strings.HasPrefix(w, "/") {
		if dir == "" {
			return "", false
		}
		w = dir + "/" + w
	}
	return path.Clean(w), true
}

// windowsComponents is the Windows path w, absolute (from dir) and clean:
// its drive ("c:") or UNC share ("//host/share"), then its components,
// each without what Windows ignores (trailing dots and spaces) or reads as
// a stream of the file (from a colon on).
func windowsComponents(w, dir string) []string {
	// The working directory's components; none for a directory that is
	// not absolute itself.
	fromDir := func() []string {
		if dir == "" {
			return nil
		}
		return windowsComponents(dir, "")
	}
	w = strings.ReplaceAll(w, `\`, "/")
	// Win32's device and verbatim prefixes, and NT's, name the path that
	// follows.
	for _, pre := range []string{"//?/", "//./", "/??/"} {
		if strings.HasPrefix(w, pre) {
			w = w[len(pre):]
			if len(w) >= 4 && strings.EqualFold(w[:4], "UNC/") {
				w = "//" + w[4:]
			}
			break
		}
	}
	if len(w) >= 3 && w[0] == '/' && isDrivePath(w[1:]) {
		w = w[1:] // a file: URL's path, /C:/...
	}
	var root, rest string
	switch {
	case strings.HasPrefix(w, "//"):
		host, after, _ := strings.Cut(strings.TrimLeft(w, "/"), "/")
		share, after, _ := strings.Cut(after, "/")
		root, rest = "//"+host+"/"+share, after
		if len(share) == 2 && share[1] == '$' && isLetter(share[0]) {
			// An administrative share is the drive itself: of this
			// machine by any of its names, which guard cannot list.
			root = string(lower(share[0])) + ":"
		}
	case len(w) >= 2 && w[1] == ':' && isLetter(w[0]):
		root, rest = string(lower(w[0]))+":", w[2:]
		if !strings.HasPrefix(rest, "/") {
			// Relative to the drive's working directory: guard's, when
			// on that drive.
			if d := fromDir(); len(d) > 0 && d[0] == root {
				return cleanWindows(append(d, strings.Split(rest, "/")...))
			}
		}
	case strings.HasPrefix(w, "/"):
		d := fromDir()
		if len(d) == 0 {
			return nil
		}
		root, rest = d[0], w // the working directory's drive
	default:
		d := fromDir()
		if len(d) == 0 {
			return nil
		}
		return cleanWindows(append(d, strings.Split(w, "/")...))
	}
	return cleanWindows(append([]string{root}, strings.Split(rest, "/")...))
}

// isDrivePath reports whether w starts with a drive and its root: C:/.
func isDrivePath(w string) bool {
	return len(w) >= 3 && isLetter(w[0]) && w[1] == ':' && w[2] == '/'
}

// cleanWindows cleans parts, whose first is the root, as Windows does.
func cleanWindows(parts []string) []string {
	out := parts[:1:1]
	for _, c := range parts[1:] {
		if c == ".." {
			if len(out) > 1 {
				out = out[:len(out)-1]
			}
			continue
		}
		if i := strings.IndexByte(c, ':'); i >= 0 {
			c = c[:i] // guard.db::$DATA, guard.db:stream
		}
		c = strings.TrimRight(c, ". ")
		if c == "" {
			continue
		}
		out = append(out, c)
	}
	return out
}

// protects reports whether the path of these components is a protected
// path or under one.
func (p *Protected) protects(parts []string) bool {
	if parts == nil {
		return false
	}
	for _, k := range p.keys {
		if len(parts) >= len(k) && p.same(parts[:len(k)], k) {
			return true
		}
	}
	return false
}

// same reports whether the components of a path are those of a protected
// one.
func (p *Protected) same(parts, key []string) bool {
	for i, c := range parts {
		switch {
		case c == key[i]:
		case p.fold() && strings.EqualFold(c, key[i]):
		case p.OS == "windows" && i > 0 && couldBeShort(c, key[i]):
		default:
			return false
		}
	}
	return true
}

// couldBeShort reports whether name could be the 8.3 short name Windows
// gave long: a base of up to six characters, "~", digits, and an
// extension of up to three, whose base starts as long does, without the
// spaces and dots Windows leaves out (it keeps two characters of the name
// where it hashes the rest: GU1A2B~1).
func couldBeShort(name, long string) bool {
	base, rest, ok := strings.Cut(name, "~")
	if !ok || base == "" || len(base) > 6 {
		return false
	}
	digits, ext, _ := strings.Cut(rest, ".")
	if digits == "" || strings.Trim(digits, "0123456789") != "" || len(ext) > 3 {
		return false
	}
	stem := long
	if i := strings.LastIndexByte(long, '.'); i > 0 {
		stem = long[:i]
	}
	stem = strings.NewReplacer(" ", "", ".", "").Replace(stem)
	n := min(2, len(base), len(stem))
	if n == 0 {
		return false
	}
	if !isASCII(stem[:n]) {
		return true // Windows writes such characters its own way
	}
	return strings.EqualFold(base[:n], stem[:n])
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
