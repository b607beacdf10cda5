package sandbox

import (
	"bufio"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// mount is one line of /proc/self/mountinfo.
type mount struct {
	dev   string // major:minor of the file system
	root  string // the directory of the file system mounted here
	point string // where it is mounted
}

// parseMountinfo reads /proc/self/mountinfo's format, in its order (a later
// mount on the same point covers an earlier one).
func parseMountinfo(r io.Reader) ([]mount, error) {
	var ms []mount
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			return nil, fmt.Errorf("mountinfo: short line %q", sc.Text())
		}
		ms = append(ms, mount{dev: f[2], root: unescapeMount(f[3]), point: unescapeMount(f[4])})
	}
	return ms, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// within reports whether p is dir or below it (both clean and absolute).
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// containing returns the mount that p (clean, absolute, without symlinks)
// is on: the last mount at the longest mount point above p.
func containing(ms []mount, p string) (mount, bool) {
	best, found := mount{}, false
	for _, m := range ms {
		if within(p, m.point) && (!found || len(m.point) >= len(best.point)) {
			best, found = m, true
		}
	}
	return best, found
}

// aliases returns the other paths at which p's directory or file is
// reachable through another mount of the same file system (a bind mount of
// a directory above it, say), as candidates: the caller checks that each
// is the same file.
func aliases(ms []mount, p string) []string {
	m, ok := containing(ms, p)
	if !ok {
		return nil
	}
	rel, err := filepath.Rel(m.point, p)
	if err != nil {
		return nil
	}
	fsPath := filepath.Join(m.root, rel) // p as a path inside its file system
	var out []string
	for _, n := range ms {
		if n.dev != m.dev || n.point == m.point || !within(fsPath, n.root) {
			continue
		}
		r, err := filepath.Rel(n.root, fsPath)
		if err != nil {
			continue
		}
		if a := filepath.Join(n.point, r); a != p {
			out = append(out, a)
		}
	}
	return out
}

// ancestors returns the directories above each path, below "/", each
// once, shortest first: the order in which binding each onto itself keeps
// the mounts below it.
func ancestors(paths []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range paths {
		for d := filepath.Dir(p); d != "/" && d != "."; d = filepath.Dir(d) {
			if !seen[d] {
				seen[d] = true
				out = append(out, d)
			}
		}
	}
	sortByDepth(out)
	return out
}

// sortByDepth orders paths so that a directory comes before what is below it.
func sortByDepth(ps []string) {
	sort.SliceStable(ps, func(i, j int) bool {
		di, dj := strings.Count(ps[i], "/"), strings.Count(ps[j], "/")
		if di != dj {
			return di < dj
		}
		return ps[i] < ps[j]
	})
}

// outermost drops the paths below another path of the list: hiding a
// directory hides what is in it.
func outermost(ps []string) []string {
	sorted := append([]string(nil), ps...)
	sortByDepth(sorted)
	var out []string
next:
	for _, p := range sorted {
		for _, o := range out {
			if within(p, o) {
				continue next
			}
		}
		out = append(out, p)
	}
	return out
}
